import {
  TokenBias,
  type ChatModelFunctions,
  type GbnfJsonSchema,
  type LlamaChatResponse,
  type LlamaGrammar,
  type LlamaModel,
  type LLamaChatGenerateResponseOptions,
  type Token,
} from 'node-llama-cpp';
import { InvalidRequestError, UnsupportedError } from '../../core/errors.js';
import type { ChatRequest, FinishReason } from '../../core/tasks/chat.js';
import { vocabularySize } from '../../runtimes/llama/runtime.js';
import { toChatHistory, toFunctions } from './chat-history.js';
import { ChatWrappers } from './chat-wrapper.js';

/** What sampling reads of a chat or completion request. */
type Sampling = Pick<ChatRequest, 'temperature' | 'topP' | 'topK' | 'minP' | 'seed' | 'presencePenalty' | 'frequencyPenalty' | 'repeatPenalty'>;

/**
 * What a chat request asks of node-llama-cpp, for one model: its prompt
 * (history, tools and template), sampling, grammar and token bias; and how
 * an answer ended, in the task's words. Everything here can reject a request,
 * so it all happens before the request takes a sequence.
 */
export class ChatOptions {
  private readonly wrappers: ChatWrappers;
  private jsonGrammar: Promise<LlamaGrammar> | undefined;

  constructor(
    private readonly model: LlamaModel,
    /** The model's temperature where a request gives none (a catalog entry's). */
    private readonly defaultTemperature: number | undefined,
  ) {
    this.wrappers = new ChatWrappers(model);
  }

  /** The tokenized prompt of `request` with these messages, and how it was made. */
  promptOf(request: ChatRequest, messages: ChatRequest['messages']) {
    const history = toChatHistory(messages);
    const useTools = request.tools !== undefined && request.tools.length > 0 && request.toolChoice !== 'none';
    const functions = useTools ? this.functionsFor(request) : undefined;
    const deferred = (request.tools ?? []).filter((tool) => tool.deferred).map((tool) => tool.name);
    const wrapper = this.wrappers.get(
      {
        thinking: request.thinking,
        effort: request.reasoningEffort,
        requireFunctionCall: functions !== undefined && (request.toolChoice === 'required' || typeof request.toolChoice === 'object'),
      },
      deferred.length ? (name) => !deferred.includes(name) : undefined,
    );
    const prompt = wrapper
      .generateContextState({ chatHistory: history, availableFunctions: functions, documentFunctionParams: true })
      .contextText.tokenize(this.model.tokenizer);
    return { history, functions, wrapper, prompt };
  }

  sampling(request: Sampling): Pick<LLamaChatGenerateResponseOptions, 'temperature' | 'topP' | 'topK' | 'minP' | 'seed' | 'repeatPenalty'> {
    const temperature = request.temperature ?? this.defaultTemperature ?? 0.8;
    const penalties = (request.presencePenalty ?? 0) !== 0 || (request.frequencyPenalty ?? 0) !== 0 || (request.repeatPenalty ?? 1) !== 1;
    return {
      temperature,
      // llama.cpp server's sampling defaults where the request says nothing.
      topP: request.topP ?? 0.95,
      topK: request.topK ?? 40,
      minP: request.minP ?? 0.05,
      seed: request.seed,
      // OpenAI semantics: no repetition penalty unless one is asked for (Ollama's repeat_penalty, or presence/frequency penalties).
      repeatPenalty: penalties
        ? { penalty: request.repeatPenalty ?? 1, presencePenalty: request.presencePenalty ?? 0, frequencyPenalty: request.frequencyPenalty ?? 0, lastTokens: 64, penalizeNewLine: true }
        : false,
    };
  }

  private functionsFor(request: ChatRequest): ChatModelFunctions {
    let tools = request.tools ?? [];
    if (typeof request.toolChoice === 'object') {
      const name = request.toolChoice.name;
      tools = tools.filter((t) => t.name === name);
      if (tools.length === 0) throw new InvalidRequestError(`tool_choice names '${name}', which is not in tools.`, { param: 'tool_choice' });
    }
    return toFunctions(tools);
  }

  async grammarFor(request: Pick<ChatRequest, 'responseFormat'>, hasFunctions: boolean): Promise<LlamaGrammar | undefined> {
    const format = request.responseFormat;
    if (!format || format.type === 'text') return undefined;
    if (hasFunctions) throw new UnsupportedError('response_format cannot be combined with tools on this engine.', { param: 'response_format' });
    // The model's own runtime: a grammar from another (a default binary that changed since this model loaded) is refused.
    const llama = this.model.llama;
    if (format.type === 'json_object') {
      this.jsonGrammar ??= llama.getGrammarFor('json');
      return this.jsonGrammar;
    }
    try {
      return await llama.createGrammarForJsonSchema<GbnfJsonSchema>(format.schema as GbnfJsonSchema);
    } catch (error) {
      throw new UnsupportedError(`response_format.json_schema.schema cannot be enforced: ${(error as Error).message}`, {
        param: 'response_format.json_schema.schema',
      });
    }
  }

  tokenBiasFor(request: Pick<ChatRequest, 'logitBias'>): TokenBias | undefined {
    const entries = Object.entries(request.logitBias ?? {});
    if (entries.length === 0) return undefined;
    const bias = new TokenBias(this.model.tokenizer);
    const vocab = vocabularySize(this.model) || Infinity;
    for (const [key, value] of entries) {
      const token = Number(key);
      if (!Number.isInteger(token) || token < 0 || token >= vocab) {
        throw new InvalidRequestError(`logit_bias: '${key}' is not a token id of this model.`, { param: 'logit_bias' });
      }
      const logit = value <= -100 ? -Infinity : value;
      if (this.model.tokenizer.isEogToken(token as Token)) endBias(bias, token, logit);
      else bias.set(token as Token, logit === -Infinity ? 'never' : { logit });
    }
    return bias;
  }
}

/**
 * A bias on an end-of-generation token (<|im_end|>, <|endoftext|>): what
 * OpenAI's logit_bias and llama.cpp's server do with it, ban or force the end.
 * node-llama-cpp's TokenBias.set skips these tokens without a word, so the
 * entry goes into its bias table directly (node-llama-cpp is pinned to one
 * version in package.json); the sampler applies it like any other.
 */
function endBias(bias: TokenBias, token: number, logit: number): void {
  const table = (bias as unknown as { _biases?: unknown })._biases;
  if (!(table instanceof Map)) throw new UnsupportedError('logit_bias on end-of-generation tokens is not supported by this node-llama-cpp version.', { param: 'logit_bias' });
  table.set(token, logit);
}

export function finishOf(response: LlamaChatResponse<ChatModelFunctions | undefined>): { finishReason: FinishReason; stopSequence: string | null } {
  const meta = response.metadata;
  if (meta.stopReason === 'customStopTrigger') {
    return { finishReason: 'stop', stopSequence: meta.customStopTrigger.filter((p): p is string => typeof p === 'string').join('') };
  }
  const reason: FinishReason = meta.stopReason === 'maxTokens' ? 'length' : meta.stopReason === 'functionCalls' ? 'tool_calls' : 'stop';
  return { finishReason: reason, stopSequence: null };
}
