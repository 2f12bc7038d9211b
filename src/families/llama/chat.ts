import { randomUUID } from 'node:crypto';
import {
  LlamaChat,
  TokenBias,
  type ChatModelFunctions,
  type GbnfJsonSchema,
  type LlamaChatResponse,
  type LlamaChatResponseChunk,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaGrammar,
  type LlamaModel,
  type LLamaChatGenerateResponseOptions,
  type Token,
} from 'node-llama-cpp';
import { InvalidRequestError, OverloadedError, UnsupportedError } from '../../core/errors.js';
import { MEDIA_MARKER, type ChatDelta, type ChatModel, type ChatRequest, type FinishReason } from '../../core/tasks/chat.js';
import { vocabularySize } from '../../runtimes/llama/runtime.js';
import { toChatHistory, toFunctions } from './chat-history.js';
import { QueueFullError } from './chat-slots.js';
import { PushQueue } from '../../core/push-queue.js';
import { ChatWrappers } from './chat-wrapper.js';
import type { DecodeGate } from '../../runtimes/llama/decode-gate.js';
import { KvCacheFullError, type KvCells } from '../../runtimes/llama/kv-cells.js';
import type { MediaProjector, RequestMedia } from '../../runtimes/llama/mtmd.js';
import type { SequenceStateCache } from '../../runtimes/llama/state-cache.js';
import { ConversationSlots, type Slot } from './conversation-slots.js';

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
 * (runtimes/llama/mtmd.ts). The loader is chat-loader.ts.
 */

/** What the loader chose for a context, as the model reports and enforces it. */
export interface ChatContextInfo {
  /** Tokens one conversation may hold. */
  contextSize: number;
  trainContextSize: number;
  /** Asked for (`--ctx-size`, a size set at pull): never grown. */
  explicit: boolean;
  /** Where the size came from, for errors. */
  source: string;
  /** One KV cache shared by the sequences (`cells` counts it), or one each. */
  unified: boolean;
  sequences: number;
  cells?: KvCells;
  /** Estimated bytes of the context (its KV cache is allocated whole at creation). */
  bytes: number;
}

/** A context and what serves requests on it; replaced whole when the context grows. */
export interface ChatContextState {
  context: LlamaContext;
  info: ChatContextInfo;
  gate: DecodeGate;
  slots: ConversationSlots;
}

export interface ChatModelOptions {
  temperature?: number;
  log: (message: string) => void;
  /** Conversations kept in host memory (also what carries them into a grown context). */
  cache?: SequenceStateCache;
  /** A context of this many tokens per conversation, ready to serve; absent where the size is the user's. */
  grow?: (tokens: number) => Promise<ChatContextState>;
}

/** A request waited for a sequence of a context that was replaced by a larger one: it takes one of the new context. */
class ContextReplacedError extends Error {
  constructor() {
    super('the context was replaced');
  }
}

/** Tokens of answer room made for a request beside its prompt (more is used when free; see ConversationSlots). */
const EXPECTED_ANSWER_TOKENS = 4096;

export class LlamaChatModel implements ChatModel {
  private readonly wrappers: ChatWrappers;
  private jsonGrammar: Promise<LlamaGrammar> | undefined;
  /** Running generations by their caller's name (ChatRequest.generationId), for hold: their sequence, what stops them, and what resumes one held. */
  private readonly generations = new Map<string, { slot: Slot; gate: DecodeGate; stopped: AbortSignal; resume?: () => void }>();
  /** Warm-ups under way (prefill): the messages each evaluates, and when it is done. */
  private readonly prefilling = new Set<{ fingerprints: readonly string[]; done: Promise<void> }>();
  /** A context growing: requests wait for it before they take a sequence. */
  private growing: Promise<void> | undefined;

