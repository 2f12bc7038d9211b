import type { LlamaModel } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { estimateContextBytes, kvCacheContextOptions } from '../../src/runtimes/llama/context-plan.js';
import { getRuntime } from '../../src/runtimes/llama/runtime.js';
import { TINY_QWEN3_LONG } from '../fixtures/gguf/qwen3.js';
import { tinyQwen3LongFile } from '../helpers/chat-model.js';

/**
 * The KV cache types on the real binary: llama.cpp's own dry run prices an
 * f32 cache above f16, and a context created with f32's options has that
 * cache and that attention (the tiny Qwen3 with its 40960-token training
 * context, where the cache weighs most). Not q8_0: llama.cpp refuses it for
 * this model's 16-wide heads (its blocks are 32 values).
 */

let model: LlamaModel;

beforeAll(async () => {
  model = await (await getRuntime()).loadModel({ modelPath: tinyQwen3LongFile() });
}, 60_000);

afterAll(async () => {
  await model?.dispose();
});

describe('KV cache types on llama.cpp', () => {
  it('estimates f32 above f16 by at least the f16 cache', async () => {
    const shape = { contextSize: TINY_QWEN3_LONG.contextLength, batchSize: 512, sequences: 1 };
    const f32 = await estimateContextBytes(model, { ...shape, kvType: 'f32' });
    const f16 = await estimateContextBytes(model, { ...shape, kvType: 'f16' });
    // K and V, each layer, each KV head's 16 dimensions, 2 bytes a value at f16.
    const { layers, kvHeads, headDim, contextLength } = TINY_QWEN3_LONG;
    const f16Cache = 2 * layers * kvHeads * headDim * contextLength * 2;
    expect(f32).toBeDefined();
    expect(f16).toBeDefined();
    expect(f32! - f16!).toBeGreaterThanOrEqual(f16Cache);
  });

  it('a context made with f32 options holds an F32 cache with flash attention off', async () => {
    const context = await model.createContext({ contextSize: 1024, sequences: 1, ...kvCacheContextOptions('f32') });
    try {
      // ggml's F32 is type 0.
      expect(context.kvCacheKeyType).toBe(0);
      expect(context.kvCacheValueType).toBe(0);
      expect(context.flashAttention).toBe(false);
    } finally {
      await context.dispose();
    }
  });
});
