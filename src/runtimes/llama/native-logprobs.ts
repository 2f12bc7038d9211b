import type { LlamaContextSequence, LlamaModel, Token } from 'node-llama-cpp';
import { nodeLlamaLock } from './node-llama-lock.js';
import { readAfterReorder } from './output-reorder.js';

/**
 * Log-probabilities read natively from the logits of an evaluation, where
 * the loaded llama.cpp binary is lserve's threadpool addon (its
 * lserveLogprobs.cpp): for each evaluated token, the log-softmax at
 * temperature 1 of one target token and the `top` likeliest, computed on a
 * worker thread from the raw logits. node-llama-cpp itself hands a
 * position's probabilities only as the whole sorted vocabulary, a
 * JavaScript Map of every token (≈ 50 ms a position on a 151,936-token
 * vocabulary; bench/completions.md).
 *
 * The tokens are evaluated through the sequence's own decode
 * (`LlamaContextSequence._decodeTokens`, node-llama-cpp 3.21.1, pinned, as
 * controlledEvaluate does under the sequence's evaluation lock): its logit
 * mapper records each token's output row, and the batch's after-action —
 * which node-llama-cpp awaits before it decodes the next batch — reads all
 * of that batch's rows in one native call.
 */

/** One evaluated position: the target's log-probability (null: no target) and the likeliest tokens, likeliest first. */
export interface PositionLogprobs {
  logprob: number | null;
  top: Array<{ id: Token; logprob: number }>;
}

export const MAX_NATIVE_TOP = 20;

interface NativeResult {
  logprobs: Float32Array;
  topIds: Int32Array;
  topLogprobs: Float32Array;
}
type TokenLogprobsFn = (addonContext: unknown, rows: Int32Array, targets: Int32Array, top: number) => Promise<NativeResult>;

/** What of node-llama-cpp's sequence this reaches (3.21.1). */
interface SequenceInternals {
  _lock: object;
  _tokenMeter: unknown;
  _contextShift: { size: unknown; strategy: unknown };
  _abortTokenPredictor(): Promise<void>;
  _takeIntervalCheckpointIfNeededAfterBatch(stateLength: number): unknown;
  _decodeTokens(
    tokens: Token[],
    logits: boolean[],
    priority: number,
    tokenMeter: unknown,
    contextShift: { size: unknown; strategy: unknown },
    mapper: (batchLogitIndex: number, tokenIndex: number) => unknown,
    afterBatch: (stateLength: number) => unknown,
  ): Promise<unknown[]>;
}

/** node-llama-cpp's default evaluation priority. */
const PRIORITY = 5;

/** The native reader, where the loaded binary has it. */
export function nativeLogprobs(model: LlamaModel): TokenLogprobsFn | undefined {
  return (model.llama as unknown as { _bindings?: { lserveTokenLogprobs?: TokenLogprobsFn } })._bindings?.lserveTokenLogprobs;
}

/**
 * Evaluates `tokens` at the end of `sequence`, keeping each position's
 * log-probability of `targets[i]` (-1: none) and the `top` likeliest next
 * tokens, for the positions from `from` on (the ones before keep no logits
 * and come back empty). The sequence holds the tokens afterwards.
 */
export async function evaluateWithLogprobs(
  read: TokenLogprobsFn,
  sequence: LlamaContextSequence,
  tokens: readonly Token[],
  targets: readonly number[],
  top: number,
  from = 0,
): Promise<PositionLogprobs[]> {
  const internals = sequence as unknown as SequenceInternals;
  if (typeof internals._decodeTokens !== 'function') throw new Error('this node-llama-cpp version has no LlamaContextSequence._decodeTokens to score tokens with');
  const context = sequence.context;
  const addonContext = (context as unknown as { _ctx: unknown })._ctx;
  const width = Math.min(top, MAX_NATIVE_TOP);
  const out: PositionLogprobs[] = tokens.map(() => ({ logprob: null, top: [] }));
  /** This batch's output rows and the token index each belongs to. */
  let rows: number[] = [];
  let indexes: number[] = [];
  const readBatch = async () => {
    const batchRows = rows;
    const batchIndexes = indexes;
    rows = [];
    indexes = [];
    const result = await readAfterReorder(context, () => read(addonContext, Int32Array.from(batchRows), Int32Array.from(batchIndexes, (i) => targets[i] ?? -1), width));
    batchIndexes.forEach((index, r) => {
      const value = result.logprobs[r]!;
      const alternatives: PositionLogprobs['top'] = [];
      for (let k = 0; k < width; k++) {
        const id = result.topIds[r * width + k]!;
        if (id >= 0) alternatives.push({ id: id as Token, logprob: result.topLogprobs[r * width + k]! });
      }
      out[index] = { logprob: Number.isNaN(value) ? null : value, top: alternatives };
    });
  };
  // node-llama-cpp resolves the decode before it runs the last batch's after-action: every position with
  // logits is awaited apart, read or failed.
  let unread = Math.max(0, tokens.length - from);
  let failed: unknown;
  let allRead!: () => void;
  const everyRowRead = new Promise<void>((resolve) => (allRead = resolve));
  if (unread === 0) allRead();

  await internals._abortTokenPredictor();
  const withLock = await nodeLlamaLock();
  return withLock([internals._lock, 'evaluate'], async () => {
    await internals._decodeTokens(
      [...tokens],
      tokens.map((_, i) => i >= from),
      PRIORITY,
      internals._tokenMeter,
      { size: internals._contextShift.size, strategy: internals._contextShift.strategy },
      (row, index) => {
        rows.push(row);
        indexes.push(index);
        return undefined;
      },
      async (stateLength) => {
        if (rows.length > 0) {
          const count = rows.length;
          // A failed read fails this evaluation, not node-llama-cpp's batch loop.
          await readBatch().catch((error: unknown) => (failed ??= error));
          unread -= count;
          if (unread <= 0 || failed !== undefined) allRead();
        }
        return internals._takeIntervalCheckpointIfNeededAfterBatch(stateLength);
      },
    );
    await everyRowRead;
    if (failed !== undefined) throw failed;
    return out;
  });
}