  constructor(
    readonly model: LlamaModel,
    private state: ChatContextState,
    private readonly projector: MediaProjector | undefined,
    private readonly options: ChatModelOptions,
  ) {
    this.wrappers = new ChatWrappers(model);
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
      const { prompt } = this.promptOf(request, messages);
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
    await this.growing;
    const { slots, gate, info } = this.state;
    // Never queued (a warm-up that would wait is late), and with several sequences one stays free for whatever request comes meanwhile.
    const keepFree = slots.pool.size > 1 ? 1 : 0;
    if (request.messages.some((m) => m.media?.length) || slots.pool.available <= keepFree || slots.pool.waiting > 0) return;
    const { prompt } = this.promptOf(request, request.messages);
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

  /** The tokenized prompt of `request` with these messages, and how it was made. */
  private promptOf(request: ChatRequest, messages: ChatRequest['messages']) {
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

  /**
   * Makes sure a conversation of `promptTokens` fits the context, growing a
   * default-sized context (to the next doubling with room for an answer, at
   * most the training context) where the memory budget allows; otherwise a
   * 400 that says the real limit and what raises it.
   */
  private async fit(promptTokens: number): Promise<void> {
    await this.growing;
    const info = this.state.info;
    if (promptTokens < info.contextSize) return;
    const grow = this.options.grow;
    if (!grow || info.contextSize >= info.trainContextSize) throw contextExceeded(promptTokens, info);
    let target = info.contextSize;
    while (target < promptTokens + Math.min(EXPECTED_ANSWER_TOKENS, promptTokens / 4)) target *= 2;
    target = Math.min(target, info.trainContextSize);
    if (!this.growing) {
      this.growing = this.regrow(grow, target).finally(() => (this.growing = undefined));
    }
    try {
      await this.growing;
    } catch (error) {
      throw contextExceeded(promptTokens, info, error);
    }
    if (promptTokens >= this.state.info.contextSize) await this.fit(promptTokens);
  }

  /** Replaces the context by one of `tokens` per conversation once every sequence is free; what they held goes to the host cache first, to be restored into the new one. */
  private async regrow(grow: (tokens: number) => Promise<ChatContextState>, tokens: number): Promise<void> {
    const old = this.state;
    const never = new AbortController().signal;
    const taken: Slot[] = [];
    for (let i = 0; i < old.slots.pool.size; i++) taken.push(await old.slots.pool.acquire(never));
    const started = Date.now();
    try {
      if (this.options.cache) for (const slot of taken) if (slot.sequence.nextTokenIndex > 0) await this.options.cache.save(slot.sequence).catch(() => {});
      await old.context.dispose();
      try {
        this.state = await grow(tokens);
      } catch (error) {
        // Back to a context of the old size, so the model keeps serving what fits it.
        this.state = await grow(old.info.contextSize);
        throw error;
      }
      this.options.log(`${this.model.fileInfo.metadata.general?.name ?? 'chat model'}: context grown from ${old.info.contextSize} to ${this.state.info.contextSize} tokens for a longer conversation in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    } finally {
      old.slots.pool.rejectAll(new ContextReplacedError());
    }
  }

  /** A sequence for the prompt, on the context that serves it (taken again on the new one if it grows meanwhile). */
  private async takeSlot(prompt: Token[], promptTokens: number, fingerprints: string[], maxTokens: number | undefined, signal: AbortSignal): Promise<{ slot: Slot; state: ChatContextState }> {
    for (;;) {
      await this.fit(promptTokens);
      const state = this.state;
      const room = state.info.contextSize - promptTokens;
      try {
        const slot = await state.slots.take(prompt, (free) => pickSlot(free, fingerprints), { growth: Math.min(maxTokens ?? room, room, EXPECTED_ANSWER_TOKENS), signal });
        slot.lastUsed = performance.now();
        return { slot, state };
      } catch (error) {
        if (error instanceof ContextReplacedError) continue;
        if (error instanceof QueueFullError) throw new OverloadedError();
        throw error;
      }
    }
  }

  private async *generateWith(request: ChatRequest, media: RequestMedia | undefined, signal: AbortSignal): AsyncIterable<ChatDelta> {
    // Everything that can reject the request happens before it takes a sequence.
    const messages = media ? request.messages.map((m, i) => ({ ...m, content: media.contents[i]! })) : request.messages;
    const { history, functions, wrapper, prompt } = this.promptOf(request, messages);
    const grammar = await this.grammarFor(request, functions !== undefined);
    // KV cells, which is what the context holds and what llama.cpp's server counts: a media item's embeddings, not its positions.
    const promptTokens = prompt.length + (this.projector?.extraCellsIn(prompt) ?? 0);
    const tokenBias = this.tokenBiasFor(request);
    const fingerprints = request.messages.map((m, i) => fingerprint(m, media?.hashes[i]));

    // A warm-up under way of this conversation (all but its last message, the turn it left open, the same): the sequence it fills is the one to take.
    const warming = [...this.prefilling].filter((p) => p.fingerprints.slice(0, -1).every((f, i) => f === fingerprints[i]));
    if (warming.length > 0) await Promise.allSettled(warming.map((p) => p.done));
    const { slot, state } = await this.takeSlot(prompt, promptTokens, fingerprints, request.maxTokens, signal);
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
    const onResponseChunk = (chunk: LlamaChatResponseChunk) => {
      if (chunk.type === 'segment') reasoningTokens += chunk.tokens.length;
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
      ...this.sampling(request),
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
      (response) => {
        queue.push({ type: 'done', ...finishOf(response), usage: usage() });
        queue.end();
        slot.held = [...fingerprints, fingerprint({ role: 'assistant', content, toolCalls: calls })];
      },
      (error: unknown) => {
        slot.held = [];
        // The shared KV cache had no room for the next token (other conversations fill it): the answer ends there.
        if (error instanceof KvCacheFullError) {
          queue.push({ type: 'done', finishReason: 'length', stopSequence: null, usage: usage() });
          queue.end();
        } else {
          queue.fail(error);
        }
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

  private sampling(request: ChatRequest): Pick<LLamaChatGenerateResponseOptions, 'temperature' | 'topP' | 'topK' | 'minP' | 'seed' | 'repeatPenalty'> {
    const temperature = request.temperature ?? this.options.temperature ?? 0.8;
    const penalties = (request.presencePenalty ?? 0) !== 0 || (request.frequencyPenalty ?? 0) !== 0;
    return {
      temperature,
      // llama.cpp server's sampling defaults where the request says nothing.
      topP: request.topP ?? 0.95,
      topK: request.topK ?? 40,
      minP: 0.05,
      seed: request.seed,
      // OpenAI semantics: no repetition penalty unless presence/frequency penalties are asked for.
      repeatPenalty: penalties
        ? { penalty: 1, presencePenalty: request.presencePenalty ?? 0, frequencyPenalty: request.frequencyPenalty ?? 0, lastTokens: 64, penalizeNewLine: true }
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

  private async grammarFor(request: ChatRequest, hasFunctions: boolean): Promise<LlamaGrammar | undefined> {
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

  private tokenBiasFor(request: ChatRequest): TokenBias | undefined {
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
 * The 400 for a conversation the context cannot hold: the real limit per
 * conversation, and what would raise it.
 */
function contextExceeded(promptTokens: number, info: ChatContextInfo, growthFailed?: unknown): InvalidRequestError {
  const holds = `The conversation is ${promptTokens} tokens; this model's context holds ${info.contextSize} per conversation`;
  const why =
    info.contextSize >= info.trainContextSize
      ? `, the most it was trained for. Shorten the conversation`
      : info.explicit
        ? ` (${info.source}). Raise it with \`lserve serve --ctx-size <model>=<tokens>\` (the model was trained for ${info.trainContextSize})`
        : growthFailed
          ? ` and could not grow: ${(growthFailed as Error).message ?? String(growthFailed)}`
          : '';
  return new InvalidRequestError(`${holds}${why}.`, { param: 'messages', code: 'context_length_exceeded' });
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

function finishOf(response: LlamaChatResponse<ChatModelFunctions | undefined>): { finishReason: FinishReason; stopSequence: string | null } {
  const meta = response.metadata;
  if (meta.stopReason === 'customStopTrigger') {
    return { finishReason: 'stop', stopSequence: meta.customStopTrigger.filter((p): p is string => typeof p === 'string').join('') };
  }
  const reason: FinishReason = meta.stopReason === 'maxTokens' ? 'length' : meta.stopReason === 'functionCalls' ? 'tool_calls' : 'stop';
  return { finishReason: reason, stopSequence: null };
}

/**
 * How much of the prompt the sequence's KV state already holds: LlamaChat
 * keeps the sequence's tokens up to the first one that differs from the
 * prompt (adaptStateToTokens without shifting) and evaluates the rest, and it
 * always evaluates the prompt's last token again for its logits.
 */
function reusedTokens(sequence: LlamaContextSequence, prompt: Token[]): number {
  return Math.max(0, Math.min(sequence.compareContextTokens(prompt).firstDifferentIndex, prompt.length - 1));
}

/**
 * A message as the prompt cache tells messages apart: what the template
 * renders of it (not call ids, which each API spells its own way, nor
 * earlier reasoning, which clients often leave out and templates drop);
 * its images and audio by the hash of their decoded content.
 */
function fingerprint(message: { role: string; content: string; toolCalls?: ReadonlyArray<{ name: string; arguments: string }> }, media?: readonly string[]): string {
  const calls = message.toolCalls?.length ? message.toolCalls.map((call) => [call.name, call.arguments]) : null;
  return JSON.stringify([message.role, message.content, calls, ...(media?.length ? [media] : [])]);
}

/**
 * The free slot whose held conversation shares the longest message prefix
 * with this one (its tokens need no evaluation). A conversation that shares
 * nothing takes an empty slot if there is one, else the least recently used:
 * the others may hold conversations still going on (a client taking turns
 * with others, an agent between tool calls), whose next turn would otherwise
 * evaluate its whole prompt again. Among equals the lowest sequence, which
 * keeps busy sequences consecutive: llama.cpp decodes consecutive sequence
 * ids in one micro-batch, and a gap splits the batch (decode-gate.ts).
 */
export function pickSlot<S extends { index: number; held: readonly string[]; lastUsed?: number }>(free: readonly S[], messages: readonly string[]): S {
  let best = free[0]!;
  let bestRank: number[] = [];
  for (const slot of free) {
    let shared = 0;
    while (shared < slot.held.length && shared < messages.length && slot.held[shared] === messages[shared]) shared++;
    // Compared in order, greater first: shared messages; for none, empty before held, then older use.
    const rank = shared > 0 ? [shared, 0, 0] : [0, slot.held.length === 0 ? 1 : 0, -(slot.lastUsed ?? 0)];
    if (bestRank.length === 0 || outranks(rank, bestRank) || (!outranks(bestRank, rank) && slot.index < best.index)) {
      best = slot;
      bestRank = rank;
    }
  }
  return best;
}

function outranks(a: readonly number[], b: readonly number[]): boolean {
  const at = a.findIndex((x, i) => x !== b[i]);
  return at >= 0 && a[at]! > b[at]!;
}
