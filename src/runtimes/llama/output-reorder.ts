import type { LlamaContext } from 'node-llama-cpp';

/**
 * Keeps sequences sampled in parallel from reading each other's logits.
 *
 * When llama.cpp splits a batch of several sequences into micro-batches
 * (one sequence's prompt beside another's next token), the outputs come
 * out of order; llama_decode records the row swaps that restore the
 * batch's order and applies them lazily, on the next read of the logits
 * (`llama_context::output_reorder`, which then clears the list). node-
 * llama-cpp samples each sequence of a batch on its own worker thread, and
 * each sampling reads the logits: two at once both apply the same swaps,
 * which undoes them, and each sequence then samples the other's row — seen
 * as two image prompts answering from each other's sequence after their
 * first token, in a few percent of runs.
 *
 * So the first read after a decode (a sampling, or lserve's read of
 * log-probabilities) runs alone, which applies the swaps; the others start
 * once it is done, in parallel again, reading only. This
 * wraps the context's native `decodeBatch` and `sampleToken`
 * (node-llama-cpp 3.21.1, pinned), for every llama.cpp binary.
 */
export function sampleAfterReorder(context: LlamaContext): void {
  type Native = { decodeBatch?: (...args: unknown[]) => Promise<unknown>; sampleToken?: (...args: unknown[]) => Promise<unknown> };
  const native = (context as unknown as { _ctx?: Native })._ctx;
  const decodeBatch = native?.decodeBatch?.bind(native);
  const sampleToken = native?.sampleToken?.bind(native);
  if (!native || !decodeBatch || !sampleToken) throw new Error('this node-llama-cpp version has no decodeBatch/sampleToken on its context: sampling could race llama.cpp\'s output reorder');
  /** Set by a decode, taken by the read that applies its reorder. */
  let reorderPending = false;
  /** That read, which the others of the batch wait for. */
  let reordering: Promise<unknown> = Promise.resolve();
  const read = <T>(run: () => Promise<T>): Promise<T> => {
    if (reorderPending) {
      reorderPending = false;
      const first = run();
      reordering = first;
      return first;
    }
    return reordering.then(run, run);
  };
  readers.set(context, read);
  // The addon's methods are read-only on its prototype: own properties shadow them (left writable and
  // configurable, as a plain assignment would have made them, for whoever wraps the handle next).
  const own = { writable: true, configurable: true, enumerable: false };
  Object.defineProperty(native, 'decodeBatch', {
    ...own,
    value: async (...args: unknown[]) => {
      const result = await decodeBatch(...args);
      reorderPending = true;
      return result;
    },
  });
  Object.defineProperty(native, 'sampleToken', { ...own, value: (...args: unknown[]) => read(() => sampleToken(...args)) });
}

type Reader = <T>(run: () => Promise<T>) => Promise<T>;
const readers = new WeakMap<LlamaContext, Reader>();

/**
 * Runs `read`, a reader of the last decode's logits other than sampling
 * (native-logprobs.ts), under the same rule as the samplings of its batch.
 */
export function readAfterReorder<T>(context: LlamaContext, read: () => Promise<T>): Promise<T> {
  const reader = readers.get(context);
  if (!reader) throw new Error('the context\'s logits are read before sampleAfterReorder guards them');
  return reader(read);
}
