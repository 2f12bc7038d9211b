import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { renderOneLine } from '../fixtures/ocr/corpus.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * The server is safe to leave running on a desktop, where every browser tab
 * is a client of 127.0.0.1: foreign Hosts (DNS rebinding) and Origins get a
 * 403 before any work, on every route and WebSocket upgrade; path inputs
 * read nothing outside --allow-local-files; URL inputs reach no loopback or
 * private address, however spelled or redirected; no error quotes a file.
 */

let server: TestServer;
let open: TestServer;
let dir: string;
let outside: string;
let png: Buffer;

/** Every route the app mounts, with a body that would otherwise get past the boundary. */
const ROUTES: Array<{ method: string; path: string; body?: unknown; anthropic?: boolean; ollama?: boolean }> = [
  { method: 'GET', path: '/health' },
  { method: 'GET', path: '/ready' },
  { method: 'GET', path: '/v1/models' },
  { method: 'GET', path: '/v1/models/ppocr-v4-mobile' },
  { method: 'POST', path: '/v1/chat/completions', body: { model: 'x', messages: [{ role: 'user', content: 'hi' }] } },
  { method: 'POST', path: '/v1/messages', body: { model: 'x', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }, anthropic: true },
  { method: 'POST', path: '/v1/anthropic/messages', body: { model: 'x', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }, anthropic: true },
  { method: 'POST', path: '/v1/embeddings', body: { model: 'x', input: 'hi' } },
  { method: 'POST', path: '/v1/rerank', body: { model: 'x', query: 'q', documents: ['a'] } },
  { method: 'POST', path: '/v1/ocr', body: { image_base64: 'aGk=' } },
  { method: 'POST', path: '/v1/audio/transcriptions', body: { audio: 'data:audio/wav;base64,aGk=' } },
  { method: 'POST', path: '/v1/audio/speech', body: { input: 'hi' } },
  { method: 'GET', path: '/v1/audio/info' },
  { method: 'GET', path: '/v1/audio/files/00000000000000000000000000000000.wav' },
  { method: 'POST', path: '/v1/images/generations', body: { prompt: 'x' } },
  { method: 'POST', path: '/v1/images/edits', body: { prompt: 'x', image: 'aGk=' } },
  { method: 'POST', path: '/v1/images/img2img', body: { prompt: 'x', image: 'aGk=' } },
  { method: 'GET', path: '/v1/images/cache/00000000000000000000000000000000.png' },
  { method: 'GET', path: '/' },
  { method: 'GET', path: '/ui/main.js' },
  { method: 'GET', path: '/v1/catalog' },
  { method: 'POST', path: '/v1/models/pull', body: { model: 'whisper-base' } },
  { method: 'DELETE', path: '/v1/models/whisper-base' },
  // Ollama's model-management API: its errors are `{"error": "…"}`.
  { method: 'HEAD', path: '/' },
  { method: 'GET', path: '/api/version', ollama: true },
  { method: 'GET', path: '/api/tags', ollama: true },
  { method: 'GET', path: '/api/ps', ollama: true },
  { method: 'POST', path: '/api/show', body: { model: 'x' }, ollama: true },
  { method: 'POST', path: '/api/pull', body: { model: 'whisper-base' }, ollama: true },
  { method: 'DELETE', path: '/api/delete', body: { model: 'x' }, ollama: true },
  { method: 'POST', path: '/api/copy', body: { source: 'x', destination: 'y' }, ollama: true },
  { method: 'POST', path: '/api/create', body: { model: 'x' }, ollama: true },
  { method: 'POST', path: '/api/chat', body: { model: 'x', messages: [] }, ollama: true },
  { method: 'POST', path: '/api/generate', body: { model: 'x', prompt: '' }, ollama: true },
  { method: 'POST', path: '/api/embed', body: { model: 'x', input: 'y' }, ollama: true },
  { method: 'POST', path: '/api/embeddings', body: { model: 'x', prompt: 'y' }, ollama: true },
  { method: 'POST', path: '/api/push', body: { model: 'x' }, ollama: true },
  { method: 'POST', path: '/v1/completions', body: { model: 'x', prompt: 'hi' } },
  // llama.cpp's server routes: OpenAI's error shape.
  { method: 'POST', path: '/tokenize', body: { content: 'hi' } },
  { method: 'POST', path: '/detokenize', body: { tokens: [1] } },
  { method: 'POST', path: '/apply-template', body: { messages: [{ role: 'user', content: 'hi' }] } },
  { method: 'POST', path: '/infill', body: { input_prefix: 'a', input_suffix: 'b' } },
];

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** node:http, because fetch may not set Host. */
function request(target: TestServer, method: string, route: string, headers: Record<string, string>, body?: unknown): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(
      // Content-Length set: node sends a DELETE's body unframed otherwise.
      { host: '127.0.0.1', port: target.port, method, path: route, headers: { ...(payload ? { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)) } : {}), ...headers } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

