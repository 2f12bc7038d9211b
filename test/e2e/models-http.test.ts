import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileURLToPath } from 'node:url';
import type { CatalogList, PullStreamEvent } from '../../src/api/models.js';
import { Catalog, DEFAULT_CATALOG_PATH } from '../../src/core/catalog.js';
import { startMirror, testBytes, writeCatalog, type Mirror } from '../helpers/hf-mirror.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * The model store over HTTP (the playground's Models panel uses it, like any
 * client may): GET /v1/catalog, POST /v1/models/pull (an SSE stream of
 * progress events from the real download code, against a local hub
 * mirror), DELETE /v1/models/{id}, and the rules every /v1 route keeps.
 */

const REPO = 'test-org/pullable';
let mirror: Mirror;
let dir: string;
let server: TestServer;
let keyed: TestServer;
const previousEndpoint = process.env.HF_ENDPOINT;

beforeAll(async () => {
  mirror = await startMirror();
  process.env.HF_ENDPOINT = mirror.endpoint;
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-models-http-'));
  const big = await mirror.put(REPO, 'onnx/model.onnx', testBytes(600_000, 3), { linkedEtag: true, bytesPerSecond: 2_000_000 });
  const small = await mirror.put(REPO, 'tokens.txt', testBytes(3_000, 4));
  await mirror.put(REPO, 'slow.onnx', testBytes(400_000, 5), { bytesPerSecond: 100_000 });
  const entry = (id: string, files: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
    id,
    kind: 'asr',
    backend: 'onnx',
    description: `test model ${id}`,
    owned_by: 'test',
    license: 'mit',
    files,
    ...extra,
  });
  const catalog = await writeCatalog(dir, [
    entry('tiny-pull', { encoder: { repo: REPO, path: 'onnx/model.onnx', size: big.size }, tokens: { repo: REPO, path: 'tokens.txt', sha256: small.sha256, size: small.size } }, { aliases: ['tiny'] }),
    entry('bad-sum', { model: { repo: REPO, path: 'tokens.txt', sha256: '0'.repeat(64) } }),
    entry('missing', { model: { repo: REPO, path: 'nowhere.onnx' } }),
    entry('slow', { model: { repo: REPO, path: 'slow.onnx' } }),
    Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH)).get('ppocr-v4-mobile'),
  ]);
  server = await startTestServer({ engine: { catalogPath: catalog } });
  keyed = await startTestServer({ engine: { catalogPath: catalog }, server: { apiKey: 'sekrit' } });
});

afterAll(async () => {
  await server?.stop();
  await keyed?.stop();
  await mirror?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
  if (previousEndpoint === undefined) delete process.env.HF_ENDPOINT;
  else process.env.HF_ENDPOINT = previousEndpoint;
});

async function catalog(target = server): Promise<CatalogList['data']> {
  const res = await fetch(`${target.url}/v1/catalog`);
  expect(res.status).toBe(200);
  return ((await res.json()) as CatalogList).data;
}

/** POST /v1/models/pull and every event of its stream, in order. */
async function pull(model: string, signal?: AbortSignal): Promise<{ res: Response; events: PullStreamEvent[]; names: string[] }> {
  const res = await fetch(`${server.url}/v1/models/pull`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model }), signal });
  const events: PullStreamEvent[] = [];
  const names: string[] = [];
  if (res.headers.get('content-type')?.startsWith('text/event-stream')) {
    for (const block of (await res.text()).split('\n\n').filter(Boolean)) {
      const name = /^event: (.*)$/m.exec(block)?.[1];
      const data = /^data: (.*)$/m.exec(block)?.[1];
      if (name) names.push(name);
      if (data) events.push(JSON.parse(data) as PullStreamEvent);
    }
  }
  return { res, events, names };
}

describe('GET /v1/catalog', () => {
  it('lists catalog, bundled and installed models with size, status and licence', async () => {
    const rows = await catalog();
    expect(rows.map((r) => r.id)).toEqual(['bad-sum', 'missing', 'ppocr-v4-mobile', 'slow', 'tiny-pull']);
    expect(rows.find((r) => r.id === 'tiny-pull')).toMatchObject({
      object: 'catalog.model',
      kind: 'asr',
      backend: 'onnx',
      source: 'catalog',
      size_bytes: 603_000,
      size_exact: true,
      installed: false,
      status: 'not pulled',
      loaded: false,
      aliases: ['tiny'],
      license: 'mit',
    });
    expect(rows.find((r) => r.id === 'slow')!.size_bytes).toBeNull();
    expect(rows.find((r) => r.id === 'ppocr-v4-mobile')).toMatchObject({ source: 'bundled', installed: true, status: 'bundled' });
  });
});

