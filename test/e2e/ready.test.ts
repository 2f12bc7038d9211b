import { readFileSync, writeFileSync } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { ReadinessCheck } from '../../src/http/context.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * GET /ready (readiness, for balancers and Kubernetes) beside GET /health
 * (liveness), through the real server: ready with a readable model store and
 * every registered check passing; 503 naming the check that failed or timed
 * out, without its error; a model that fails to load leaves the replica
 * ready; open without the API key, like /health (and behind the Host check
 * like every route: security.test.ts);
 * and unready at once when a drain begins, with lserve_draining at 1.
 */

interface ReadyBody {
  status: 'ready' | 'unready';
  draining: boolean;
  checks: Record<string, string>;
}

async function ready(server: TestServer): Promise<{ status: number; body: ReadyBody; cache: string | null }> {
  const res = await fetch(`${server.url}/ready`);
  return { status: res.status, body: (await res.json()) as ReadyBody, cache: res.headers.get('cache-control') };
}

describe('GET /ready', () => {
  let server: TestServer;
  /** What the test's stand-in dependency (a check a backend registers) does when asked. */
  let dependency: (signal: AbortSignal) => Promise<void> = async () => {};
  let pingAborted = false;

  beforeAll(async () => {
    const check: ReadinessCheck = { name: 'dependency', check: (signal) => dependency(signal) };
    server = await startTestServer({ server: { apiKey: 'sesame', readiness: [check], readinessTimeoutMs: 300 } });
    await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  });

  afterAll(async () => {
    await server?.stop();
  });

  afterEach(() => {
    dependency = async () => {};
  });

  it('is 200 with every check ok, and needs no API key (like /health)', async () => {
    const { status, body, cache } = await ready(server);
    expect(status).toBe(200);
    expect(body).toEqual({ status: 'ready', draining: false, checks: { model_store: 'ok', database: 'ok', dependency: 'ok' } });
    expect(cache).toBe('no-store');
    expect((await fetch(`${server.url}/v1/models`)).status).toBe(401);
  });

  it('is 503 naming a check that fails, without its error, which goes to the log once', async () => {
    dependency = async () => {
      throw new Error('password authentication failed for user "lserve"');
    };
    const first = await ready(server);
    const second = await ready(server);
    expect(first.status).toBe(503);
    expect(first.body).toEqual({ status: 'unready', draining: false, checks: { model_store: 'ok', database: 'ok', dependency: 'failed' } });
    expect(second.body.checks.dependency).toBe('failed');
    expect(JSON.stringify(first.body)).not.toContain('password');
    expect(server.logs.filter((l) => l.includes("ready check 'dependency' failed") && l.includes('password authentication failed'))).toHaveLength(1);
    dependency = async () => {};
    expect((await ready(server)).status).toBe(200);
    expect(server.logs).toContain("ready check 'dependency' ok again");
  });

  it('is 503 when a check outlasts its timeout, whose signal it is given', async () => {
    dependency = (signal) =>
      new Promise((_resolve, reject) =>
        signal.addEventListener('abort', () => {
          pingAborted = true;
          reject(signal.reason as Error);
        }),
      );
    const start = performance.now();
    const { status, body } = await ready(server);
    expect(status).toBe(503);
    expect(body.checks).toEqual({ model_store: 'ok', database: 'ok', dependency: 'timeout' });
    expect(performance.now() - start).toBeLessThan(3000);
    expect(pingAborted).toBe(true);
  });

  it('is 503 when the model store cannot be read, and ready again once it can', async () => {
    const models = server.engine.store.modelsDir;
    const moved = `${models}.away`;
    await rm(moved, { recursive: true, force: true });
    await rename(models, moved);
    try {
      // A file where the store's folder should be: listing it fails (ENOTDIR), as an unreadable mount would.
      await writeFile(models, 'not a folder');
      const { status, body } = await ready(server);
      expect(status).toBe(503);
      expect(body.checks).toEqual({ model_store: 'failed', database: 'ok', dependency: 'ok' });
    } finally {
      await rm(models, { force: true });
      await rename(moved, models);
    }
    expect((await ready(server)).status).toBe(200);
  });

  it('stays ready while a model fails to load: another replica would fail the same way', async () => {
    const whole = readFileSync(tinyQwen3File());
    const dir = path.join(server.home, 'broken');
    await mkdir(dir, { recursive: true });
    const truncated = path.join(dir, 'truncated.gguf');
    writeFileSync(truncated, whole.subarray(0, whole.length >> 1));
    await server.engine.store.registerLocal(truncated, { kind: 'chat', id: 'truncated' });
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sesame' },
      body: JSON.stringify({ model: 'truncated', max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(500);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('model_load_failed');
    expect((await ready(server)).status).toBe(200);
  });
});

describe('GET /ready while draining', () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({ server: { metrics: true } });
  });

  afterAll(async () => {
    await server?.stop();
  });

  it('turns 503 at once and lserve_draining 1, while /health stays 200 and new requests are still served in the grace', async () => {
    const gauge = async () => /^lserve_draining (\d)$/m.exec(await (await fetch(`${server.url}/metrics`)).text())?.[1];
    expect(await gauge()).toBe('0');
    // A long grace: the test ends it with stop() (close() cuts a drain short).
    void server.drain({ graceMs: 60_000, timeoutMs: 60_000 });
    const { status, body } = await ready(server);
    expect(status).toBe(503);
    expect(body).toEqual({ status: 'unready', draining: true, checks: {} });
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    expect(await gauge()).toBe('1');
    const models = await fetch(`${server.url}/v1/models`);
    expect(models.status).toBe(200);
    // Served, but the connection is not kept for another request.
    expect(models.headers.get('connection')).toBe('close');
  });
});
