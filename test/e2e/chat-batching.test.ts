import { afterEach, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import type { LlamaChatModel } from '../../src/families/llama/chat.js';

/**
 * Concurrent generations share decodes: with 4 streams on 4 sequences every
 * decode llama.cpp runs carries one token of each, in ascending sequence
 * order (what llama.cpp needs to put them in one micro-batch). Observed on
 * the real context by recording the batches node-llama-cpp hands to its
 * native addon (`_ctx`, internal to node-llama-cpp 3.21.1: initBatch, then
 * addToBatch per sequence, then decodeBatch).
 */

let server: TestServer | undefined;

afterEach(async () => {
  await server?.stop();
  server = undefined;
});

/** Wraps the context's native handle so each decoded batch's sequence ids are recorded. */
function recordBatches(model: LlamaChatModel): number[][] {
  const batches: number[][] = [];
  const target = model.context as unknown as { _ctx: Record<string | symbol, unknown> };
  const native = target._ctx;
  let current: number[] = [];
  target._ctx = new Proxy(native, {
    get(object, property) {
      const value = object[property];
      if (typeof value !== 'function') return value;
      if (property === 'initBatch') {
        return (...args: unknown[]) => {
          current = [];
          return value.apply(object, args);
        };
      }
      if (property === 'addToBatch') {
        return (sequenceId: number, ...rest: unknown[]) => {
          current.push(sequenceId);
          return value.call(object, sequenceId, ...rest);
        };
      }
      if (property === 'decodeBatch') {
        return (...args: unknown[]) => {
          batches.push(current);
          return value.apply(object, args);
        };
      }
      return value.bind(object);
    },
  });
  return batches;
}

async function complete(s: TestServer, maxTokens: number): Promise<number> {
  const res = await fetch(`${s.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: CHAT_MODEL_ID, max_tokens: maxTokens, logit_bias: NEVER_END, stream: true, messages: [{ role: 'user', content: 'tell me a story' }] }),
  });
  await res.arrayBuffer();
  return res.status;
}

describe('chat batching across sequences', () => {
  it('decodes 4 concurrent streams in lock step: one token of each per batch, sequences ascending', async () => {
    // In this process: the test counts the batches the family's context decodes.
    server = await startTestServer({ engine: { threads: 1, parallel: 4, isolation: 'server' } });
    await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
    expect(await complete(server, 1)).toBe(200); // loads the model
    const lease = await server.engine.acquire<LlamaChatModel>(CHAT_MODEL_ID, ['chat']);
    const batches = recordBatches(lease.model);
    lease.release();

    const tokens = 24;

    const statuses = await Promise.all(Array.from({ length: 4 }, () => complete(server!, tokens)));
    expect(statuses).toEqual([200, 200, 200, 200]);

    // Each batch lists the sequences whose tokens it carries (prompt or next token).
    // (A straggler held up over 15 ms, e.g. by a GC pause on a loaded machine, may miss one batch.)
    const full = batches.filter((ids) => ids.length === 4);
    expect(full.length, `batches: ${JSON.stringify(batches)}`).toBeGreaterThanOrEqual(tokens * 0.75);
    for (const ids of batches) expect(ids, `batches: ${JSON.stringify(batches)}`).toEqual([...ids].sort((a, b) => a - b));
    // The four streams used four different sequences, 0–3, all busy at once.
    expect(full.every((ids) => ids.join() === '0,1,2,3')).toBe(true);
    expect(batches.length).toBeLessThanOrEqual(tokens * 1.25 + 2);
  }, 60_000);
});
