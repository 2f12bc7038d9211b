import type { LlamaModel, LlamaRankingContext, Token } from 'node-llama-cpp';
import type { Loader } from '../../core/backend.js';
import type { RankingModel } from '../../core/tasks/rerank.js';
import { contextSizeFor } from './embedding.js';
import { mapOnWorkers, planContexts } from './parallel.js';
import { loadGguf } from './runtime.js';

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
  private turn = 0;

  constructor(
    private readonly model: LlamaModel,
    private readonly contexts: LlamaRankingContext[],
  ) {
    this.memoryBytes = model.size;
    // The context refuses pairs of contextSize tokens or more.
    this.maxInputTokens = contexts[0]!.contextSize - 1;
  }

  tokenize(text: string): number[] {
    // As the ranking context tokenizes text it is given (a leading space dropped).
    return this.model.tokenize(text, false, 'trimLeadingSpace');
  }

  pairLength(query: readonly number[], document: readonly number[]): number {
    return this.contexts[0]!.calculateInputLength(query as Token[], document as Token[]);
  }

  async score(query: readonly number[], documents: readonly number[][], signal: AbortSignal): Promise<number[]> {
    const start = this.turn++ % this.contexts.length;
    const order = [...this.contexts.slice(start), ...this.contexts.slice(0, start)];
    return mapOnWorkers(order, documents, signal, (context, document) => context.rank(query as Token[], document as Token[]));
  }

  async dispose(): Promise<void> {
    await Promise.all(this.contexts.map((c) => c.dispose()));
    await this.model.dispose();
  }
}

export const rankingLoader: Loader<RankingModel> = {
  async load(installed, options) {
    const model = await loadGguf(installed.files.model!);
    try {
      const contextSize = contextSizeFor(installed, model.trainContextSize);
      const plan = planContexts(options);
      const contexts: LlamaRankingContext[] = [];
      for (let i = 0; i < plan.contexts; i++) {
        contexts.push(await model.createRankingContext({ contextSize, batchSize: contextSize, threads: plan.threadsEach }));
      }
      return new LlamaReranker(model, contexts);
    } catch (error) {
      await model.dispose();
      throw error;
    }
  },
};
