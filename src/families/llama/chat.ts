import { randomUUID } from 'node:crypto';
import { LlamaChat, LlamaCompletion, type ChatModelFunctions, type LlamaCompletionGenerationOptions, type LlamaChatResponseChunk, type LlamaContext, type LlamaContextSequence, type LlamaModel, type LLamaChatGenerateResponseOptions, type Token } from 'node-llama-cpp';
import { OverloadedError, UnsupportedError } from '../../core/errors.js';
import { PushQueue } from '../../core/push-queue.js';
import { MEDIA_MARKER, type ChatDelta, type ChatModel, type ChatRequest, type ChatUsage, type CompletionRequest, type TokenLogprob } from '../../core/tasks/chat.js';
import type { DecodeGate } from '../../runtimes/llama/decode-gate.js';
import { KvCacheFullError } from '../../runtimes/llama/kv-cells.js';
import type { MediaProjector, RequestMedia } from '../../runtimes/llama/mtmd.js';
import type { SequenceStateCache } from '../../runtimes/llama/state-cache.js';
import { GrowingContext, type ChatContextState } from './chat-context.js';
import { checkedTokens, completionPrompt } from './completion-prompt.js';
import { ScoredPrefixes } from './scored-prefixes.js';
import { answerLogprobs, promptLogprobs } from './token-logprobs.js';
import { ChatOptions, finishOf } from './chat-options.js';
import type { Slot } from './conversation-slots.js';
import { fingerprint, pickSlot, pickSlotForTokens, reusedTokens } from './slot-choice.js';

/**
 * The llama.cpp chat backend: one model, one context with `parallel`
 * sequences, and ConversationSlots handing a sequence to each request
 * (queueing beyond, 503 beyond the queue). Requests on different sequences
 * are decoded in the same batches, so they really run at the same time, in
 * lock step (decode-gate.ts: each batch carries every generating sequence).
 * A sequence keeps its tokens between requests, and a request is given the
 * free sequence that already holds most of its conversation (or the
 * conversation is restored from host memory), so the next turn only
 * evaluates what is new. A conversation longer than a default-sized context
 * grows the context (a new one, the sequences' conversations carried over
 * through the host cache) where the memory budget allows. A model
 * registered with its projector takes images and audio in user turns
 * (runtimes/llama/mtmd.ts). The loader is chat-loader.ts; the context and
 * its growth chat-context.ts; what a request asks of node-llama-cpp
 * chat-options.ts; which sequence a request takes slot-choice.ts.
 */

export interface ChatModelOptions {
  temperature?: number;
  log: (message: string) => void;
  /** Conversations kept in host memory (also what carries them into a grown context). */
  cache?: SequenceStateCache;
  /** A context of this many tokens per conversation, ready to serve; absent where the size is the user's. */
  grow?: (tokens: number) => Promise<ChatContextState>;
}

export class LlamaChatModel implements ChatModel {
  private readonly contexts: GrowingContext;
  private readonly requests: ChatOptions;
  /** Running generations by their caller's name (ChatRequest.generationId), for hold: their sequence, what stops them, and what resumes one held. */
  private readonly generations = new Map<string, { slot: Slot; gate: DecodeGate; stopped: AbortSignal; resume?: () => void }>();
  /** Warm-ups under way (prefill): the messages each evaluates, and when it is done. */
  /** Prompts scored position by position (echo with logprobs), for the next prompt that shares a prefix. */
  private readonly scored = new ScoredPrefixes();
  private readonly prefilling = new Set<{ fingerprints: readonly string[]; done: Promise<void> }>();

  constructor(
    readonly model: LlamaModel,
    state: ChatContextState,
    private readonly projector: MediaProjector | undefined,
    private readonly options: ChatModelOptions,
  ) {
    const name = model.fileInfo.metadata.general?.name ?? 'chat model';
    this.contexts = new GrowingContext(state, { name, log: options.log, cache: options.cache, grow: options.grow });
    this.requests = new ChatOptions(model, options.temperature);
  }

