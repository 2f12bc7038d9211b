import { LlamaChatSession, type LlamaEmbeddingContext, type LlamaModel } from 'node-llama-cpp';
import { getRuntime } from '../../src/runtimes/llama/runtime.js';
import type { StreamTiming } from './stream.js';

/**
 * The same work done with node-llama-cpp called directly in this process,
 * the way its documentation shows: one context, a LlamaChatSession for chat
 * (same Qwen chat template and sampling as the server), one embedding
 * context for embeddings.
 */

export interface Sampling {
  temperature: number;
  topP: number;
  topK: number;
  minP: number;
}

export async function loadDirect(file: string): Promise<LlamaModel> {
  return (await getRuntime()).loadModel({ modelPath: file });
}

/**
 * A direct chat runner: one context created up front (as the server keeps its
 * model loaded), then each generation through a new session on that sequence.
 */
export async function directChatRunner(model: LlamaModel, threads: number): Promise<{ run: (prompt: string, maxTokens: number, sampling: Sampling) => Promise<StreamTiming>; dispose: () => Promise<void> }> {
  const context = await model.createContext({ contextSize: 2048, threads, sequences: 1 });
  const sequence = context.getSequence();
  return {
    async run(prompt, maxTokens, sampling) {
      // The sequence keeps the last conversation, so the shared prompt prefix is reused, as the server's slots do.
      const session = new LlamaChatSession({ contextSequence: sequence });
      let first = 0;
      let last = 0;
      let tokens = 0;
      const start = performance.now();
      await session.prompt(prompt, {
        maxTokens,
        ...sampling,
        onToken: (chunk) => {
          const now = performance.now();
          if (!first) first = now;
          last = now;
          tokens += chunk.length;
        },
      });
      const done = performance.now();
      session.dispose({ disposeSequence: false });
      return { ttftMs: first - start, tokens, promptTokens: 0, decodeMs: last - first, totalMs: done - start };
    },
    dispose: () => context.dispose(),
  };
}

/** Embeds `texts` one after another on one embedding context (node-llama-cpp's documented use). */
export async function directEmbeddings(model: LlamaModel, texts: readonly string[], threads: number): Promise<number> {
  const context: LlamaEmbeddingContext = await model.createEmbeddingContext({ contextSize: 512, threads });
  try {
    await context.getEmbeddingFor('warm up');
    const start = performance.now();
    for (const text of texts) await context.getEmbeddingFor(text);
    return (texts.length * 1000) / (performance.now() - start);
  } finally {
    await context.dispose();
  }
}
