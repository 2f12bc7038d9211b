import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { BGE_SMALL, writeBertModel } from '../../test/fixtures/gguf/bert.js';
import { QWEN3_0_6B, writeQwen3Model } from '../../test/fixtures/gguf/qwen3.js';

/**
 * The benchmark's synthetic models, generated once into bench/.cache:
 * Qwen3-0.6B's real dimensions in Q8_0 with the real Qwen tokenizer (≈ 640 MB,
 * so memory bandwidth and the 152k-token vocabulary cost what they cost with
 * the real model), a bge-small-en-v1.5-sized bert embedding model, and a
 * Qwen3-Embedding-0.6B-sized one (the same Qwen3-0.6B tensors, LAST pooling,
 * `<|endoftext|>` appended to every input, the 40960-token training context).
 */

const CACHE = fileURLToPath(new URL('../.cache/', import.meta.url));

export function benchChatModel(): string {
  mkdirSync(CACHE, { recursive: true });
  return writeQwen3Model(`${CACHE}qwen3-0.6b-synthetic-q8_0.gguf`, QWEN3_0_6B);
}

export function benchEmbeddingModel(): string {
  mkdirSync(CACHE, { recursive: true });
  return writeBertModel(`${CACHE}bge-small-synthetic-f16.gguf`, { shape: BGE_SMALL });
}

export function benchQwen3EmbeddingModel(): string {
  mkdirSync(CACHE, { recursive: true });
  return writeQwen3Model(`${CACHE}qwen3-embedding-0.6b-synthetic-q8_0.gguf`, QWEN3_0_6B, 3, { embedding: true });
}