  private get state(): ChatContextState {
    return this.contexts.state;
  }

  get context(): LlamaContext {
    return this.state.context;
  }

  get memoryBytes(): number {
    // context.stateSize is 0 until tokens are evaluated, but the KV cache is allocated whole at creation.
    return this.model.size + Math.max(this.state.context.stateSize, this.state.info.bytes) + (this.projector?.bytes ?? 0);
  }

  get contextSize(): number {
    return this.state.info.contextSize;
  }

  /** Requests waiting for a free sequence right now. */
  get queued(): number {
    return this.state.slots.pool.waiting;
  }

  async dispose(): Promise<void> {
    this.state.slots.pool.rejectAll(new OverloadedError('The model was unloaded while this request waited.'));
    await this.projector?.dispose();
    await this.state.context.dispose();
    await this.options.cache?.dispose();
    await this.model.dispose();
  }

  async countTokens(request: ChatRequest): Promise<number> {
    const media = await this.prepareMedia(request);
    try {
      const messages = media ? request.messages.map((m, i) => ({ ...m, content: media.contents[i]! })) : request.messages;
      const { prompt } = this.requests.promptOf(request, messages);
      return prompt.length + (this.projector?.extraCellsIn(prompt) ?? 0);
    } finally {
      media?.release();
    }
  }

  async tokenCounts(texts: readonly string[]): Promise<number[]> {
    return texts.map((text) => this.model.tokenize(text).length);
  }

  async *generate(request: ChatRequest, signal: AbortSignal): AsyncIterable<ChatDelta> {
    const media = await this.prepareMedia(request);
    try {
      yield* this.generateWith(request, media, signal);
    } finally {
      media?.release();
    }
  }

  /** The request's images and audio, tokenized for the model; undefined for a text-only request. */
  private async prepareMedia(request: ChatRequest): Promise<RequestMedia | undefined> {
    const first = request.messages.flatMap((m) => m.media ?? [])[0];
    if (!first) return undefined;
    if (!this.projector) {
      throw new UnsupportedError(
        `This build of lserve has no image or audio input here: llama.cpp's multimodal library comes with lserve's own llama.cpp binary for linux-x64, and model '${request.model}' runs on another (LSERVE_LLAMA_BUILD, or another platform). Send text only.`,
        { param: first.param, code: 'no_media_runtime' },
      );
    }
    return this.projector.prepare(request.messages, MEDIA_MARKER);
  }

  async prefill(request: ChatRequest, signal: AbortSignal): Promise<void> {
    const fingerprints = request.messages.map((m) => fingerprint(m));
    // Known before anything is awaited, so that the request continuing the conversation, sent right after, waits for it.
    const entry = { fingerprints, done: this.evaluateAhead(request, fingerprints, signal) };
    this.prefilling.add(entry);
    await entry.done.finally(() => this.prefilling.delete(entry));
  }

  private async evaluateAhead(request: ChatRequest, fingerprints: string[], signal: AbortSignal): Promise<void> {
    await this.contexts.settled();
    const { slots, gate, info } = this.state;
    // Never queued (a warm-up that would wait is late), and with several sequences one stays free for whatever request comes meanwhile.
    const keepFree = slots.pool.size > 1 ? 1 : 0;
    if (request.messages.some((m) => m.media?.length) || slots.pool.available <= keepFree || slots.pool.waiting > 0) return;
    const { prompt } = this.requests.promptOf(request, request.messages);
    if (prompt.length >= info.contextSize) return;
    const slot = await slots.take(prompt, (free) => pickSlot(free, fingerprints), { growth: 0, signal });
    try {
      const from = slot.sequence.nextTokenIndex;
      if (from < prompt.length && !signal.aborted) await slot.sequence.evaluateWithoutGeneratingNewTokens(prompt.slice(from));
      slot.held = fingerprints;
    } finally {
      gate.leave(slot.sequence);
      slots.release(slot);
    }
  }

