import os from 'node:os';
import type { LlamaModel } from 'node-llama-cpp';
import type { LoadOptions } from '../../core/backend.js';
import type { InstalledModel } from '../../core/store.js';
import { loadGguf } from './runtime.js';

/**
 * How the embedding and rerank loaders split the CPU: several contexts of
 * one model, each with its own thread(s), evaluating different inputs at the
 * same time.
 *
 * Why not one context with many sequences in one llama_decode (llama.cpp's
 * own batched embedding)? node-llama-cpp 3.21's addon reads pooled results
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

/** The context size to use: the catalog's default, never more than the model was trained on. */
export function contextSizeFor(installed: InstalledModel, trainContextSize: number): number {
  const configured = installed.entry.defaults.context_size;
  return typeof configured === 'number' && configured > 0 ? Math.min(configured, trainContextSize) : trainContextSize;
}

/** One loaded model and its pool of contexts (embedding or ranking). */
export class ContextPool<C extends { dispose(): Promise<void> }> {
  /** Rotates which context a request starts on, so small concurrent requests spread out. */
  private turn = 0;

  constructor(
    readonly model: LlamaModel,
    readonly contexts: readonly C[],
    /** Tokens each context holds. */
    readonly contextSize: number,
  ) {}

  /** Runs `work` over `items` on all contexts at once; results in item order. */
  map<I, R>(items: readonly I[], signal: AbortSignal, work: (context: C, item: I) => Promise<R>): Promise<R[]> {
    const start = this.turn++ % this.contexts.length;
    const order = [...this.contexts.slice(start), ...this.contexts.slice(0, start)];
    return mapOnWorkers(order, items, signal, work);
  }

  async dispose(): Promise<void> {
    await Promise.all(this.contexts.map((c) => c.dispose()));
    await this.model.dispose();
  }
}

/**
 * Loads a GGUF and creates the planned contexts on it (see planContexts);
 * if any creation fails, what was created is disposed.
 */
export async function loadContextPool<C extends { dispose(): Promise<void> }>(
  installed: InstalledModel,
  options: LoadOptions,
  create: (model: LlamaModel, contextSize: number, threads: number) => Promise<C>,
): Promise<ContextPool<C>> {
  const model = await loadGguf(installed.files.model!);
  const contextSize = contextSizeFor(installed, model.trainContextSize);
  const contexts: C[] = [];
  try {
    const plan = planContexts(options);
    for (let i = 0; i < plan.contexts; i++) contexts.push(await create(model, contextSize, plan.threadsEach));
    return new ContextPool(model, contexts, contextSize);
  } catch (error) {
    await new ContextPool(model, contexts, contextSize).dispose();
    throw error;
  }
}
