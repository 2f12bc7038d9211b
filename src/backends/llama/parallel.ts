import os from 'node:os';
import type { LoadOptions } from '../../core/backend.js';

/**
 * How the embedding and rerank loaders split the CPU: several contexts of
 * one model, each with its own thread(s), evaluating different inputs at the
 * same time.
 *
 * Why not one context with many sequences in one llama_decode (llama.cpp's
 * own batched embedding)? node-llama-cpp 3.22's addon reads pooled results
 * only for sequence 0 (`AddonContext::GetEmbedding` calls
 * `llama_get_embeddings_seq(ctx, 0)`), and its LlamaEmbeddingContext /
 * LlamaRankingContext evaluate one input at a time on one sequence. A pool
 * of contexts is the batched path this binding allows. It is also the faster
 * one on small CPUs: measured on 2 shared cores with a bge-small-sized model,
 * 64 short texts ran at 13 emb/s through one context with 2 threads (ggml's
 * threads spin-wait for each other at every op of a short input), 31 emb/s
 * with 1 thread, and 59 emb/s through 2 contexts with 1 thread each.
 */

export interface ContextPlan {
  /** Contexts to create. */
  contexts: number;
  /** Threads each context uses. */
  threadsEach: number;
}

/** At most this many contexts: each holds its own compute buffers (and a KV cache for causal models). */
const MAX_CONTEXTS = 4;

export function planContexts(options: LoadOptions): ContextPlan {
  const threads = options.threads > 0 ? options.threads : os.availableParallelism();
  const contexts = Math.max(1, Math.min(MAX_CONTEXTS, threads));
  return { contexts, threadsEach: Math.max(1, Math.floor(threads / contexts)) };
}

/**
 * Runs `work` over `items` on a fixed set of workers (one per context), each
 * taking the next unclaimed item, and returns results in item order. Stops
 * taking new items once `signal` aborts.
 */
export async function mapOnWorkers<W, I, R>(workers: readonly W[], items: readonly I[], signal: AbortSignal, work: (worker: W, item: I, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    workers.slice(0, items.length).map(async (worker) => {
      while (next < items.length) {
        signal.throwIfAborted();
        const index = next++;
        results[index] = await work(worker, items[index]!, index);
      }
    }),
  );
  return results;
}