  async hold(generationId: string, ms: number): Promise<void> {
    const generation = this.generations.get(generationId);
    if (!generation || generation.resume || generation.stopped.aborted) return;
    let ended!: () => void;
    const until = new Promise<void>((resolve) => (ended = resolve));
    const resume = () => {
      clearTimeout(timer);
      generation.stopped.removeEventListener('abort', resume);
      generation.resume = undefined;
      ended();
    };
    const timer = setTimeout(resume, ms);
    // A generation stopped while held (a barge-in) stops at once, not when the hold runs out.
    generation.stopped.addEventListener('abort', resume, { once: true });
    generation.resume = resume;
    generation.gate.pause(generation.slot.sequence, until);
  }

  async resume(generationId: string): Promise<void> {
    this.generations.get(generationId)?.resume?.();
  }

  async renderPrompt(request: ChatRequest): Promise<string> {
    const { prompt } = this.requests.promptOf(request, request.messages);
    return this.model.detokenize(prompt, true);
  }

  async tokenize(text: string, parseSpecial = true): Promise<number[]> {
    return this.model.tokenize(text, parseSpecial);
  }

  async detokenize(tokens: readonly number[]): Promise<string> {
    return this.model.detokenize(checkedTokens(this.model, tokens, 'tokens'), true);
  }

  async *complete(request: CompletionRequest, signal: AbortSignal): AsyncIterable<ChatDelta> {
    const prompt = completionPrompt(this.model, request, request.model);
    const grammar = await this.requests.grammarFor(request, false);
    const tokenBias = this.requests.tokenBiasFor(request);
    // A raw prompt is no conversation: the free sequence holding most of its tokens.
    const { slot, state } = await this.contexts.take(prompt.tokens, prompt.tokens.length, (free) => pickSlotForTokens(free, prompt.tokens), request.maxTokens, signal);
    const { slots, gate, info } = state;
    const room = info.contextSize - prompt.tokens.length;
    const top = request.logprobs;
    // Scoring the prompt evaluates what no recently scored prompt shares (token-logprobs.ts).
    const scorePrompt = top !== undefined && request.echo === true;
    const cachedPromptTokens = scorePrompt ? 0 : reusedTokens(slot.sequence, prompt.tokens);
    const stop = new AbortController();
    const queue = new PushQueue<ChatDelta>();
    queue.push({ type: 'start', promptTokens: prompt.tokens.length, cachedPromptTokens });
    const completion = new LlamaCompletion({ contextSequence: slot.sequence });
    const answer: Token[] = [];
    // The tokens sampled: the sequence's meter counts every position whose logits were computed,
    // which also counts the prompt's scoring and a prompt decoded across batches shared with other sequences.
    const usage = () => ({ promptTokens: prompt.tokens.length, cachedPromptTokens, completionTokens: answer.length, reasoningTokens: 0 });
    const options: LlamaCompletionGenerationOptions = {
      signal: AbortSignal.any([signal, stop.signal]),
      stopOnAbortSignal: true,
      maxTokens: Math.min(request.maxTokens ?? room, room),
      ...this.requests.sampling(request),
      tokenBias,
      grammar,
      customStopTriggers: request.stop?.length ? request.stop : undefined,
      onToken: (tokens) => answer.push(...tokens),
      onTextChunk: (text) => {
        if (text !== '') queue.push({ type: 'content', text });
      },
    };
    slot.held = [];
    const work = async () => {
      if (scorePrompt) {
        queue.push({ type: 'logprobs', part: 'prompt', tokens: await promptLogprobs(this.model, slot.sequence, prompt.tokens, top, this.scored) });
      }
      // max_tokens 0 (with echo: the prompt scored, nothing generated).
      if (request.maxTokens === 0) return queue.push({ type: 'done', finishReason: 'length', stopSequence: null, usage: usage() });
      const { metadata } = await (prompt.suffix ? completion.generateInfillCompletionWithMeta(prompt.prefix, prompt.suffix, options) : completion.generateCompletionWithMeta(prompt.prefix, options));
      const used = usage();
      if (top !== undefined) queue.push({ type: 'logprobs', part: 'answer', tokens: await answerLogprobs(this.model, slot.sequence, prompt.tokens, answer, top) });
      const stopSequence = metadata.stopReason === 'customStopTrigger' ? metadata.customStopTrigger.filter((part) => typeof part === 'string').join('') : null;
      queue.push({ type: 'done', finishReason: metadata.stopReason === 'maxTokens' ? 'length' : 'stop', stopSequence, usage: used });
    };
    const done = work()
      .finally(() => gate.leave(slot.sequence))
      .then(() => queue.end(), endOnFailure(queue, usage));
    try {
      yield* queue;
    } finally {
      stop.abort();
      await done;
      completion.dispose({ disposeSequence: false });
      slots.release(slot);
    }
  }

