import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { parseByteSize } from '../../src/core/units.js';
import type { KvCacheType } from '../../src/core/loader.js';
import { NEVER_END, tinyQwen3LongFile } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * `--kv-cache-type` (the engine's kvCacheType) through the real server and
 * its runner process: the tiny random Qwen3 with its 40960-token training
 * context loads with the cache type asked for, says so in its plan, and
 * answers; llama.cpp's estimate of an f32 cache is above the default's.
 */

const MODEL = 'qwen3-kv';
const servers: TestServer[] = [];

afterAll(async () => {
  await Promise.all(servers.map((server) => server.stop()));
});

/** Loads the model on a server with this cache type (undefined: the default), answers one request, and returns the plan it logged. */
async function loadWith(kvCacheType: KvCacheType | undefined): Promise<{ line: string; bytes: number; answer: OpenAI.ChatCompletion }> {
  const server = await startTestServer({ engine: { threads: 1, parallel: 1, kvCacheType } });
  servers.push(server);
  await server.engine.store.registerLocal(tinyQwen3LongFile(), { kind: 'chat', id: MODEL });
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const answer = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3, logit_bias: NEVER_END });
  const line = server.logs.find((l) => l.startsWith(`${MODEL}: context plan:`));
  expect(line, server.logs.join('\n')).toBeDefined();
  const bytes = /≈([\d.]+ [kMG]?B) of a/.exec(line!)?.[1];
  expect(bytes, line).toBeDefined();
  return { line: line!, bytes: parseByteSize(bytes!.replace(' ', '')), answer };
}

describe('a chat model with the KV cache type asked for', () => {
  it('loads with an f32 cache, names it in its plan, answers, and is planned larger than the default f16', async () => {
    const f32 = await loadWith('f32');
    expect(f32.line).toMatch(/context plan: 40960 tokens, f32 KV cache, batch 512, /);
    expect(f32.answer.choices[0]!.finish_reason).toBe('length');
    expect(f32.answer.usage!.completion_tokens).toBe(3);
    const f16 = await loadWith(undefined);
    expect(f16.line).toMatch(/context plan: 40960 tokens, batch 512, /);
    // Twice the cache's 10.5 MB, and attention without flash attention's savings.
    expect(f32.bytes - f16.bytes).toBeGreaterThanOrEqual(10_000_000);
  }, 120_000);
});