function post(target: TestServer, route: string, body: unknown): Promise<Answer> {
  return request(target, 'POST', route, {}, body);
}

function expectRefused(answer: Answer, status: number, code: string, anthropic = false, ollama = false): { message: string } {
  expect(answer.status, answer.body).toBe(status);
  // HEAD answers carry no body.
  if (answer.body === '') return { message: '' };
  if (ollama) {
    const body = JSON.parse(answer.body) as { error: string };
    expect(Object.keys(body)).toEqual(['error']);
    expect(typeof body.error).toBe('string');
    expect(body.error).not.toMatch(/\n\s+at /);
    return { message: body.error };
  }
  const body = JSON.parse(answer.body) as { type?: string; error: { message: string; type: string; code?: string } };
  if (anthropic) expect(body).toMatchObject({ type: 'error', error: { type: 'permission_error' } });
  else expect(body.error).toMatchObject({ type: 'permission_error', code });
  expect(body.error.message).not.toMatch(/\n\s+at /);
  return body.error;
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-security-'));
  outside = await mkdtemp(path.join(os.tmpdir(), 'lserve-outside-'));
  server = await startTestServer({ server: { maxUploadBytes: 64 * 1024 } });
  open = await startTestServer({
    server: { allowedHosts: ['models.lan', '.corp.example'], cors: ['https://app.example.com'], allowLocalFiles: [dir], allowPrivateUrls: ['127.0.0.1'], maxUploadBytes: 64 * 1024 },
  });
  png = (await renderOneLine('Hello', 26)).png;
});

afterAll(async () => {
  await server?.stop();
  await open?.stop();
  for (const d of [dir, outside]) if (d) await rm(d, { recursive: true, force: true });
});

describe('Host and Origin', () => {
  it.each(ROUTES.map((r) => [`${r.method} ${r.path}`, r] as const))('%s: a foreign Host is a 403 before any work', async (_name, route) => {
    const answer = await request(server, route.method, route.path, { host: `attacker.example:${server.port}` }, route.body);
    expectRefused(answer, 403, 'host_not_allowed', route.anthropic, route.ollama);
  });

  it.each(ROUTES.map((r) => [`${r.method} ${r.path}`, r] as const))('%s: a foreign Origin is a 403 before any work', async (_name, route) => {
    const answer = await request(server, route.method, route.path, { origin: 'https://evil.example' }, route.body);
    expectRefused(answer, 403, 'origin_not_allowed', route.anthropic, route.ollama);
  });

  it('a DNS-rebinding page (its own name as Host, its own origin) is refused; the answer carries no data', async () => {
    const answer = await request(server, 'GET', '/v1/models', { host: `rebind.attacker.example:${server.port}`, origin: `http://rebind.attacker.example:${server.port}` });
    const error = expectRefused(answer, 403, 'host_not_allowed');
    expect(error.message).toContain('--allowed-hosts rebind.attacker.example');
    expect(answer.body).not.toContain('ppocr');
  });

  it('a cross-site form post (text/plain, no preflight) is refused before the body is read', async () => {
    const answer = await request(server, 'POST', '/v1/chat/completions', { origin: 'https://evil.example', 'content-type': 'text/plain' }, 'x');
    expectRefused(answer, 403, 'origin_not_allowed');
  });

  it('answers loopback names, IP literals, same-origin pages and clients that send no Origin', async () => {
    for (const host of [`127.0.0.1:${server.port}`, `localhost:${server.port}`, `[::1]:${server.port}`, `app.localhost:${server.port}`, `10.0.0.5:${server.port}`]) {
      expect((await request(server, 'GET', '/v1/models', { host })).status, host).toBe(200);
    }
    expect((await request(server, 'GET', '/v1/models', { origin: `http://127.0.0.1:${server.port}` })).status).toBe(200);
    expect((await request(server, 'GET', '/v1/models', { host: `localhost:${server.port}`, origin: `http://localhost:${server.port}` })).status).toBe(200);
    // Another port on loopback is another origin.
    expectRefused(await request(server, 'GET', '/v1/models', { origin: `http://127.0.0.1:${server.port + 1}` }), 403, 'origin_not_allowed');
    expectRefused(await request(server, 'GET', '/v1/models', { origin: 'null' }), 403, 'origin_not_allowed');
    expectRefused(await request(server, 'GET', '/v1/models', { host: 'bad host' }), 403, 'host_not_allowed');
  });

  it('--allowed-hosts and --cors open exactly what they name', async () => {
    for (const host of ['models.lan', 'gpu.corp.example:8080']) expect((await request(open, 'GET', '/v1/models', { host })).status).toBe(200);
    expectRefused(await request(open, 'GET', '/v1/models', { host: 'models.lan.attacker.example' }), 403, 'host_not_allowed');
    const cors = await request(open, 'GET', '/v1/models', { origin: 'https://app.example.com' });
    expect(cors.status).toBe(200);
    expect(cors.headers['access-control-allow-origin']).toBe('https://app.example.com');
    const preflight = await request(open, 'OPTIONS', '/v1/chat/completions', { origin: 'https://app.example.com', 'access-control-request-method': 'POST' });
    expect(preflight.status).toBe(204);
    expectRefused(await request(open, 'OPTIONS', '/v1/chat/completions', { origin: 'https://evil.example', 'access-control-request-method': 'POST' }), 403, 'origin_not_allowed');
  });

  it('WebSocket upgrades follow the same rules', async () => {
    const upgrade = (headers: Record<string, string>) =>
      new Promise<number>((resolve) => {
        const socket = new WebSocket(`ws://127.0.0.1:${server.port}/v1/audio/transcriptions/stream?model=none`, { headers });
        socket.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
        socket.on('open', () => {
          resolve(101);
          socket.close();
        });
        socket.on('error', () => resolve(0));
      });
    expect(await upgrade({ host: `attacker.example:${server.port}` })).toBe(403);
    expect(await upgrade({ origin: 'https://evil.example' })).toBe(403);
    // Allowed: the upgrade goes through (and the unknown model is then told over the socket).
    expect(await upgrade({ origin: `http://127.0.0.1:${server.port}` })).toBe(101);
  });
});

