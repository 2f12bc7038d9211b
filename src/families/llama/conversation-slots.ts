import type { LlamaContextSequence, Token } from 'node-llama-cpp';
import type { KvCells } from '../../runtimes/llama/kv-cells.js';
import type { SequenceStateCache } from '../../runtimes/llama/state-cache.js';
import { sequenceIdOf } from '../../runtimes/llama/decode-gate.js';
import { SlotPool } from './chat-slots.js';

/**
 * The sequences of a chat model's context, handed to requests so that each
 * evaluates as little as possible:
 * - the free sequence that holds the longest part of the conversation
 *   (pickSlot), its other tokens dropped;
 * - a conversation kept in host memory (SequenceStateCache) restored into
 *   it when that holds more of the prompt than any sequence does, and what
 *   a sequence held saved there before another conversation overwrites it;
 * - with one KV cache for all sequences (KvCells), room made for the prompt
 *   and some of its answer by clearing the least recently used idle
 *   sequences (saved first), or the request waits for a sequence to end.
 */

export interface Slot {
  /** The sequence's id in the context (0 … parallel − 1). */
  index: number;
  sequence: LlamaContextSequence;
  /** Fingerprints of the messages (and reply) the sequence holds now. */
  held: string[];
  /** When a request last took it (performance.now()); 0 never. */
  lastUsed: number;
}

/** A sequence that would lose at least this many tokens (and an eighth of what it holds) is saved to the host cache first. */
export const MIN_SAVED_TOKENS = 256;
/** A cached conversation is restored when it holds at least this many more of the prompt than the sequence does. */
const MIN_RESTORE_GAIN = 64;

export interface TakeOptions {
  /** Tokens the answer is expected to add, for which room is made beside the prompt (not guaranteed: a decode that finds no room ends the answer). */
  growth: number;
  signal: AbortSignal;
}

export class ConversationSlots {
  private readonly released = new Set<() => void>();

  constructor(
    readonly pool: SlotPool<Slot>,
    private readonly slots: readonly Slot[],
    private readonly cells?: KvCells,
    private readonly cache?: SequenceStateCache,
    private readonly log: (message: string) => void = () => {},
  ) {}

  /**
   * A sequence for this prompt, holding as much of it as can be had, with
   * room for the rest: queued (the pool's line) while none is free, and
   * while the shared cache has no room even with every idle sequence
   * cleared (the sequence goes back meanwhile, so that waiting requests
   * never hold each other up).
   */
  async take(prompt: readonly Token[], pick: (free: readonly Slot[]) => Slot, options: TakeOptions): Promise<Slot> {
    for (;;) {
      const slot = await this.pool.acquire(options.signal, pick);
      try {
        if (await this.prepare(slot, prompt, options)) return slot;
      } catch (error) {
        this.release(slot);
        throw error;
      }
      this.release(slot);
      await this.nextRelease(options.signal);
    }
  }

  /** Gives the slot back; with a shared cache, its count becomes what it really holds. */
  release(slot: Slot): void {
    this.cells?.set(sequenceIdOf(slot.sequence), slot.sequence.nextTokenIndex);
    this.pool.release(slot);
    for (const wake of [...this.released]) wake();
  }

  /** The tokens a sequence holds of `prompt` (the KV state reused as it is). */
  static shared(sequence: LlamaContextSequence, prompt: readonly Token[]): number {
    return sequence.compareContextTokens(prompt as Token[]).firstDifferentIndex;
  }

