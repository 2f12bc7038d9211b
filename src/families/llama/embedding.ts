import type { LlamaEmbeddingContext, Token } from 'node-llama-cpp';
import type { Loader } from '../../core/loader.js';
import type { EmbeddingModel } from '../../core/tasks/embed.js';
import { loadContextPool, type ContextPool } from '../../runtimes/llama/parallel.js';
import { vocabularySize } from '../../runtimes/llama/runtime.js';

/**
 * Embedding models through node-llama-cpp: a pool of embedding contexts on
 * one loaded model (see parallel.ts for why a pool), pooling as the GGUF
 * declares it (`<arch>.pooling_type`: CLS for BGE, LAST for Qwen3-Embedding,
 * MEAN for nomic…).
 */

class LlamaEmbedder implements EmbeddingModel {
  readonly memoryBytes: number;
  readonly dimensions: number;
  readonly maxInputTokens: number;
  readonly vocabularySize: number;

  constructor(private readonly pool: ContextPool<LlamaEmbeddingContext>) {
    this.memoryBytes = pool.memoryBytes;
    this.dimensions = pool.model.embeddingVectorSize;
    // The context refuses inputs of contextSize tokens or more.
    this.maxInputTokens = pool.contextSize - 1;
    this.vocabularySize = vocabularySize(pool.model);
  }

  async tokenize(texts: readonly string[]): Promise<number[][]> {
    return texts.map((text) => this.pool.model.tokenize(text));
  }

  async evaluatedLengths(inputs: readonly (readonly number[])[]): Promise<number[]> {
    // Counts the BOS/CLS and EOS/SEP tokens the context adds, exactly as it will.
    return inputs.map((tokens) => this.pool.contexts[0]!.calculateInputLength(tokens as Token[]));
  }

  embed(inputs: readonly number[][], signal: AbortSignal): Promise<Float32Array[]> {
    return this.pool.map(inputs, signal, async (context, tokens) => {
      const { vector } = await context.getEmbeddingFor([...tokens] as Token[]);
      return Float32Array.from(vector);
    });
  }

  dispose(): Promise<void> {
    return this.pool.dispose();
  }
}

export const embeddingLoader: Loader<EmbeddingModel> = {
  async load(installed, options) {
    const pool = await loadContextPool(installed, options, 'embedding', (model, shape) => model.createEmbeddingContext(shape));
    return new LlamaEmbedder(pool);
  },
};