describe('local files', () => {
  it.each(['/etc/passwd', '/etc/shadow', '/proc/self/environ', 'file:///etc/passwd', 'file://localhost/etc/passwd'])('%s is refused by default, on every field that names a payload', async (source) => {
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['/v1/ocr', { image_url: source }, 'image_url'],
      ['/v1/audio/transcriptions', { audio: source }, 'audio'],
      ['/v1/images/edits', { prompt: 'x', image: source }, 'image'],
      ['/v1/images/img2img', { prompt: 'x', image: source }, 'image'],
    ];
    for (const [route, body, param] of cases) {
      const answer = await post(server, route, body);
      const error = expectRefused(answer, 403, 'local_files_forbidden');
      expect(error.message).toContain('--allow-local-files');
      expect(JSON.parse(answer.body).error.param).toBe(param);
      expect(answer.body).not.toMatch(/root:|PATH=/);
    }
  });

  it('reads files under --allow-local-files only: no traversal, no symlink out, no file quoted', async () => {
    await writeFile(path.join(dir, 'line.png'), png);
    await writeFile(path.join(outside, 'secret.png'), png);
    await writeFile(path.join(dir, 'secret.txt'), 'root:$6$topsecret$hash:19000:0:99999:7:::\n');
    await symlink(path.join(outside, 'secret.png'), path.join(dir, 'link-out.png'));
    await symlink(outside, path.join(dir, 'dir-out'));
    await mkdir(path.join(dir, 'sub'));
    await symlink(path.join(dir, 'line.png'), path.join(dir, 'sub', 'link-in.png'));

    expect((await post(open, '/v1/ocr', { image_url: path.join(dir, 'line.png') })).status).toBe(200);
    expect((await post(open, '/v1/ocr', { image_url: `file://${path.join(dir, 'sub', 'link-in.png')}` })).status).toBe(200);
    for (const source of [
      `${dir}/../${path.basename(outside)}/secret.png`,
      path.join(dir, 'link-out.png'),
      path.join(dir, 'dir-out', 'secret.png'),
      `file://${dir}/%2e%2e/${path.basename(outside)}/secret.png`,
      path.join(outside, 'missing.png'),
    ]) {
      expectRefused(await post(open, '/v1/ocr', { image_url: source }), 403, 'local_files_forbidden');
    }
    const missing = await post(open, '/v1/ocr', { image_url: path.join(dir, 'missing.png') });
    expect(missing.status).toBe(400);
    expect(JSON.parse(missing.body).error.code).toBe('file_not_found');
    // An allowed file that is no audio or image: a 400 invalid_image / invalid_audio that quotes none of it.
    for (const [route, body] of [
      ['/v1/ocr', { image_url: path.join(dir, 'secret.txt') }],
      ['/v1/audio/transcriptions', { audio: path.join(dir, 'secret.txt') }],
    ] as const) {
      const answer = await post(open, route, body);
      expect([404, 400]).toContain(answer.status);
      if (answer.status === 400) expect(JSON.parse(answer.body).error.code).toBe(route === '/v1/ocr' ? 'invalid_image' : 'invalid_audio');
      expect(answer.body).not.toMatch(/root|topsecret|\$6\$|72 6f 6f 74/);
    }
  });
});

