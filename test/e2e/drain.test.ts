import type { ChildProcess } from 'node:child_process';
import net from 'node:net';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { RunningModelList } from '../../src/api/ps.js';
import { tinyZipformerModel } from '../fixtures/onnx/zipformer.js';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import { runCli } from '../helpers/cli.js';
import { spawnServe, type ServeProcess } from '../helpers/serve-process.js';
import { startTestServer, tempHome, type TestServer } from '../helpers/server.js';

/**
 * `lserve serve` drains at SIGTERM, as a replica behind a balancer must:
 * GET /ready turns 503 at once, new requests are served for --drain-grace,
 * then the listener closes and a request that still arrives on an open
 * connection is a 503 `shutting_down` (Retry-After, Connection: close); a
 * stream in flight runs to its end and the process then exits 0, well before
 * --drain-timeout; one that outlives --drain-timeout is cut, and the
 * process exits 0 just after it. A WebSocket session (live transcription)
 * goes on through a drain until it ends, or gets close 1001 at the timeout.
 */

let server: ChildProcess | undefined;
afterEach(() => {
  server?.kill('SIGKILL');
  server = undefined;
});

async function serveChat(args: string[]): Promise<ServeProcess> {
  const home = await tempHome();
  const env = { ...process.env, LSERVE_HOME: home };
  expect((await runCli(['pull', tinyQwen3File(), '--kind', 'chat', '--id', CHAT_MODEL_ID], { env })).code).toBe(0);
  const serve = await spawnServe(home, ['--threads', '1', ...args]);
  server = serve.child;
  return serve;
}

/** A streamed chat of `maxTokens` tokens, its first chunk read; `rest()` reads it to the end. */
async function startStream(base: string, maxTokens: number): Promise<{ rest: () => Promise<string> }> {
  const response = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: CHAT_MODEL_ID,
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: maxTokens,
      logit_bias: NEVER_END,
      messages: [{ role: 'user', content: 'go on' }],
    }),
  });
  expect(response.status).toBe(200);
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = decoder.decode((await reader.read()).value, { stream: true });
  return {
    async rest() {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return text;
        text += decoder.decode(value, { stream: true });
      }
    },
  };
}

/** A raw connection that has sent only the start of a request, as a slow client would; `finish()` sends the rest and reads the answer. */
async function slowClient(base: string): Promise<{ finish: () => Promise<string> }> {
  const { hostname, port } = new URL(base);
  const socket = net.connect(Number(port), hostname);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: ${hostname}:${port}\r\n`);
  let answer = '';
  socket.on('data', (chunk: Buffer) => (answer += chunk.toString()));
  const ended = new Promise<string>((resolve) => socket.once('close', () => resolve(answer)));
  return {
    finish() {
      const body = JSON.stringify({ model: CHAT_MODEL_ID, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] });
      socket.write(`Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      return ended;
    },
  };
}

