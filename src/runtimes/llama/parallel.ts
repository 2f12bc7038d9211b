import os from 'node:os';
import type { LlamaModel } from 'node-llama-cpp';
import type { LoadOptions } from '../../core/loader.js';
import type { InstalledModel } from '../../core/store.js';
import { contextBudget, describePlan, estimateContextBytes, planContext, requestedContext } from './context-plan.js';
import { describeRuntime, loadGguf, vocabularySize } from './runtime.js';

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

export interface ThreadSplit {
  /** Contexts to create, at most (fewer when memory is short: see context-plan.ts). */
  contexts: number;
  /** Threads the pool uses in all. */
  threads: number;
}

/** At most this many contexts: each holds its own compute buffers (and a KV cache for causal models). */
const MAX_CONTEXTS = 4;

export function splitThreads(options: LoadOptions): ThreadSplit {
  const threads = options.threads > 0 ? options.threads : os.availableParallelism();
  return { contexts: Math.max(1, Math.min(MAX_CONTEXTS, threads)), threads };
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

/** One loaded model and its pool of contexts (embedding or ranking). */
export class ContextPool<C extends { dispose(): Promise<void> }> {
  /** Rotates which context a request starts on, so small concurrent requests spread out. */
  private turn = 0;

  constructor(
    readonly model: LlamaModel,
    readonly contexts: readonly C[],
    /** Tokens each context holds. */
    readonly contextSize: number,
    /** Estimated bytes of all contexts together (0 when unknown). */
    readonly contextBytes: number,
  ) {}

  /** Weights plus contexts, for the model manager's budget. */
  get memoryBytes(): number {
    return this.model.size + this.contextBytes;
  }

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

/** llama.cpp's `enum llama_pooling_type` LAST: the embedding is the final token's state. */
const POOLING_LAST = 3;

/**
 * Tokens per decode for a causal embedder fed in chunks. llama.cpp computes
 * (and keeps a buffer for) full-vocabulary logits for every token of an
 * embedding batch, read by nobody: 151936 × batch × 4 B for Qwen3, 297 MiB a
 * context at 512. Measured on a 0.6B-sized Qwen3-Embedding (bench/text.md):
 * 128 holds RSS after long inputs at 3.1 GB instead of 4.0 GB with no
 * measurable cost at 100-token inputs and ~5 % (noise level) at 1000; 64 saves
 * little more and is ~20 % slower on long inputs.
 */
const CAUSAL_EMBEDDING_BATCH = 128;

/**
 * Whether an input must be evaluated in one batch. llama.cpp pools over the
 * tokens of one ubatch: a non-causal model (BERT) must see the whole input at
 * once, and so must CLS/MEAN/RANK pooling; only a causal model with LAST
 * pooling (Qwen3-Embedding) may take a long input in chunks, its KV cache
 * carrying what came before.
 */
export function needsWholeInputInOneBatch(model: LlamaModel): boolean {
  const meta = model.fileInfo.architectureMetadata as { pooling_type?: number };
  return !(isCausal(model) && meta.pooling_type === POOLING_LAST);
}

function isCausal(model: LlamaModel): boolean {
  const meta = model.fileInfo.architectureMetadata as { attention?: { causal?: boolean } };
  return meta.attention?.causal ?? true; // llama.cpp's default; BERT-family GGUFs declare false
}

/**
 * Loads a GGUF and creates a pool of embedding or ranking contexts on it,
 * sized by planContext (context-plan.ts) and logged; if anything fails, what
 * was created is disposed.
 */
export async function loadContextPool<C extends { dispose(): Promise<void> }>(
  installed: InstalledModel,
  options: LoadOptions,
  kind: 'embedding' | 'rerank',
  create: (model: LlamaModel, shape: { contextSize: number; batchSize: number; threads: number }) => Promise<C>,
): Promise<ContextPool<C>> {
  const model = await loadGguf(installed.files.model!);
  const contexts: C[] = [];
  try {
    const split = splitThreads(options);
    const request = requestedContext(installed, options, kind);
    const whole = needsWholeInputInOneBatch(model);
    const causal = isCausal(model);
    const vocabulary = vocabularySize(model);
    const plan = await planContext({
      id: installed.id,
      request,
      trainContextSize: model.trainContextSize,
      maxContexts: split.contexts,
      sequences: 1,
      batchFor: (size) => (whole ? size : Math.min(CAUSAL_EMBEDDING_BATCH, size)),
      // node-llama-cpp's estimate leaves out the logits output buffer a causal model's embedding context grows to.
      estimate: async (shape) => {
        const bytes = await estimateContextBytes(model, shape, true);
        return bytes === undefined ? undefined : bytes + (causal ? vocabulary * shape.batchSize * 4 : 0);
      },
      budgetBytes: contextBudget(model, options),
      weightBytes: model.size,
    });
    options.log?.(`${describePlan(installed.id, plan, request)}; llama.cpp binary: ${describeRuntime(model.llama)}`);
    const threads = Math.max(1, Math.floor(split.threads / plan.contexts));
    for (let i = 0; i < plan.contexts; i++) contexts.push(await create(model, { contextSize: plan.contextSize, batchSize: plan.batchSize, threads }));
    return new ContextPool(model, contexts, plan.contextSize, plan.bytes);
  } catch (error) {
    await new ContextPool(model, contexts, 0, 0).dispose();
    throw error;
  }
}