describe('URL inputs', () => {
  let hits = 0;
  let target: http.Server;
  let port: number;

  beforeAll(async () => {
    target = http.createServer((req, res) => {
      hits++;
      if (req.url === '/line.png') return res.end(png);
      if (req.url === '/big') return res.end(Buffer.alloc(128 * 1024));
      if (req.url === '/loop') return res.writeHead(302, { location: '/loop' }).end();
      if (req.url?.startsWith('/to?')) return res.writeHead(302, { location: decodeURIComponent(req.url.slice(4)) }).end();
      res.writeHead(404).end('secret body that must not be quoted');
    });
    await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
    port = (target.address() as AddressInfo).port;
  });

  afterAll(() => new Promise<void>((resolve) => target.close(() => resolve())));

  it('refuses loopback, private, link-local and metadata addresses however they are spelled, without connecting', async () => {
    hits = 0;
    const spellings = [
      `http://127.0.0.1:${port}/line.png`,
      `http://localhost:${port}/line.png`,
      `http://2130706433:${port}/line.png`,
      `http://0x7f000001:${port}/line.png`,
      `http://0x7f.1:${port}/line.png`,
      `http://127.1:${port}/line.png`,
      `http://0177.0.0.1:${port}/line.png`,
      `http://[::1]:${port}/line.png`,
      `http://[::ffff:127.0.0.1]:${port}/line.png`,
      `http://[::ffff:7f00:1]:${port}/line.png`,
      `http://0.0.0.0:${port}/line.png`,
      'http://169.254.169.254/latest/meta-data/',
      'http://[fd00:ec2::254]/latest/meta-data/',
      'http://10.0.0.1/x.png',
      'http://192.168.1.1/x.png',
      'http://172.16.0.1/x.png',
      'http://100.64.0.1/x.png',
      'http://[fe80::1]/x.png',
      'http://224.0.0.1/x.png',
    ];
    for (const url of spellings) {
      const started = Date.now();
      const error = expectRefused(await post(server, '/v1/ocr', { image_url: url }), 403, 'private_url_forbidden');
      expect(error.message).toContain('--allow-private-urls');
      expect(Date.now() - started, url).toBeLessThan(2_000);
    }
    expect(hits).toBe(0);
  });

  it('checks every redirect hop: a redirect into the private network is refused', async () => {
    const other = http.createServer((_req, res) => res.end(png));
    await new Promise<void>((resolve) => other.listen(0, '127.0.0.2', resolve));
    let otherHits = 0;
    other.on('request', () => otherHits++);
    try {
      const otherPort = (other.address() as AddressInfo).port;
      // The allowlist names 127.0.0.1 only: a hop to 127.0.0.2 or [::1] is refused.
      for (const to of [`http://127.0.0.2:${otherPort}/x.png`, `http://[::1]:${otherPort}/x.png`, `http://2130706434:${otherPort}/x.png`]) {
        expectRefused(await post(open, '/v1/ocr', { image_url: `http://127.0.0.1:${port}/to?${encodeURIComponent(to)}` }), 403, 'private_url_forbidden');
      }
      expect(otherHits).toBe(0);
      // A hop to an allowed address is followed.
      expect((await post(open, '/v1/ocr', { image_url: `http://127.0.0.1:${port}/to?${encodeURIComponent(`http://127.0.0.1:${port}/line.png`)}` })).status).toBe(200);
    } finally {
      await new Promise<void>((resolve) => other.close(() => resolve()));
    }
  });

  it('bounds redirects, size and scheme; quotes no fetched body', async () => {
    const loop = await post(open, '/v1/ocr', { image_url: `http://127.0.0.1:${port}/loop` });
    expect(loop.status).toBe(400);
    expect(JSON.parse(loop.body).error).toMatchObject({ code: 'fetch_failed', message: expect.stringContaining('more than 5 redirects') });
    const big = await post(open, '/v1/ocr', { image_url: `http://127.0.0.1:${port}/big` });
    expect(big.status).toBe(413);
    const scheme = await post(open, '/v1/ocr', { image_url: `http://127.0.0.1:${port}/to?${encodeURIComponent('file:///etc/passwd')}` });
    expect(scheme.status).toBe(400);
    expect(scheme.body).not.toContain('root:');
    const notFound = await post(open, '/v1/ocr', { image_url: `http://127.0.0.1:${port}/nothing` });
    expect(notFound.status).toBe(400);
    expect(notFound.body).toContain('HTTP 404');
    expect(notFound.body).not.toContain('secret body');
  });

  it('keeps serving afterwards and logged no server error', async () => {
    expect((await request(server, 'GET', '/health', {})).status).toBe(200);
    expect((await request(open, 'GET', '/health', {})).status).toBe(200);
    expect([...server.logs, ...open.logs].filter((line) => line.startsWith('error '))).toEqual([]);
  });
});