describe('POST /v1/models/pull', () => {
  it('streams start, per-file progress with model-wide bytes, file_done, then done; the model is installed', async () => {
    const { res, events, names } = await pull('tiny');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(names).toEqual(events.map((e) => e.type));
    expect(events[0]).toEqual({
      type: 'start',
      model: 'tiny-pull',
      files: [
        { file: 'model.onnx', role: 'encoder', size_bytes: 600_000 },
        { file: 'tokens.txt', role: 'tokens', size_bytes: 3_000 },
      ],
      total_bytes: 603_000,
    });
    const progress = events.filter((e): e is Extract<PullStreamEvent, { type: 'progress' }> => e.type === 'progress');
    // 600 kB at 2 MB/s: about 0.3 s, reported at most every 150 ms per file, plus each file's last bytes.
    expect(progress.length).toBeGreaterThanOrEqual(2);
    expect(progress.length).toBeLessThan(20);
    for (const [a, b] of progress.slice(1).map((p, i) => [progress[i]!, p] as const)) expect(b.completed_bytes).toBeGreaterThanOrEqual(a.completed_bytes);
    expect(progress.every((p) => p.model_total_bytes === 603_000 && p.completed_bytes <= 603_000)).toBe(true);
    expect(progress.at(-1)).toMatchObject({ file: 'tokens.txt', received_bytes: 3_000, total_bytes: 3_000, completed_bytes: 603_000 });
    const done = events.filter((e) => e.type === 'file_done');
    expect(done.map((e) => (e as { file: string }).file)).toEqual(['model.onnx', 'tokens.txt']);
    expect(done[0]).toMatchObject({ verified_with: 'etag', reused: false, size_bytes: 600_000 });
    expect(done[1]).toMatchObject({ verified_with: 'catalog' });
    expect(events.at(-1)).toEqual({ type: 'done', model: 'tiny-pull', kind: 'asr', size_bytes: 603_000, already_installed: false, downloaded_bytes: 603_000 });
    expect((await catalog()).find((r) => r.id === 'tiny-pull')).toMatchObject({ installed: true, status: 'installed', source: 'catalog', size_bytes: 603_000 });
    expect(((await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id)).toContain('tiny-pull');
  });

  it('answers done with already_installed for an installed model, and one JSON object with stream: false', async () => {
    const again = await pull('tiny-pull');
    expect(again.events.map((e) => e.type)).toEqual(['start', 'done']);
    expect(again.events.at(-1)).toMatchObject({ already_installed: true, downloaded_bytes: 0 });
    const res = await fetch(`${server.url}/v1/models/pull`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'tiny-pull', stream: false }) });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id: 'tiny-pull', object: 'model', kind: 'asr', size_bytes: 603_000, already_installed: true, downloaded_bytes: 0 });
  });

  it('refuses unknown, bundled and non-catalog models before streaming, with the usual error shape', async () => {
    const expectError = async (body: unknown, status: number, code: string) => {
      const res = await fetch(`${server.url}/v1/models/pull`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      expect(res.status).toBe(status);
      const error = ((await res.json()) as { error: { code: string; message: string } }).error;
      expect(error.code).toBe(code);
      return error.message;
    };
    expect(await expectError({ model: 'tiny-pul' }, 404, 'model_not_found')).toContain("Did you mean 'tiny-pull'");
    expect(await expectError({ model: 'ppocr-v4-mobile' }, 400, 'model_bundled')).toContain('bundled');
    expect(await expectError({ model: 'https://example.com/m.gguf' }, 400, 'unsupported_parameter')).toContain('lserve pull');
    expect(await expectError({ model: '/etc/passwd' }, 400, 'unsupported_parameter')).toContain('lserve pull');
    await expectError({}, 400, 'missing_required_parameter');
    await expectError({ model: 'tiny-pull', force: true }, 400, 'unsupported_parameter');
  });

  it('ends a failed pull with an error event naming the cause, and installs nothing', async () => {
    const bad = await pull('bad-sum');
    expect(bad.events.at(-1)).toMatchObject({ type: 'error', model: 'bad-sum', error: { type: 'server_error' } });
    expect(JSON.stringify(bad.events.at(-1))).toMatch(/sha256|checksum/i);
    const missing = await pull('missing');
    expect(missing.events.at(-1)).toMatchObject({ type: 'error', error: { message: expect.stringContaining('404') } });
    const rows = await catalog();
    expect(rows.find((r) => r.id === 'bad-sum')!.installed).toBe(false);
    expect(rows.find((r) => r.id === 'missing')!.installed).toBe(false);
  });

  it('stops when the client disconnects, keeps the partial download, shows it, and the next pull resumes it', async () => {
    const controller = new AbortController();
    const res = await fetch(`${server.url}/v1/models/pull`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'slow' }), signal: controller.signal });
    const reader = res.body!.getReader();
    let text = '';
    while (!text.includes('event: progress')) text += new TextDecoder().decode((await reader.read()).value);
    expect((await catalog()).find((r) => r.id === 'slow')!.status).toBe('pulling');
    // While it runs, removing it is a conflict.
    const busy = await fetch(`${server.url}/v1/models/slow`, { method: 'DELETE' });
    expect(busy.status).toBe(409);
    expect(((await busy.json()) as { error: { code: string } }).error.code).toBe('pull_in_progress');
    controller.abort();
    await expect.poll(async () => (await catalog()).find((r) => r.id === 'slow')!.status, { timeout: 10_000 }).toBe('partial');
    const partial = (await catalog()).find((r) => r.id === 'slow')!.partial_bytes!;
    expect(partial).toBeGreaterThan(0);
    mirror.configure(REPO, 'slow.onnx', {});
    const resumed = await pull('slow');
    expect(resumed.events.find((e) => e.type === 'file_start')).toMatchObject({ resumed_from: expect.any(Number) });
    expect((resumed.events.find((e) => e.type === 'file_start') as { resumed_from: number }).resumed_from).toBeGreaterThan(0);
    expect(resumed.events.at(-1)).toMatchObject({ type: 'done', size_bytes: 400_000 });
    expect((resumed.events.at(-1) as { downloaded_bytes: number }).downloaded_bytes).toBeLessThan(400_000);
  });
});

