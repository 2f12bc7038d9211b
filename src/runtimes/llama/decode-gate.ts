import type { LlamaContext, LlamaContextSequence } from 'node-llama-cpp';
import { KvCacheFullError, type KvCells } from './kv-cells.js';

/**
 * Lock-step decoding for the sequences of one context, as llama-server steps
 * its slots: every generating sequence's next token goes into the same batch.
 *
 * node-llama-cpp queues each sequence's decode request and, after a batch,
 * immediately decodes whatever is queued. Sequences come back from a batch at
 * different moments (sampling runs per sequence, then the chat wrapper's
 * per-token work), so the first ones back were decoded without the last:
 * measured with 4 streams on a synthetic Qwen3-0.6B, batches held 3 tokens,
 * not 4, and the aggregate was only 1.1× one stream's speed. On a CPU a batch
 * of 4 single-token rows costs about 2× one row, so a missing row is a lost
 * third of the throughput.
 *
 * The gate holds a request while another sequence of the last released group
 * is still being decoded or processed ("owed"), and releases all held
 * requests together once every owed sequence is back, has left (its
 * generation ended: `leave`), or `maxWaitMs` has passed, so that a stalled
 * sequence cannot hold the others up for long. With one sequence generating
 * nothing is ever held. A new request (a prompt) joins the next group, so it
 * is batched with the running generations, as continuous batching does; the
 * others do not wait for a prompt's evaluation (it can take many batches).
 *
 * The group is queued in ascending sequence-id order. llama.cpp's KV cache
 * (not unified: one stream per sequence, as node-llama-cpp creates it) puts
 * tokens of several sequences into one micro-batch only while their ids
 * ascend by one (llama_batch_allocr::split_equal); in arrival order a batch
 * of 4 sequences was often split into 4 micro-batches and cost 4 single
 * decodes (measured: 150 ms against 80 ms sorted). The chat model keeps
 * busy sequences consecutive for the same reason (`pickSlot`).
 *
 * It wraps LlamaContext's internal `_decodeTokens` (node-llama-cpp 3.21.1,
 * the pinned version): the library has no public hook at this point. If that
 * method is missing the gate is not installed and decoding works as before;
 * test/e2e/chat-batching.test.ts measures the batch sizes, so an upgrade that
 * breaks the hook shows up there.
 */

type DecodeRequest = { sequenceId: number; tokens?: readonly unknown[]; firstTokenSequenceIndex?: number };
type DecodeFn = (request: DecodeRequest, ...rest: unknown[]) => Promise<unknown>;

export interface DecodeGate {
  /** The sequence's generation ended: the others stop waiting for it. */
  leave(sequence: LlamaContextSequence): void;
  /** The sequence's next decode waits until `until` settles; meanwhile the others do not wait for it. */
  pause(sequence: LlamaContextSequence, until: Promise<void>): void;
}

/** How long held requests wait for a straggler before they go without it. */
export const DEFAULT_MAX_WAIT_MS = 15;

/** The lock-step logic, on sequence ids; `installDecodeGate` wires it to a context. */
export class LockStepGate {
  /** Released to node-llama-cpp, result not back yet. */
  private readonly inFlight = new Set<number>();
  /** Result delivered; the sequence is sampling's consumer now and should come back with its next token. */
  private readonly processing = new Set<number>();
  private held: Array<{ id: number; start: () => void; fits: () => boolean; fail: (error: Error) => void }> = [];
  /** Paused sequences: their next decode waits for this. */
  private readonly paused = new Map<number, Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;

  constructor(
    private readonly decode: DecodeFn,
    private readonly maxWaitMs = DEFAULT_MAX_WAIT_MS,
    /** A unified KV cache's cells: a decode it has no room for fails with KvCacheFullError instead of reaching llama.cpp. */
    private readonly cells?: KvCells,
  ) {}

