import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_OLLAMA_NAME_CHARS } from '../../src/api/ollama/models.js';
import { tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * The malformed-request corpus (malformed-requests.test.ts) for Ollama's
 * routes, in Ollama's error shape (`{"error": "…"}`):
 * broken and wrongly typed JSON, hostile nesting, bodies over the limit,
 * huge names, unknown models and fields, and names that are paths or URLs,
 * which no route may read as a file. Each is a 4xx with one sentence and no
 * stack; the server keeps serving and logs no fault.
 */

const MAX_BODY = 256 * 1024;
let server: TestServer;
let outside: string;
/** A file a path trick would read if a route took a name for a path. */
let secretFile: string;
const SECRET = 'TOP-SECRET-CONTENTS';

interface Case {
  name: string;
  method: 'POST' | 'DELETE';
  path: string;
  body: string;
  headers?: Record<string, string>;
  status: number;
}

/** Unknown fields are ignored on every route, as Ollama ignores them (its clients add fields release by release). */
const ROUTES: Array<{ method: 'POST' | 'DELETE'; path: string; base: Record<string, unknown>; wrong: Array<[string, unknown]> }> = [
  {
    method: 'POST',
    path: '/api/chat',
    base: { model: 'qwen3-test', messages: [{ role: 'user', content: 'hi' }], stream: false, options: { num_predict: 1 } },
    wrong: [['messages', 'hi'], ['messages', [{ role: 'wizard', content: 'x' }]], ['messages', [{ role: 'user', content: 5 }]], ['messages', [{ role: 'user', content: 'x', images: ['%%%'] }]], ['tools', [{ function: { name: 'bad name!' } }]], ['think', 'maybe'], ['format', 5], ['options', { temperature: 'hot' }], ['options', { num_predict: 1e12 }], ['keep_alive', 'soon'], ['stream', 'yes']],
  },
  {
    method: 'POST',
    path: '/api/generate',
    base: { model: 'qwen3-test', prompt: 'hi', stream: false, options: { num_predict: 1 } },
    wrong: [['prompt', 5], ['suffix', 7], ['raw', 'yes'], ['images', ['%%%']], ['context', [-1]], ['context', ['a']], ['context', [1e12]], ['options', 'x']],
  },
  { method: 'POST', path: '/api/embed', base: { model: 'no-such-model', input: 'x' }, wrong: [['input', 5], ['input', [1, 2]], ['truncate', 'yes'], ['dimensions', -1]]},
  { method: 'POST', path: '/api/embeddings', base: { model: 'no-such-model', prompt: 'x' }, wrong: [['prompt', 5], ['options', []]]},
  { method: 'POST', path: '/api/show', base: { model: 'qwen3-test' }, wrong: [['model', 123], ['model', ['x']], ['verbose', 'yes'], ['options', 'x'], ['name', {}]] },
  { method: 'POST', path: '/api/pull', base: { model: 'no-such-model' }, wrong: [['model', 5], ['stream', 'yes'], ['insecure', 'no'], ['name', null]] },
  { method: 'DELETE', path: '/api/delete', base: { model: 'no-such-model' }, wrong: [['model', 5], ['name', true]] },
  { method: 'POST', path: '/api/copy', base: { source: 'qwen3-test', destination: 'qwen3-copy' }, wrong: [['source', 5], ['destination', []], ['source', null]] },
  { method: 'POST', path: '/api/push', base: { model: 'me/x' }, wrong: [['model', 5], ['stream', 1]] },
];

function cases(): Case[] {
  const out: Case[] = [];
  const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
  for (const route of ROUTES) {
    const c = (name: string, body: string, status: number, headers?: Record<string, string>) => out.push({ name, method: route.method, path: route.path, body, status, headers });
    c('broken JSON', '{"model": "x", ', 400);
    c('JSON array at top level', '[1,2,3]', 400);
    c('JSON string at top level', '"hello"', 400);
    c('JSON null at top level', 'null', 400);
    c('empty body', '', 400);
    c('XML body', '<request><model>x</model></request>', 400, { 'content-type': 'application/xml' });
    c('body over the limit', JSON.stringify({ ...route.base, pad: 'x'.repeat(MAX_BODY + 1024) }), 413);
    c('100000 nested arrays', nested(100_000), 400);
    for (const [field, value] of route.wrong) c(`${field}: ${JSON.stringify(value)}`, JSON.stringify({ ...route.base, [field]: value }), 400);
    const nameField = route.path === '/api/copy' ? 'source' : 'model';
    c('a name over the bound', JSON.stringify({ ...route.base, [nameField]: 'x'.repeat(MAX_OLLAMA_NAME_CHARS + 1) }), 400);
    if (route.path !== '/api/copy') c('no model named', JSON.stringify({}), 400);
  }
  return out;
}

/** Names that are paths or URLs: none may be read as a file. */
function trickNames(): string[] {
  return ['../../etc/passwd', '/etc/passwd', secretFile, `file://${secretFile}`, '..', './', `..${path.sep}..${path.sep}x`, 'C:\\Windows\\win.ini', '%2e%2e%2fetc%2fpasswd'];
}

beforeAll(async () => {
  outside = await mkdtemp(path.join(os.tmpdir(), 'lserve-ollama-outside-'));
  secretFile = path.join(outside, 'secret.gguf');
  await writeFile(secretFile, SECRET);
  server = await startTestServer({ server: { maxBodyBytes: MAX_BODY } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: 'qwen3-test' });
});

afterAll(async () => {
  await server?.stop();
  if (outside) await rm(outside, { recursive: true, force: true });
});

async function send(method: string, route: string, body: string, headers: Record<string, string> = { 'content-type': 'application/json' }): Promise<{ status: number; text: string; type: string | null }> {
  const res = await fetch(`${server.url}${route}`, { method, headers, body });
  return { status: res.status, text: await res.text(), type: res.headers.get('content-type') };
}

function expectOllamaError(answer: { status: number; text: string; type: string | null }): string {
  expect(answer.status, answer.text).toBeGreaterThanOrEqual(400);
  expect(answer.status, answer.text).toBeLessThan(500);
  expect(answer.type).toMatch(/^application\/json/);
  expect(answer.text).not.toMatch(/\n\s+at |\bat .*\.(ts|js):\d+|node_modules/);
  const body = JSON.parse(answer.text) as Record<string, unknown>;
  expect(Object.keys(body)).toEqual(['error']);
  expect(typeof body.error).toBe('string');
  return body.error as string;
}

describe('malformed requests to the Ollama routes', () => {
  it.each(cases().map((c) => [`${c.method} ${c.path}: ${c.name}`, c] as const))('%s', async (_name, c) => {
    const answer = await send(c.method, c.path, c.body, c.headers);
    expect(answer.status, answer.text).toBe(c.status);
    expectOllamaError(answer);
  });

  it('ignores fields it does not know, as Ollama does', async () => {
    expect((await send('POST', '/api/show', JSON.stringify({ model: 'qwen3-test', a_future_field: { x: 1 } }))).status).toBe(200);
    expect((await send('POST', '/api/chat', JSON.stringify({ model: 'qwen3-test', messages: [], a_future_field: true }))).status).toBe(200);
  });

  it('reads JSON whatever content type curl sends (`curl -d` is form-urlencoded), as Ollama does', async () => {
    const answer = await send('POST', '/api/show', JSON.stringify({ model: 'qwen3-test' }), { 'content-type': 'application/x-www-form-urlencoded' });
    expect(answer.status, answer.text).toBe(200);
  });

  it('never reads a name as a path: show, delete, copy and pull answer 4xx and quote no file', async () => {
    const names = async () => ((await (await fetch(`${server.url}/api/tags`)).json()) as { models: Array<{ name: string }> }).models.map((m) => m.name);
    const before = await names();
    expect(before).toContain('qwen3-test:latest');
    for (const name of trickNames()) {
      const attempts: Array<[string, string, unknown]> = [
        ['POST', '/api/show', { model: name }],
        ['DELETE', '/api/delete', { model: name }],
        ['POST', '/api/copy', { source: name, destination: 'stolen' }],
        ['POST', '/api/copy', { source: 'qwen3-test', destination: name }],
        ['POST', '/api/pull', { model: name }],
        ['POST', '/api/chat', { model: name, messages: [{ role: 'user', content: 'x' }] }],
        ['POST', '/api/generate', { model: name, prompt: 'x', suffix: 'y' }],
        ['POST', '/api/embed', { model: name, input: 'x' }],
      ];
      for (const [method, route, body] of attempts) {
        const answer = await send(method, route, JSON.stringify(body));
        const message = expectOllamaError(answer);
        expect(message, `${route} ${name}`).not.toContain(SECRET);
        expect(answer.status, `${route} ${name}: ${answer.text}`).not.toBe(200);
      }
    }
    // Nothing was registered, copied or removed.
    expect(await names()).toEqual(before);
  });

  it('unknown models are 404s in Ollama’s words', async () => {
    expect(expectOllamaError(await send('POST', '/api/show', JSON.stringify({ model: 'nope' })))).toBe('model "nope" not found, try pulling it first');
    expect((await send('DELETE', '/api/delete', JSON.stringify({ name: 'nope' }))).status).toBe(404);
    expect((await send('POST', '/api/copy', JSON.stringify({ source: 'nope', destination: 'x' }))).status).toBe(404);
  });

  it('keeps serving, and logged no server error', async () => {
    expect((await fetch(`${server.url}/api/tags`)).status).toBe(200);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    expect(server.logs.filter((line) => line.startsWith('error '))).toEqual([]);
  });
});
