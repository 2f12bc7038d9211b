import type { LlamaContext, Token } from 'node-llama-cpp';
import { InvalidRequestError, OverloadedError } from '../../core/errors.js';
import type { DecodeGate } from '../../runtimes/llama/decode-gate.js';
import type { KvCells } from '../../runtimes/llama/kv-cells.js';
import type { SequenceStateCache } from '../../runtimes/llama/state-cache.js';
import { QueueFullError } from './chat-slots.js';
import type { ConversationSlots, Slot } from './conversation-slots.js';

/**
 * A chat model's context and its size: a conversation longer than a
 * default-sized context grows it (a new context, the sequences'
 * conversations carried over through the host cache) where the memory
 * budget allows; one longer than the size the user set, or than the model
 * was trained for, is a 400 that says the real limit.
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

/** A request waited for a sequence of a context that was replaced by a larger one: it takes one of the new context. */
class ContextReplacedError extends Error {
  constructor() {
    super('the context was replaced');
  }
}

/** Tokens of answer room made for a request beside its prompt (more is used when free; see ConversationSlots). */
const EXPECTED_ANSWER_TOKENS = 4096;

export interface GrowingContextOptions {
  /** The model's name, for the log. */
  name: string;
  log: (message: string) => void;
  /** Conversations kept in host memory: what carries them into a grown context. */
  cache?: SequenceStateCache;
  /** A context of this many tokens per conversation, ready to serve; absent where the size is the user's. */
  grow?: (tokens: number) => Promise<ChatContextState>;
}

export class GrowingContext {
  /** A context growing: requests wait for it before they take a sequence. */
  private growing: Promise<void> | undefined;

  constructor(
    private current: ChatContextState,
    private readonly options: GrowingContextOptions,
  ) {}

  /** The context serving requests now. */
  get state(): ChatContextState {
    return this.current;
  }

  /** Resolves once the context is not growing. */
  async settled(): Promise<void> {
    await this.growing;
  }

  /**
   * A sequence for the prompt, chosen among the free ones by `choose`, on the
   * context that serves it (taken again on the new one if it grows meanwhile),
   * with room for `answerTokens` (at most EXPECTED_ANSWER_TOKENS) beside it.
   */
  async take(prompt: Token[], promptTokens: number, choose: (free: readonly Slot[]) => Slot, answerTokens: number | undefined, signal: AbortSignal): Promise<{ slot: Slot; state: ChatContextState }> {
    for (;;) {
      await this.fit(promptTokens);
      const state = this.current;
      const room = state.info.contextSize - promptTokens;
      try {
        const slot = await state.slots.take(prompt, choose, { growth: Math.min(answerTokens ?? room, room, EXPECTED_ANSWER_TOKENS), signal });
        slot.lastUsed = performance.now();
        return { slot, state };
      } catch (error) {
        if (error instanceof ContextReplacedError) continue;
        if (error instanceof QueueFullError) throw new OverloadedError();
        throw error;
      }
    }
  }

  /**
   * Makes sure a conversation of `promptTokens` fits the context, growing a
   * default-sized context (to the next doubling with room for an answer, at
   * most the training context) where the memory budget allows; otherwise a
   * 400 that says the real limit and what raises it.
   */
  private async fit(promptTokens: number): Promise<void> {
    await this.growing;
    const info = this.current.info;
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
    if (promptTokens >= this.current.info.contextSize) await this.fit(promptTokens);
  }

  /** Replaces the context by one of `tokens` per conversation once every sequence is free; what they held goes to the host cache first, to be restored into the new one. */
  private async regrow(grow: (tokens: number) => Promise<ChatContextState>, tokens: number): Promise<void> {
    const old = this.current;
    const never = new AbortController().signal;
    const taken: Slot[] = [];
    for (let i = 0; i < old.slots.pool.size; i++) taken.push(await old.slots.pool.acquire(never));
    const started = Date.now();
    try {
      if (this.options.cache) for (const slot of taken) if (slot.sequence.nextTokenIndex > 0) await this.options.cache.save(slot.sequence).catch(() => {});
      await old.context.dispose();
      try {
        this.current = await grow(tokens);
      } catch (error) {
        // Back to a context of the old size, so the model keeps serving what fits it.
        this.current = await grow(old.info.contextSize);
        throw error;
      }
      this.options.log(`${this.options.name}: context grown from ${old.info.contextSize} to ${this.current.info.contextSize} tokens for a longer conversation in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    } finally {
      old.slots.pool.rejectAll(new ContextReplacedError());
    }
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
