import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { UI_CSP, uiDirectory } from '../../src/http/routes/ui.js';
import { BIN } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * How the server serves the playground (no browser needed; the browser test
 * is playground.test.ts): the page and its assets from dist/ui with their
 * types and a strict CSP, nothing from elsewhere, nothing outside the built
 * files, `ui: false` (`--no-ui`), no key needed for the page while /v1 keeps
 * its key, and the WebSocket key a browser can send as a subprotocol.
 */

let server: TestServer;
let noUi: TestServer;
let keyed: TestServer;

beforeAll(async () => {
  server = await startTestServer();
  noUi = await startTestServer({ server: { ui: false } });
  keyed = await startTestServer({ server: { apiKey: 'sekrit/+=key' } });
});

afterAll(async () => {
  await Promise.all([server?.stop(), noUi?.stop(), keyed?.stop()]);
});

/** What a browser's navigation sends as Accept: the page is for requests that ask for HTML (GET / answers others as Ollama does). */
const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

/** node:http, so the path is sent exactly as written; Accept as a browser's unless `accept` says otherwise. */
function get(target: TestServer, route: string, method = 'GET', accept = BROWSER_ACCEPT): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: target.port, method, path: route, headers: { accept } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('GET / and /ui/*', () => {
  it('serves the page with a strict Content-Security-Policy and no inline script or style', async () => {
    const page = await get(server, '/');
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(page.headers['content-security-policy']).toBe(UI_CSP);
    expect(UI_CSP).toContain("default-src 'self'");
    expect(UI_CSP).toContain("script-src 'self'");
    expect(UI_CSP).not.toContain('unsafe-inline');
    expect(UI_CSP).not.toContain('unsafe-eval');
    expect(page.headers['x-content-type-options']).toBe('nosniff');
    expect(page.headers['referrer-policy']).toBe('no-referrer');
    expect(page.body).toContain('<script type="module" src="/ui/main.js"></script>');
    expect(page.body).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(page.body).not.toMatch(/\sstyle=|<style|\son[a-z]+=/i);
    expect((await get(server, '/', 'HEAD')).status).toBe(200);
  });

  it('serves every asset the page and its modules name, with its type; nothing comes from elsewhere; the whole is small', async () => {
    const dir = uiDirectory()!;
    const page = (await get(server, '/')).body;
    const names = new Set([...page.matchAll(/(?:src|href)="\/ui\/([^"]+)"/g)].map((m) => m[1]!));
    const queue = [...names];
    for (const name of queue) {
      if (!name.endsWith('.js')) continue;
      const text = readFileSync(`${dir}/${name}`, 'utf8');
      for (const m of text.matchAll(/(?:from|import)\s*\(?\s*'\.\/([\w.-]+)'/g)) if (!names.has(m[1]!)) names.add(m[1]!), queue.push(m[1]!);
      for (const m of text.matchAll(/'\/ui\/([\w.-]+)'/g)) if (!names.has(m[1]!)) names.add(m[1]!), queue.push(m[1]!);
    }
    expect([...names].sort()).toEqual(expect.arrayContaining(['api.js', 'icon.svg', 'main.js', 'pcm-worklet.js', 'style.css']));
    const types: Record<string, string> = { js: 'text/javascript; charset=utf-8', css: 'text/css; charset=utf-8', svg: 'image/svg+xml' };
    let total = Buffer.byteLength(page);
    for (const name of names) {
      const asset = await get(server, `/ui/${name}`);
      expect(asset.status, name).toBe(200);
      expect(asset.headers['content-type'], name).toBe(types[name.split('.').pop()!]);
      expect(asset.headers['content-security-policy']).toBe(UI_CSP);
      expect(asset.body, name).not.toMatch(/https?:\/\/(?!www\.w3\.org\/2000\/svg)/);
      total += Buffer.byteLength(asset.body);
    }
    expect(total).toBeLessThan(200_000);
  });

  it('serves only the built files: traversal, encoded separators and unknown names are 404', async () => {
    for (const bad of ['/ui/../package.json', '/ui/..%2Fpackage.json', '/ui/%2e%2e%2fpackage.json', '/ui/nope.js', '/ui/', '/ui/tsconfig.json', '/ui/main.ts', '/index.html']) {
      const answer = await get(server, bad);
      expect(answer.status, bad).toBe(404);
      expect(answer.body).not.toContain('"name": "lserve"');
    }
  });

  it('ui: false (`lserve serve --no-ui`) serves no page', async () => {
    // `/` answers as Ollama's root does, to browsers too.
    const root = await get(noUi, '/');
    expect(root.status).toBe(200);
    expect(root.headers['content-type']).toBe('text/plain; charset=utf-8');
    expect(root.body).toBe('Ollama is running');
    expect((await get(noUi, '/ui/main.js')).status).toBe(404);
    expect((await get(noUi, '/v1/models')).status).toBe(200);
  });

  it('with an API key, the page loads without it (it asks for the key) while /v1 still needs it', async () => {
    expect((await get(keyed, '/')).status).toBe(200);
    expect((await get(keyed, '/ui/main.js')).status).toBe(200);
    expect((await get(keyed, '/v1/models')).status).toBe(401);
  });
});

describe('the API key as a WebSocket subprotocol', () => {
  const encode = (key: string) => Buffer.from(key).toString('base64url');
  const upgrade = (protocols: string[] | undefined) =>
    new Promise<{ status: number; protocol?: string }>((resolve) => {
      const socket = new WebSocket(`ws://127.0.0.1:${keyed.port}/v1/audio/transcriptions/stream?model=none`, protocols);
      socket.on('unexpected-response', (_req, res) => resolve({ status: res.statusCode ?? 0 }));
      socket.on('open', () => {
        resolve({ status: 101, protocol: socket.protocol });
        socket.close();
      });
      socket.on('error', () => resolve({ status: 0 }));
    });

  it('opens with the key offered after another protocol, and never echoes the key', async () => {
    expect(await upgrade(['lserve', `lserve.api-key.${encode('sekrit/+=key')}`])).toEqual({ status: 101, protocol: 'lserve' });
  });

  it('refuses a wrong key, no key, and a key offered alone (the answer would have to echo it)', async () => {
    expect((await upgrade(['lserve', `lserve.api-key.${encode('wrong')}`])).status).toBe(401);
    expect((await upgrade(undefined)).status).toBe(401);
    expect((await upgrade([`lserve.api-key.${encode('sekrit/+=key')}`])).status).not.toBe(101);
  });
});

describe('lserve serve', () => {
  /** Starts `lserve serve` with these flags; the page's status at / and what serve logged. */
  async function serve(flags: string[]): Promise<{ status: number; log: string }> {
    const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-ui-cli-'));
    const child = spawn(process.execPath, [BIN, '--home', home, 'serve', '--port', '0', ...flags], { stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      let log = '';
      const url = await new Promise<string>((resolve, reject) => {
        child.stderr.on('data', (d: Buffer) => {
          log += d;
          const match = /listening on (http:\/\/[^\s/]+)/.exec(log);
          if (match) resolve(match[1]!);
        });
        child.on('exit', (code) => reject(new Error(`serve exited early (${code}): ${log}`)));
      });
      const status = (await fetch(`${url}/ui/main.js`)).status;
      // The request's own log line comes after anything serve printed at start.
      await new Promise((r) => setTimeout(r, 200));
      return { status, log };
    } finally {
      const exit = new Promise((resolve) => child.on('exit', resolve));
      child.kill('SIGTERM');
      await exit;
      await rm(home, { recursive: true, force: true });
    }
  }

  it('serves the playground and says where; --no-ui turns it off', async () => {
    const on = await serve([]);
    expect(on.status).toBe(200);
    expect(on.log).toMatch(/playground: http:\/\/127\.0\.0\.1:\d+\//);
    const off = await serve(['--no-ui']);
    expect(off.status).toBe(404);
    expect(off.log).not.toContain('playground:');
  });
});
