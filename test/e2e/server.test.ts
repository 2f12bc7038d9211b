import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { BIN } from '../helpers/cli.js';

function expectOpenAIError(body: unknown, type: string): void {
  expect(body).toMatchObject({ error: { message: expect.any(String), type } });
  const error = (body as { error: Record<string, unknown> }).error;
  expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(JSON.stringify(body)).not.toMatch(/at .*\.(ts|js):\d+/); // no stack traces
}

describe('HTTP server', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ server: { maxBodyBytes: 64 * 1024 } });
  });
  afterAll(async () => {
    await server.stop();
  });

  it('GET /health answers ok', async () => {
    const res = await fetch(`${server.url}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok' });
  });

  it('GET /v1/models lists the bundled OCR model in the specification shape', async () => {
    const res = await fetch(`${server.url}/v1/models`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { object: string; data: Array<Record<string, unknown>> };
    expect(body.object).toBe('list');
    const ocr = body.data.find((m) => m.id === 'ppocr-v4-mobile');
    expect(ocr).toMatchObject({ id: 'ppocr-v4-mobile', object: 'model', owned_by: 'PaddlePaddle', status: 'running', kind: 'ocr', loaded: false });
    expect(Number.isInteger(ocr!.created)).toBe(true);
    expect(ocr!.created as number).toBeGreaterThan(1_500_000_000);
  });

  it('GET /v1/models/:id retrieves one model, by id or alias, and 404s an unknown one', async () => {
    expect(await (await fetch(`${server.url}/v1/models/ppocr-v4-mobile`)).json()).toMatchObject({ id: 'ppocr-v4-mobile' });
    expect(await (await fetch(`${server.url}/v1/models/ppocrv4`)).json()).toMatchObject({ id: 'ppocr-v4-mobile' });
    const res = await fetch(`${server.url}/v1/models/no-such-model`);
    expect(res.status).toBe(404);
    const body = await res.json();
    expectOpenAIError(body, 'not_found_error');
    expect(body).toMatchObject({ error: { code: 'model_not_found', param: 'model' } });
  });

  it('an unknown route is a 404 in the error shape', async () => {
    const res = await fetch(`${server.url}/v1/nothing-here`, { method: 'POST' });
    expect(res.status).toBe(404);
    expectOpenAIError(await res.json(), 'not_found_error');
  });

  it('malformed JSON is a 400 in the error shape, and the server keeps serving', async () => {
    const res = await fetch(`${server.url}/v1/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model": ' });
    expect(res.status).toBe(400);
    const body = await res.json();
    expectOpenAIError(body, 'invalid_request_error');
    expect(body).toMatchObject({ error: { code: 'invalid_json' } });
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('a body over the limit is a 413', async () => {
    const big = JSON.stringify({ input: 'x'.repeat(100 * 1024) });
    const res = await fetch(`${server.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: big });
    expect(res.status).toBe(413);
    expectOpenAIError(await res.json(), 'invalid_request_error');
  });

  it('logs one line per request', async () => {
    await fetch(`${server.url}/health`);
    await new Promise((r) => setTimeout(r, 20));
    expect(server.logs.some((l) => /^GET \/health 200 \d+ms$/.test(l))).toBe(true);
  });
});

describe('API key and CORS', () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startTestServer({ server: { apiKey: 'sekret', cors: true } });
  });
  afterAll(async () => {
    await server.stop();
  });

  it('rejects /v1 requests without the key with a 401', async () => {
    const res = await fetch(`${server.url}/v1/models`);
    expect(res.status).toBe(401);
    expectOpenAIError(await res.json(), 'authentication_error');
    expect((await fetch(`${server.url}/v1/models`, { headers: { authorization: 'Bearer wrong!' } })).status).toBe(401);
  });

  it('asks the key on llama.cpp\'s routes too', async () => {
    for (const route of ['/tokenize', '/detokenize', '/apply-template', '/infill']) {
      const res = await fetch(`${server.url}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      expect(res.status, route).toBe(401);
      expectOpenAIError(await res.json(), 'authentication_error');
    }
  });

  it('accepts Bearer and x-api-key', async () => {
    expect((await fetch(`${server.url}/v1/models`, { headers: { authorization: 'Bearer sekret' } })).status).toBe(200);
    expect((await fetch(`${server.url}/v1/models`, { headers: { 'x-api-key': 'sekret' } })).status).toBe(200);
  });

  it('leaves /health open and answers CORS preflight', async () => {
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    const res = await fetch(`${server.url}/v1/models`, { method: 'OPTIONS', headers: { origin: 'http://app.test', 'access-control-request-method': 'GET' } });
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
  });

  it('without a key configured, no key is needed', async () => {
    const open = await startTestServer();
    try {
      expect((await fetch(`${open.url}/v1/models`)).status).toBe(200);
      expect((await fetch(`${open.url}/v1/models`)).headers.get('access-control-allow-origin')).toBeNull();
    } finally {
      await open.stop();
    }
  });
});

describe('lserve serve process', () => {
  let home: string;
  beforeAll(async () => {
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-serve-'));
  });
  afterAll(async () => {
    await rm(home, { recursive: true, force: true });
  });

  it('starts, serves, and exits 0 on SIGTERM', async () => {
    const child = spawn(process.execPath, [BIN, '--home', home, 'serve', '--port', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on('data', (d: Buffer) => {
        stderr += d;
        const match = /listening on (http:\/\/[^\s/]+)/.exec(stderr);
        if (match) resolve(match[1]!);
      });
      child.on('exit', (code) => reject(new Error(`serve exited early (${code}): ${stderr}`)));
    });
    const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toContain('ppocr-v4-mobile');
    const exit = new Promise<number | null>((resolve) => child.on('exit', resolve));
    child.kill('SIGTERM');
    expect(await exit).toBe(0);
    expect(stderr).toMatch(/SIGTERM: shutting down/);
  });
});