describe('DELETE /v1/models/{id}', () => {
  it("removes an installed model (OpenAI's shape); it is gone from the lists and the store", async () => {
    const res = await fetch(`${server.url}/v1/models/slow`, { method: 'DELETE' });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ id: 'slow', object: 'model', deleted: true });
    expect((await catalog()).find((r) => r.id === 'slow')).toMatchObject({ installed: false, status: 'not pulled' });
    expect(existsSync(path.join(server.home, 'models', 'slow'))).toBe(false);
    expect((await fetch(`${server.url}/v1/models/slow`)).status).toBe(404);
  });

  it('is a 404 for a model that is not installed, a 400 for a bundled one', async () => {
    const missing = await fetch(`${server.url}/v1/models/slow`, { method: 'DELETE' });
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
    const bundled = await fetch(`${server.url}/v1/models/ppocr-v4-mobile`, { method: 'DELETE' });
    expect(bundled.status).toBe(400);
    expect(((await bundled.json()) as { error: { code: string } }).error.code).toBe('model_bundled');
    const bad = await fetch(`${server.url}/v1/models/..%2F..%2Fetc`, { method: 'DELETE' });
    expect([400, 404]).toContain(bad.status);
  });

  it('is a 404 in the error shape for a catalog model never installed (even after a failed pull) and for an unknown name; a partial download stays', async () => {
    // 'missing' failed its pull above; 'bad-sum' is given a partial download as an interrupted pull leaves one.
    const staging = path.join(server.home, 'models', '.partial', 'bad-sum');
    await mkdir(staging, { recursive: true });
    await writeFile(path.join(staging, 'model.onnx.part'), testBytes(1_000, 1));
    for (const name of ['missing', 'bad-sum', 'never-heard-of-it']) {
      const res = await fetch(`${server.url}/v1/models/${name}`, { method: 'DELETE' });
      expect(res.status, name).toBe(404);
      expect(await res.json(), name).toEqual({
        error: { message: expect.stringContaining(`Model '${name}' is not installed`), type: 'not_found_error', param: 'model', code: 'model_not_found' },
      });
    }
    expect(existsSync(path.join(staging, 'model.onnx.part'))).toBe(true);
    expect((await catalog()).find((r) => r.id === 'bad-sum')).toMatchObject({ installed: false, status: 'partial', partial_bytes: 1_000 });
    await rm(staging, { recursive: true, force: true });
  });

  it('removes by alias, leaving no partial files behind', async () => {
    const res = await fetch(`${server.url}/v1/models/tiny`, { method: 'DELETE' });
    expect(await res.json()).toEqual({ id: 'tiny-pull', object: 'model', deleted: true });
    const left = await readdir(path.join(server.home, 'models')).catch(() => []);
    expect(left.filter((n) => !n.startsWith('.'))).toEqual([]);
  });
});

describe('the same rules as every /v1 route', () => {
  it('needs the API key when the server has one', async () => {
    for (const [method, route, body] of [
      ['GET', '/v1/catalog', undefined],
      ['POST', '/v1/models/pull', { model: 'tiny-pull' }],
      ['DELETE', '/v1/models/tiny-pull', undefined],
    ] as const) {
      const init = { method, headers: { 'content-type': 'application/json' }, body: body && JSON.stringify(body) };
      expect((await fetch(`${keyed.url}${route}`, init)).status, route).toBe(401);
    }
    const ok = await fetch(`${keyed.url}/v1/catalog`, { headers: { authorization: 'Bearer sekrit' } });
    expect(ok.status).toBe(200);
  });
});
