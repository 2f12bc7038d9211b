import { afterEach, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import type { LlamaChatModel } from '../../src/families/llama/chat.js';

/**
 * Many sequences in one context (`lserve serve --parallel 8|16`): every
 * sequence serves a request at the same time, and the load reports the
 * context it chose. On the binary these suites run (vitest.config.ts: the
 * prebuilt one, whose sequences each have a KV cache of their own) a default
 * size is each sequence's, and an explicit one is shared by them, as
 * llama-server's `-c` with `-np`; lserve's own binary shares one cache
 * (test/e2e/chat-context.test.ts).
 */

let server: TestServer | undefined;

afterEach(async () => {
  await server?.stop();
  server = undefined;
});

async function complete(s: TestServer): Promise<number> {
  const res = await fetch(`${s.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: CHAT_MODEL_ID, temperature: 0, max_tokens: 4, logit_bias: NEVER_END, messages: [{ role: 'user', content: 'go' }] }),
  });
  await res.arrayBuffer();
  return res.status;
}

describe.each([8, 16])('chat with parallel: %i', (parallel) => {
  it(`serves ${parallel} concurrent first requests, one per sequence, and logs the context it chose`, async () => {
    // In this process: the test reads the context the family created.
    server = await startTestServer({ engine: { threads: 1, parallel, maxQueue: 4, isolation: 'server' } });
    await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
    const statuses = await Promise.all(Array.from({ length: parallel }, () => complete(server!)));
    expect(statuses).toEqual(Array(parallel).fill(200));

    // The model's whole training context (4096) for each sequence: the default, as memory allows.
    const perSequence = 4096;
    expect(server.logs.some((l) => l.includes(`context plan: ${parallel} sequences × ${perSequence} tokens, batch 512`))).toBe(true);
    expect(server.logs.some((l) => l.includes(`context ready in`) && l.includes(`${parallel} × ${perSequence} tokens`))).toBe(true);
    const lease = await server.engine.acquire<LlamaChatModel>(CHAT_MODEL_ID, ['chat']);
    try {
      expect(lease.model.context.totalSequences).toBe(parallel);
      expect(lease.model.contextSize).toBe(perSequence);
      // The KV cache counts toward the model's memory from the start.
      expect(lease.model.memoryBytes).toBeGreaterThan(lease.model.model.size);
    } finally {
      lease.release();
    }
  }, 30_000);
});

it('an explicit size is shared by the sequences of a split cache', async () => {
  server = await startTestServer({ engine: { threads: 1, parallel: 8, isolation: 'server', contextSizes: { all: 4096, models: {} } } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  expect(await complete(server)).toBe(200);
  expect(server.logs.some((l) => l.includes('context plan: 8 sequences × 512 tokens') && l.includes('--ctx-size 4096; shared by 8 sequences'))).toBe(true);
  const lease = await server.engine.acquire<LlamaChatModel>(CHAT_MODEL_ID, ['chat']);
  try {
    expect(lease.model.contextSize).toBe(512);
  } finally {
    lease.release();
  }
}, 30_000);