/** Resolves once a new connection is refused (the listener closed), with the time that took. */
async function untilRefused(base: string, withinMs: number): Promise<void> {
  const deadline = performance.now() + withinMs;
  while (performance.now() < deadline) {
    try {
      await fetch(`${base}/health`);
    } catch {
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`new connections still accepted after ${withinMs} ms`);
}

it.each([
  ['--drain-timeout', 'soon', /--drain-timeout: invalid duration: 'soon'/],
  ['--drain-grace', '-5s', /--drain-grace must be 0 or a positive duration/],
])('%s %s is a usage error before the server starts', async (flag, value, message) => {
  const { code, stderr } = await runCli(['serve', '--port', '0', flag, value], { env: { LSERVE_HOME: await tempHome() } });
  expect(code).toBe(2);
  expect(stderr).toMatch(message);
});

/** Some seconds of generation for the tiny model on one thread: it cannot be over before the runner is stopped. */
const TOKENS = 1000;

it.runIf(process.platform === 'linux')('SIGTERM: /ready 503 at once, new work served in the grace then refused, the stream in flight completes, exit 0', async () => {
  const { child, url: base, exited, log } = await serveChat(['--drain-grace', '1500ms', '--drain-timeout', '60s']);
  const stream = await startStream(base, TOKENS);
  // The runner is held still (SIGSTOP) so that the stream is surely still in flight through the whole grace.
  const { models } = (await (await fetch(`${base}/v1/ps`)).json()) as RunningModelList;
  const runner = models[0]!.pid!;
  process.kill(runner, 'SIGSTOP');
  let streamEnded = false;
  const rest = stream.rest().finally(() => (streamEnded = true));
  const slow = await slowClient(base);

  const term = performance.now();
  child.kill('SIGTERM');
  // The log line comes with the signal's handling: /ready answers 503 from then on.
  await expect.poll(() => log(), { timeout: 5000, interval: 20 }).toContain('SIGTERM: shutting down gracefully');
  const ready = await fetch(`${base}/ready`);
  expect(ready.status).toBe(503);
  expect(await ready.json()).toEqual({ status: 'unready', draining: true, checks: {} });
  expect((await fetch(`${base}/health`)).status).toBe(200);
  const served = await fetch(`${base}/v1/models`);
  expect(served.status).toBe(200);
  expect(served.headers.get('connection')).toBe('close');

  await untilRefused(base, 10_000);
  expect(performance.now() - term).toBeGreaterThanOrEqual(1400);
  const refused = await slow.finish();
  const [head, body] = refused.split('\r\n\r\n');
  expect(head).toMatch(/^HTTP\/1\.1 503 /);
  expect(head).toMatch(/\r\nRetry-After: 1\r\n/i);
  expect(head).toMatch(/\r\nConnection: close\r\n/i);
  expect(JSON.parse(body!)).toMatchObject({ error: { type: 'overloaded_error', code: 'shutting_down', message: expect.any(String) } });

  expect(streamEnded).toBe(false);
  process.kill(runner, 'SIGCONT');
  const text = await rest;
  const done = performance.now();
  const events = text.split('\n\n').filter((e) => e.startsWith('data: '));
  expect(events.at(-1)).toBe('data: [DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)) as { choices: Array<{ finish_reason: string | null }>; usage?: { completion_tokens: number } | null });
  expect(chunks.some((c) => c.choices[0]?.finish_reason === 'length')).toBe(true);
  expect(chunks.at(-1)!.usage?.completion_tokens).toBe(TOKENS);

  expect(await exited).toBe(0);
  // It left once the stream ended, not at --drain-timeout (60 s): models unloading takes the rest.
  expect(performance.now() - done).toBeLessThan(15_000);
}, 60_000);

it.runIf(process.platform === 'linux')('SIGTERM: a stream that outlives --drain-timeout is cut, and the process exits 0', async () => {
  const { child, url: base, exited, log } = await serveChat(['--drain-grace', '0', '--drain-timeout', '2s']);
  const stream = await startStream(base, 100_000);
  const term = performance.now();
  child.kill('SIGTERM');
  // Cut, so the client cannot take it for a whole answer: the read fails, with no finish_reason nor [DONE] before.
  await expect(stream.rest()).rejects.toThrow();
  const cut = performance.now() - term;
  expect(cut).toBeGreaterThanOrEqual(1900);
  expect(cut).toBeLessThan(8000);
  expect(await exited).toBe(0);
  expect(performance.now() - term).toBeLessThan(15_000);
  expect(log()).toMatch(/drain timeout: cutting 1 request/);
}, 60_000);

describe('a WebSocket session in a drain', () => {
  let model: string;
  beforeAll(async () => {
    model = await tinyZipformerModel();
  });

  /** A server with the streaming transcription model and one live session open on it. */
  async function serveSession(): Promise<{ server: TestServer; socket: WebSocket; messages: Array<{ is_final?: boolean }>; closed: Promise<number> }> {
    const server = await startTestServer();
    await server.engine.store.registerDirectory(model, { kind: 'asr-stream', id: 'zip-test' });
    const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/audio/transcriptions/stream?model=zip-test`);
    const messages: Array<{ is_final?: boolean }> = [];
    socket.on('message', (data) => messages.push(JSON.parse(data.toString()) as { is_final?: boolean }));
    const closed = new Promise<number>((resolve) => socket.on('close', (code) => resolve(code)));
    await new Promise<void>((resolve, reject) => socket.once('open', () => resolve()).once('error', reject));
    return { server, socket, messages, closed };
  }

  it('goes on after the listener closed, and the drain ends when the session does', async () => {
    const { server, socket, messages, closed } = await serveSession();
    let drained = false;
    const drain = server.drain({ graceMs: 0, timeoutMs: 60_000 }).then(() => (drained = true));
    await untilRefused(server.url, 5000);
    // A second of noise at 16 kHz, PCM16, then the end of the stream: the session still answers.
    const audio = Buffer.alloc(32_000);
    for (let i = 0; i < audio.length; i += 2) audio.writeInt16LE(Math.round(Math.sin(i) * 6000), i);
    socket.send(audio);
    expect(drained).toBe(false);
    socket.send(JSON.stringify({ type: 'end' }));
    expect(await closed).toBe(1000);
    expect(messages.at(-1)?.is_final).toBe(true);
    const start = performance.now();
    await drain;
    expect(performance.now() - start).toBeLessThan(15_000);
  }, 60_000);

  it('is closed with 1001 (going away) at the drain timeout', async () => {
    const { server, closed } = await serveSession();
    const start = performance.now();
    const drain = server.drain({ graceMs: 0, timeoutMs: 1000 });
    expect(await closed).toBe(1001);
    expect(performance.now() - start).toBeGreaterThanOrEqual(900);
    await drain;
  }, 60_000);
});
