import type { LoadedModel } from '../../../core/loader.js';
import type { ChatDelta, ChatModel, ChatRequest } from '../../../core/tasks/chat.js';
import { RunnerClient } from '../client.js';
import { asSent } from '../contract.js';
import type { RunnerProcess } from '../process.js';
import type { Loaded } from '../protocol.js';
import { assertModel, serve, type Served } from '../serving.js';

/** A chat model's properties, read once after the load. */
interface ChatProps {
  memoryBytes: number;
}

/** What changes while it serves: read after every call event in the runner, sent when changed. */
type ChatLive = Pick<ChatModel, 'queued' | 'contextSize' | 'memoryBytes'>;

/** The server's ChatModel for a chat model in a runner (llama.cpp). */
export class ChatRunnerClient extends RunnerClient<ChatModel, ChatProps> implements ChatModel {
  // Present only when the loaded model has them: the chat task asks `if (model.prefill)`.
  declare readonly prefill?: ChatModel['prefill'];
  declare readonly hold?: ChatModel['hold'];
  declare readonly resume?: ChatModel['resume'];
  declare readonly complete?: ChatModel['complete'];
  declare readonly renderPrompt?: ChatModel['renderPrompt'];
  declare readonly tokenize?: ChatModel['tokenize'];
  declare readonly detokenize?: ChatModel['detokenize'];

  constructor(runner: RunnerProcess, loaded: Loaded) {
    super(runner, loaded);
    if (this.remote.has('prefill')) this.prefill = (request, signal) => this.remote.call('prefill', request, signal);
    if (this.remote.has('hold')) this.hold = (generationId, ms) => this.remote.call('hold', generationId, ms);
    if (this.remote.has('resume')) this.resume = (generationId) => this.remote.call('resume', generationId);
    if (this.remote.has('renderPrompt')) this.renderPrompt = (request) => this.remote.call('renderPrompt', request);
    if (this.remote.has('tokenize')) this.tokenize = (text, parseSpecial) => this.remote.call('tokenize', text, parseSpecial);
    if (this.remote.has('detokenize')) this.detokenize = (tokens) => this.remote.call('detokenize', tokens);
    if (this.remote.has('complete')) this.complete = (request, signal) => this.remote.stream('complete', request, signal);
  }

  /** The live properties as the runner last reported them. */
  private get state(): ChatLive {
    return asSent<ChatLive>(this.runner.live);
  }

  get queued(): number | undefined {
    return this.state.queued;
  }

  get contextSize(): number {
    return this.state.contextSize;
  }

  /** Grows with the conversations a context keeps: live. */
  override get memoryBytes(): number {
    return this.state.memoryBytes;
  }

  generate(request: ChatRequest, signal: AbortSignal): AsyncIterable<ChatDelta> {
    return this.remote.stream('generate', request, signal);
  }

  countTokens(request: ChatRequest): Promise<number> {
    return this.remote.call('countTokens', request);
  }

  tokenCounts(texts: readonly string[]): Promise<number[]> {
    return this.remote.call('tokenCounts', texts);
  }
}

/** The runner's side: the loaded chat model's methods, and its live properties. */
export function serveChat(model: LoadedModel): Served {
  assertModel<ChatModel>(model, 'a chat model', ['generate', 'countTokens', 'tokenCounts']);
  return serve<ChatModel, ChatProps>({
    props: { memoryBytes: model.memoryBytes },
    live: (): ChatLive => ({ queued: model.queued, contextSize: model.contextSize, memoryBytes: model.memoryBytes }),
    methods: {
      generate: model.generate.bind(model),
      countTokens: model.countTokens.bind(model),
      tokenCounts: model.tokenCounts.bind(model),
      prefill: model.prefill?.bind(model),
      hold: model.hold?.bind(model),
      resume: model.resume?.bind(model),
      complete: model.complete?.bind(model),
      renderPrompt: model.renderPrompt?.bind(model),
      tokenize: model.tokenize?.bind(model),
      detokenize: model.detokenize?.bind(model),
    },
  });
}
