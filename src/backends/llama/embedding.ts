import type { LlamaEmbeddingContext, LlamaModel, Token } from 'node-llama-cpp';
import type { Loader } from '../../core/backend.js';
import type { EmbeddingModel } from '../../core/tasks/embed.js';
import type { InstalledModel } from '../../core/store.js';
import { mapOnWorkers, planContexts } from './parallel.js';
import { loadGguf } from './runtime.js';

/**
 * Embedding models through node-llama-cpp: a pool of embedding contexts on
 * one loaded model (see parallel.ts for why a pool), pooling as the GGUF
 * declares it (`<arch>.pooling_type`: CLS for BGE, LAST for Qwen3-Embedding,
 * MEAN for nomic…).
 */

/** The context size to use: the catalog's default, never more than the model was trained on. */
export function contextSizeFor(installed: InstalledModel, trainContextSize: number): number {
  const configured = installed.entry.defaults.context_size;
  return typeof configured === 'number' && configured > 0 ? Math.min(configured, trainContextSize) : trainContextSize;
}

/** Vocabulary size, to refuse out-of-range token ids before they reach llama.cpp (which would assert). */
export function vocabularySize(model: LlamaModel): number {
  return model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 0;
}

class LlamaEmbedder implements EmbeddingModel {
  readonly memoryBytes: number;
  readonly dimensions: number;
  readonly maxInputTokens: number;
  readonly vocabularySize: number;
  /** Rotates which context a request starts on, so small concurrent requests spread out. */
  private turn = 0;

  constructor(
    private readonly model: LlamaModel,
    private readonly contexts: LlamaEmbeddingContext[],
    contextSize: number,
  ) {
    this.memoryBytes = model.size;
    this.dimensions = model.embeddingVectorSize;
    // The context refuses inputs of contextSize tokens or more.
    this.maxInputTokens = contextSize - 1;
    this.vocabularySize = vocabularySize(model);
  }

  tokenize(text: string): number[] {
    return this.model.tokenize(text);
  }

  evaluatedLength(tokens: readonly number[]): number {
    // Counts the BOS/CLS and EOS/SEP tokens the context adds, exactly as it will.
    return this.contexts[0]!.calculateInputLength(tokens as Token[]);
  }

  async embed(inputs: readonly number[][], signal: AbortSignal): Promise<Float32Array[]> {
    const start = this.turn++ % this.contexts.length;
    const order = [...this.contexts.slice(start), ...this.contexts.slice(0, start)];
    return mapOnWorkers(order, inputs, signal, async (context, tokens) => {
      const { vector } = await context.getEmbeddingFor([...tokens] as Token[]);
      return Float32Array.from(vector);
    });
  }

  async dispose(): Promise<void> {
    await Promise.all(this.contexts.map((c) => c.dispose()));
    await this.model.dispose();
  }
}

export const embeddingLoader: Loader<EmbeddingModel> = {
  async load(installed, options) {
    const model = await loadGguf(installed.files.model!);
    try {
      const contextSize = contextSizeFor(installed, model.trainContextSize);
      const plan = planContexts(options);
      const contexts: LlamaEmbeddingContext[] = [];
      for (let i = 0; i < plan.contexts; i++) {
        // batchSize = contextSize: a non-causal model (BERT) must see a whole input in one batch.
        contexts.push(await model.createEmbeddingContext({ contextSize, batchSize: contextSize, threads: plan.threadsEach }));
      }
      return new LlamaEmbedder(model, contexts, contextSize);
    } catch (error) {
      await model.dispose();
      throw error;
    }
  },
};