  /** Readies `slot` for `prompt`; false when the shared cache has no room for it before some sequence ends. */
  private async prepare(slot: Slot, prompt: readonly Token[], options: TakeOptions): Promise<boolean> {
    const { sequence } = slot;
    let shared = ConversationSlots.shared(sequence, prompt);
    // Kept when another conversation takes the sequence: more would be lost than a turn's answer rendered anew.
    const lost = sequence.nextTokenIndex - shared;
    if (this.cache && lost >= MIN_SAVED_TOKENS && lost * 8 >= sequence.nextTokenIndex) await this.save(slot);
    const cached = this.cache?.best(prompt, shared + MIN_RESTORE_GAIN);
    const own = () => this.cells?.of(sequenceIdOf(sequence)) ?? 0;
    if (cached && this.couldFit(slot, cached.entry.tokens.length) && (await this.clearIdle(slot, cached.entry.tokens.length - own()))) {
      try {
        await this.cache!.restore(cached.entry, sequence);
      } catch (error) {
        // Whatever was loaded goes with the sequence's tokens: the prompt is evaluated in full instead.
        this.log(`host cache: a conversation of ${cached.entry.tokens.length} tokens could not be restored (${(error as Error).message}); evaluating it again`);
        await sequence.clearHistory();
      }
      slot.held = [];
      this.cells?.set(sequenceIdOf(sequence), sequence.nextTokenIndex);
      shared = ConversationSlots.shared(sequence, prompt);
    }
    // What the sequence holds beyond the shared part goes now, so that its cells count as free.
    if (sequence.nextTokenIndex > shared) {
      await sequence.eraseContextTokenRanges([{ start: shared, end: sequence.nextTokenIndex }]);
      slot.held = [];
      this.cells?.set(sequenceIdOf(sequence), sequence.nextTokenIndex);
    }
    const rest = prompt.length - shared;
    await this.clearIdle(slot, rest + options.growth);
    if (this.cells && this.cells.free < rest + 1) return false;
    // The prompt's cells are reserved now, before its decodes: others' answers cannot take them meanwhile.
    this.cells?.set(sequenceIdOf(sequence), prompt.length);
    return true;
  }

  /** Whether `cells` more could fit beside what every other sequence holds, were the idle ones cleared. */
  private couldFit(slot: Slot, cells: number): boolean {
    if (!this.cells) return true;
    const busy = this.slots.filter((s) => s !== slot && !this.pool.isFree(s)).reduce((sum, s) => sum + this.cells!.of(sequenceIdOf(s.sequence)), 0);
    return this.cells.capacity - busy >= cells;
  }

  /**
   * With a shared cache: clears idle sequences, least recently used first
   * (saved to the host cache when they hold enough), until `want` cells
   * beyond what `slot` holds are free or no idle sequence holds any.
   * True when they are.
   */
  private async clearIdle(slot: Slot, want: number): Promise<boolean> {
    const cells = this.cells;
    if (!cells) return true;
    while (cells.free < want) {
      const victim = this.idleVictim(slot);
      if (!victim) return false;
      try {
        if (this.cache && victim.sequence.nextTokenIndex >= MIN_SAVED_TOKENS) await this.save(victim);
        await victim.sequence.clearHistory();
        victim.held = [];
        cells.set(sequenceIdOf(victim.sequence), 0);
      } finally {
        this.pool.release(victim);
      }
    }
    return true;
  }

  /** The least recently used free sequence that holds something, taken out of the pool (the caller gives it back). */
  private idleVictim(except: Slot): Slot | undefined {
    const candidates = this.slots.filter((s) => s !== except && s.sequence.nextTokenIndex > 0).sort((a, b) => a.lastUsed - b.lastUsed);
    return candidates.find((s) => this.pool.takeIdle(s));
  }

  private async save(slot: Slot): Promise<void> {
    try {
      await this.cache!.save(slot.sequence);
    } catch (error) {
      this.log(`host cache: could not keep a conversation of ${slot.sequence.nextTokenIndex} tokens (${(error as Error).message})`);
    }
  }

  private nextRelease(signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    return new Promise<void>((resolve, reject) => {
      const done = () => {
        this.released.delete(done);
        signal.removeEventListener('abort', aborted);
        resolve();
      };
      const aborted = () => {
        this.released.delete(done);
        reject(signal.reason);
      };
      this.released.add(done);
      signal.addEventListener('abort', aborted, { once: true });
    });
  }
}