  /**
   * The answer's tokens scored (token-logprobs.ts): all that was generated
   * after the prompt (a thought included) is evaluated again, and the
   * answer's own tokens, the last ones, are kept.
   */
  private async scoreAnswer(sequence: LlamaContextSequence, prompt: Token[], answer: Token[], top: number): Promise<TokenLogprob[]> {
    const generated = sequence.contextTokens.slice(prompt.length);
    // Where the answer stands among them: the last place its tokens do, after any thought.
    const find = () => {
      for (let start = generated.length - answer.length; start >= 0; start--) if (answer.every((t, i) => generated[start + i] === t)) return start;
      return -1;
    };
    let start = find();
    // The last token sampled is not evaluated into the sequence until the next one is asked for.
    if (start < 0 && answer.length > 0) {
      generated.push(answer.at(-1)!);
      start = find();
    }
    if (start < 0) return [];
    const scored = await answerLogprobs(this.model, sequence, prompt, generated.slice(0, start + answer.length), top);
    return scored.slice(start);
  }

  private async *generateWith(request: ChatRequest, media: RequestMedia | undefined, signal: AbortSignal): AsyncIterable<ChatDelta> {
    // Everything that can reject the request happens before it takes a sequence.
    const messages = media ? request.messages.map((m, i) => ({ ...m, content: media.contents[i]! })) : request.messages;
    const { history, functions, wrapper, prompt } = this.requests.promptOf(request, messages);
    const grammar = await this.requests.grammarFor(request, functions !== undefined);
    if (request.logprobs !== undefined && (functions !== undefined || media)) {
      throw new UnsupportedError('logprobs cannot be combined with tools or image and audio input on this engine.', { param: 'logprobs' });
    }
    // KV cells, which is what the context holds and what llama.cpp's server counts: a media item's embeddings, not its positions.
    const promptTokens = prompt.length + (this.projector?.extraCellsIn(prompt) ?? 0);
    const tokenBias = this.requests.tokenBiasFor(request);
    const fingerprints = request.messages.map((m, i) => fingerprint(m, media?.hashes[i]));

    // A warm-up under way of this conversation (all but its last message, the turn it left open, the same): the sequence it fills is the one to take.
    const warming = [...this.prefilling].filter((p) => p.fingerprints.slice(0, -1).every((f, i) => f === fingerprints[i]));
    if (warming.length > 0) await Promise.allSettled(warming.map((p) => p.done));
    const { slot, state } = await this.contexts.take(prompt, promptTokens, (free) => pickSlot(free, fingerprints), request.maxTokens, signal);
    const { slots, gate, info } = state;
    const room = info.contextSize - promptTokens;
    const maxTokens = Math.min(request.maxTokens ?? room, room);
    const reused = reusedTokens(slot.sequence, prompt);
    const cachedPromptTokens = reused + (this.projector?.extraCellsIn(prompt.slice(0, reused)) ?? 0);
    const stop = new AbortController();
    const abort = AbortSignal.any([signal, stop.signal]);
    const { generationId } = request;
    if (generationId) this.generations.set(generationId, { slot, gate, stopped: abort });
    const queue = new PushQueue<ChatDelta>();
    queue.push({ type: 'start', promptTokens, cachedPromptTokens });
    const chat = new LlamaChat({ contextSequence: slot.sequence, chatWrapper: wrapper });
    const outputBefore = slot.sequence.tokenMeter.usedOutputTokens;
    let content = '';
    let afterThought = false;
    let reasoningTokens = 0;
    // The answer's own tokens (not its thought), to score when asked.
    const answerTokens: Token[] = [];
    const onResponseChunk = (chunk: LlamaChatResponseChunk) => {
      if (chunk.type === 'segment') reasoningTokens += chunk.tokens.length;
      else if (request.logprobs !== undefined) answerTokens.push(...chunk.tokens);
      if (chunk.text === '') return;
      if (chunk.type === 'segment') {
        afterThought = true;
        queue.push({ type: 'reasoning', text: chunk.text });
        return;
      }
      // Templates put a blank line between </think> and the answer; it is not part of the answer.
      const text = afterThought && content === '' ? chunk.text.trimStart() : chunk.text;
      if (text === '') return;
      content += text;
      queue.push({ type: 'content', text });
    };
    const calls: Array<{ id: string; name: string; arguments: string }> = [];
    const usage = () => ({ promptTokens, cachedPromptTokens, completionTokens: slot.sequence.tokenMeter.usedOutputTokens - outputBefore, reasoningTokens });
    const options: LLamaChatGenerateResponseOptions<ChatModelFunctions | undefined> = {
      signal: abort,
      stopOnAbortSignal: true,
      maxTokens,
      ...this.requests.sampling(request),
      tokenBias,
      customStopTriggers: request.stop?.length ? request.stop : undefined,
      budgets: { thoughtTokens: request.thinkingBudget ?? Infinity },
      onResponseChunk,
      ...(functions
        ? {
            functions,
            documentFunctionParams: true,
            maxParallelFunctionCalls: request.parallelToolCalls === false ? 1 : undefined,
            onFunctionCall: (call) => {
              const made = { id: `call_${randomUUID().replaceAll('-', '').slice(0, 24)}`, name: call.functionName, arguments: JSON.stringify(call.params ?? {}) };
              calls.push(made);
              queue.push({ type: 'tool_call', index: calls.length - 1, call: made });
            },
          }
        : { grammar }),
    };
    const done = chat.generateResponse(history, options).finally(() => gate.leave(slot.sequence)).then(
      async (response) => {
        const used = usage();
        if (request.logprobs !== undefined) queue.push({ type: 'logprobs', part: 'answer', tokens: await this.scoreAnswer(slot.sequence, prompt, answerTokens, request.logprobs) });
        queue.push({ type: 'done', ...finishOf(response), usage: used });
        queue.end();
        slot.held = [...fingerprints, fingerprint({ role: 'assistant', content, toolCalls: calls })];
      },
      (error: unknown) => {
        slot.held = [];
        endOnFailure(queue, usage)(error);
      },
    );
    try {
      yield* queue;
    } finally {
      // Consumer gone early (client disconnect, error downstream): stop at the next token.
      stop.abort();
      if (generationId) {
        this.generations.get(generationId)?.resume?.();
        this.generations.delete(generationId);
      }
      await done;
      chat.dispose({ disposeSequence: false });
      slots.release(slot);
    }
  }
}

/** A generation's failure: the shared KV cache with no room for the next token (other conversations fill it) ends the answer there; anything else fails it. */
function endOnFailure(queue: PushQueue<ChatDelta>, usage: () => ChatUsage): (error: unknown) => void {
  return (error) => {
    if (error instanceof KvCacheFullError) {
      queue.push({ type: 'done', finishReason: 'length', stopSequence: null, usage: usage() });
      queue.end();
    } else {
      queue.fail(error);
    }
  };
}
