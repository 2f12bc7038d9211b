import { afterEach, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import type { LlamaChatModel } from '../../src/families/llama/chat.js';
import { sequenceContextSize } from '../../src/families/llama/chat.js';

/**
 * Many sequences in one context (`lserve serve --parallel 8|16`): every
 * sequence serves a request at the same time, the load reports the context it
 * chose, and the per-sequence context shrinks with the sequence count so the
 * KV cache (allocated whole at load) stays bounded.
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

    const perSequence = sequenceContextSize(4096, parallel);
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

describe('sequenceContextSize', () => {
  it('shares a budget between sequences like llama-server (-c / -np), never below the floor', () => {
    expect([1, 2, 4, 8, 16, 64].map((p) => sequenceContextSize(4096, p))).toEqual([4096, 4096, 4096, 2048, 1024, 512]);
    // The catalog's Qwen3 context: one sequence gets all of it, 8 share it.
    expect([1, 2, 4, 8].map((p) => sequenceContextSize(8192, p))).toEqual([8192, 8192, 4096, 2048]);
    // An asked-for long context is a total budget shared by the sequences.
    expect(sequenceContextSize(40_960, 4)).toBe(10_240);
    // A model whose whole context is small keeps it.
    expect(sequenceContextSize(256, 16)).toBe(256);
  });
});
