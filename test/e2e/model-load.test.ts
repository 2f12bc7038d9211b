import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatBytes, parseByteSize } from '../../src/core/units.js';
import { tinyEmbeddingModel, tinyRerankerModel } from '../fixtures/gguf/bert.js';
import { TINY_QWEN3, TINY_QWEN3_EMBEDDING, tinyQwen3EmbeddingModel } from '../fixtures/gguf/qwen3.js';
import { tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Text models load with a context sized from a budget, and a model that
 * cannot load says why — through the real server and node-llama-cpp:
 * a Qwen3-Embedding-style GGUF (qwen3 architecture, LAST pooling, the real
 * Qwen tokenizer, a 40960-token training context) registered as a user file;
 * the same file with a context that cannot fit; a truncated GGUF.
 */

/** Room for one 8192-token context of the embedding model (≈0.6 GiB with its buffers), not for one of 40960 (≈1.6 GiB). */
const BUDGET = 1024 ** 3;

let server: TestServer;
let client: OpenAI;

beforeAll(async () => {
  server = await startTestServer({ engine: { maxMemoryBytes: BUDGET, keepAliveMs: 60_000 } });
  const store = server.engine.store;
  await store.registerLocal(tinyQwen3EmbeddingModel(), { kind: 'embedding', id: 'qwen3-embed' });
  // The same file, its owner asking at pull for the whole training context, which cannot fit the budget.
  await store.registerLocal(tinyQwen3EmbeddingModel(), { kind: 'embedding', id: 'qwen3-embed-huge', contextSize: 40960 });
  await store.registerLocal(tinyEmbeddingModel(), { kind: 'embedding', id: 'bge-test' });
  await store.registerLocal(tinyRerankerModel(), { kind: 'rerank', id: 'rerank-test' });
  await store.registerLocal(tinyQwen3File(), { kind: 'chat', id: 'qwen3-chat' });
  const whole = readFileSync(tinyQwen3EmbeddingModel());
  const truncated = path.join(server.home, 'truncated.gguf');
  writeFileSync(truncated, whole.subarray(0, whole.length >> 1));
  await store.registerLocal(truncated, { kind: 'embedding', id: 'truncated' });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.stop();
});

/** The plan a loader logged for `id`: tokens per context and bytes against the budget. */
function loggedPlan(id: string): { line: string; tokens: number; bytes: number; budget: number } {
  const line = server.logs.find((l) => l.startsWith(`${id}: context plan:`));
  expect(line, `no context plan logged for ${id}:\n${server.logs.join('\n')}`).toBeDefined();
  const match = /(\d+) tokens, (?:q8_0 KV cache, )?batch (\d+), ≈([\d.]+ [kMG]?B) of a ([\d.]+ [kMG]?B) budget/.exec(line!);
  expect(match, line).not.toBeNull();
  return { line: line!, tokens: Number(match![1]), bytes: parseByteSize(match![3]!.replace(' ', '')), budget: parseByteSize(match![4]!.replace(' ', '')) };
}

async function post(route: string, body: unknown): Promise<{ status: number; error: Record<string, unknown> }> {
  const res = await fetch(`${server.url}/v1/${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const json = (await res.json()) as { error: Record<string, unknown> };
  return { status: res.status, error: json.error };
}

describe('a Qwen3-Embedding-style user GGUF (40960-token training context)', () => {
  it('serves embeddings of its full hidden size with a default context of 8192 tokens, batch 128, within the budget', async () => {
    const res = await client.embeddings.create({ model: 'qwen3-embed', input: ['hello world', 'the cat sat on the mat'], encoding_format: 'float' });
    expect(res.data).toHaveLength(2);
    for (const item of res.data) {
      expect(item.embedding).toHaveLength(TINY_QWEN3_EMBEDDING.embd);
      expect(item.embedding.every(Number.isFinite)).toBe(true);
    }
    // hello, world + the <|endoftext|> a Qwen3-Embedding GGUF appends (add_eos_token); the cat sat on the mat: 6 + 1.
    expect(res.usage.prompt_tokens).toBe(3 + 7);
    const plan = loggedPlan('qwen3-embed');
    expect(plan.tokens).toBe(8192);
    expect(plan.line).toMatch(/batch 128/);
    // The log rounds to three figures: the budget shown is this server's.
    expect(plan.line).toContain(`of a ${formatBytes(BUDGET)} budget`);
    expect(plan.bytes).toBeGreaterThan(0);
    expect(plan.bytes).toBeLessThanOrEqual(plan.budget);
  });

  it('takes an input of several batches (LAST pooling reads the final token; its KV cache carries the rest)', async () => {
    const long = Array.from({ length: 700 }, (_, i) => `w${i}`).join(' ');
    const res = await client.embeddings.create({ model: 'qwen3-embed', input: long, encoding_format: 'float' });
    expect(res.usage.prompt_tokens).toBeGreaterThan(128 * 4);
    expect(res.data[0]!.embedding.every(Number.isFinite)).toBe(true);
    // Chunking must not change the result: the same text embedded twice agrees.
    const again = await client.embeddings.create({ model: 'qwen3-embed', input: long, encoding_format: 'float' });
    expect(again.data[0]!.embedding).toEqual(res.data[0]!.embedding);
  });

  it('a context size set at pull that cannot fit answers 507 insufficient_memory with the numbers and the remedy', async () => {
    const { status, error } = await post('embeddings', { model: 'qwen3-embed-huge', input: 'hello' });
    expect(status).toBe(507);
    expect(error).toMatchObject({ type: 'server_error', code: 'insufficient_memory' });
    expect(error.message).toMatch(/^Model 'qwen3-embed-huge' needs ≈[\d.]+ [KMG]B of context memory \(40960 tokens, batch 128; context_size 40960 \(set at pull\)\) but only [\d.]+ [KMG]B of the memory budget is left/);
    expect(error.message).toMatch(/--ctx-size/);
  });
});

describe('a model that cannot load', () => {
  it('answers 500 model_load_failed naming the model and the cause, logs it once, and retries on the next request', async () => {
    const answers = await Promise.all([1, 2, 3].map(() => post('embeddings', { model: 'truncated', input: 'hello' })));
    for (const { status, error } of answers) {
      expect(status).toBe(500);
      expect(error).toMatchObject({ type: 'server_error', code: 'model_load_failed' });
      expect(error.message).toMatch(/^Model 'truncated' could not be loaded: tensor '[\w.]+' data is not within the file bounds, model is corrupted or incomplete\. Its file .*truncated\.gguf has [\d.]+ MB\. Check the file/);
    }
    const failures = () => server.logs.filter((l) => l.startsWith('failed to load truncated:'));
    expect(failures()).toHaveLength(1);
    // No stray llama.cpp lines and no second copy from the error middleware.
    expect(server.logs.filter((l) => l.includes('truncated') && l.startsWith('error '))).toEqual([]);
    const retry = await post('embeddings', { model: 'truncated', input: 'hello' });
    expect(retry.status).toBe(500);
    expect(failures()).toHaveLength(2);
  });

  it('leaves the other models serving', async () => {
    const res = await client.embeddings.create({ model: 'bge-test', input: 'still here', encoding_format: 'float' });
    expect(res.data[0]!.embedding).toHaveLength(64);
    const health = await fetch(`${server.url}/health`);
    expect(health.status).toBe(200);
  });
});

describe('every llama loader logs its memory plan against the budget', () => {
  it('rerank: a non-causal model sees an input in one batch (batch = context = its 128-token training context)', async () => {
    const res = await fetch(`${server.url}/v1/rerank`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'rerank-test', query: 'cats', documents: ['a cat', 'a car'] }),
    });
    expect(res.status).toBe(200);
    const plan = loggedPlan('rerank-test');
    expect(plan.line).toMatch(/128 tokens, batch 128/);
    expect(plan.bytes).toBeLessThanOrEqual(plan.budget);
  });

  it('embedding (bert): batch = context', () => {
    const plan = loggedPlan('bge-test');
    expect(plan.line).toMatch(/128 tokens, batch 128/);
    expect(plan.bytes).toBeLessThanOrEqual(plan.budget);
  });

  it('chat: the training context for each sequence (the prebuilt binary gives each a cache), within the budget', async () => {
    const res = await client.chat.completions.create({ model: 'qwen3-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    expect(res.choices).toHaveLength(1);
    const plan = loggedPlan('qwen3-chat');
    expect(plan.line).toMatch(new RegExp(`4 sequences × ${TINY_QWEN3.contextLength} tokens, batch 512`));
    expect(plan.bytes).toBeLessThanOrEqual(plan.budget);
  });
});
