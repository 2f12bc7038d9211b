import type { LlamaRankingContext, Token } from 'node-llama-cpp';
import type { Loader } from '../../core/loader.js';
import type { RankingModel } from '../../core/tasks/rerank.js';
import { loadContextPool, type ContextPool } from '../../runtimes/llama/parallel.js';

/**
 * Cross-encoder rerankers through node-llama-cpp's ranking context: llama.cpp
 * RANK pooling runs the classification head (`cls.*` tensors) over
 * [BOS] query [EOS][SEP] document [EOS] (or the model's
 * `tokenizer.chat_template.rerank`, e.g. Qwen3-Reranker) and node-llama-cpp
 * turns the logit into a 0–1 probability. Documents are scored in parallel
 * over a pool of contexts (see parallel.ts).
 */

class LlamaReranker implements RankingModel {
  readonly memoryBytes: number;
  readonly maxInputTokens: number;

  constructor(private readonly pool: ContextPool<LlamaRankingContext>) {
    this.memoryBytes = pool.memoryBytes;
    // The context refuses pairs of contextSize tokens or more.
    this.maxInputTokens = pool.contextSize - 1;
  }

  async tokenize(texts: readonly string[]): Promise<number[][]> {
    // As the ranking context tokenizes text it is given (a leading space dropped).
    return texts.map((text) => this.pool.model.tokenize(text, false, 'trimLeadingSpace'));
  }

  async pairLengths(query: readonly number[], documents: readonly (readonly number[])[]): Promise<number[]> {
    return documents.map((document) => this.pool.contexts[0]!.calculateInputLength(query as Token[], document as Token[]));
  }

  score(query: readonly number[], documents: readonly number[][], signal: AbortSignal): Promise<number[]> {
    return this.pool.map(documents, signal, (context, document) => context.rank(query as Token[], document as Token[]));
  }

  dispose(): Promise<void> {
    return this.pool.dispose();
  }
}

export const rankingLoader: Loader<RankingModel> = {
  async load(installed, options) {
    const pool = await loadContextPool(installed, options, 'rerank', (model, shape) => model.createRankingContext(shape));
    return new LlamaReranker(pool);
  },
};