  request(request: DecodeRequest, rest: unknown[]): Promise<unknown> {
    const id = request.sequenceId;
    this.processing.delete(id);
    const pause = this.paused.get(id);
    if (pause) return pause.then(() => this.request(request, rest));
    return new Promise((resolve, reject) => {
      // A prompt may span many batches (node-llama-cpp splits it and lets the
      // others' tokens ride along); nobody waits for it until it is done.
      const step = (request.tokens?.length ?? 1) <= 1;
      const start = () => {
        if (step) this.inFlight.add(id);
        this.decode(request, ...rest).then(
          (result) => {
            this.inFlight.delete(id);
            this.processing.add(id);
            resolve(result);
            this.update();
          },
          (error: unknown) => {
            // A failed sequence does not come back for its next token.
            this.inFlight.delete(id);
            reject(error);
            this.update();
          },
        );
      };
      const fits = () => this.cells?.tryDecode(id, request.firstTokenSequenceIndex ?? 0, request.tokens?.length ?? 1) ?? true;
      this.held.push({ id, start, fits, fail: reject });
      this.update();
    });
  }

  leave(sequenceId: number): void {
    if (this.processing.delete(sequenceId)) this.update();
  }

  pause(sequenceId: number, until: Promise<void>): void {
    const settled = until.then(
      () => {},
      () => {},
    );
    this.paused.set(sequenceId, settled);
    void settled.then(() => {
      if (this.paused.get(sequenceId) === settled) this.paused.delete(sequenceId);
    });
    this.leave(sequenceId);
  }

  /**
   * Releases the held group once nobody is owed, at the end of this event
   * loop turn so that requests arriving together (the prompts of requests
   * that came in at once) go as one group; waits for decodes in flight
   * without a deadline (they always come back), and for sequences still
   * processing their last token at most maxWaitMs.
   */
  private update(): void {
    if (this.held.length === 0) return;
    if (this.inFlight.size === 0 && this.processing.size === 0) this.immediate ??= setImmediate(() => this.flush());
    else if (this.inFlight.size === 0) {
      this.timer ??= setTimeout(() => {
        // The stragglers are not waited for again; they join a later group when they come back.
        this.processing.clear();
        this.flush();
      }, this.maxWaitMs);
    }
  }

  private flush(): void {
    clearTimeout(this.timer);
    clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
    const group = this.held.sort((a, b) => a.id - b.id);
    this.held = [];
    // Queued in one synchronous pass, so node-llama-cpp batches them
    // together, in ascending sequence order (see the class comment).
    for (const { start, fits, fail } of group) {
      if (fits()) start();
      else fail(new KvCacheFullError());
    }
  }
}

const noGate: DecodeGate = { leave() {}, pause() {} };

/** Installs a lock-step gate on a context's decode queue (see above); a no-op gate where the hook is missing. */
export function installDecodeGate(context: LlamaContext, options: { maxWaitMs?: number; cells?: KvCells } = {}): DecodeGate {
  const target = context as unknown as { _decodeTokens?: DecodeFn };
  const original = target._decodeTokens;
  if (typeof original !== 'function') {
    // Without the hook nothing could stop a decode that overfills a shared cache: such a context must not be made.
    if (options.cells) throw new Error('this node-llama-cpp version has no decode hook: no unified KV cache');
    return noGate;
  }
  const gate = new LockStepGate(original.bind(context), options.maxWaitMs ?? DEFAULT_MAX_WAIT_MS, options.cells);
  target._decodeTokens = (request, ...rest) => gate.request(request, rest);
  return {
    leave(sequence) {
      gate.leave(sequenceIdOf(sequence));
    },
    pause(sequence, until) {
      gate.pause(sequenceIdOf(sequence), until);
    },
  };
}

/** A sequence's id in its context, as decode requests name it (node-llama-cpp keeps it internal). */
export function sequenceIdOf(sequence: LlamaContextSequence): number {
  const id = (sequence as unknown as { _sequenceId?: unknown })._sequenceId;
  if (typeof id !== 'number') throw new Error('this node-llama-cpp version hides the sequence id');
  return id;
}
