import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { streamingLoader } from '../../src/backends/sherpa/streaming.js';
import { seededRandom } from '../fixtures/gguf/format.js';
import { tinyWhisperModel } from '../fixtures/onnx/whisper.js';
import { tinyZipformerModel } from '../fixtures/onnx/zipformer.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * GET /v1/audio/transcriptions/stream end to end: a WebSocket client sends
 * PCM16 to the real server, which runs the synthetic streaming Zipformer2 in
 * sherpa-onnx's supervised child process (random weights steered so sound
 * decodes to words and silence to blanks: endpoints fire at pauses).
 */

const RATE = 16_000;
let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({ server: { streamIdleMs: 1500 } });
  await server.engine.store.registerDirectory(await tinyZipformerModel(), { kind: 'asr-stream', id: 'zip-test' });
  await server.engine.store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-test' });
});

afterAll(async () => {
  await server?.stop();
});

/** PCM16 LE of noise ("speech") and silence, in seconds. */
function pcm(pattern: Array<['sound' | 'silence', number]>, seed = 1): Buffer {
  const random = seededRandom(seed);
  const samples: number[] = [];
  for (const [what, seconds] of pattern) {
    for (let i = 0; i < Math.round(seconds * RATE); i++) samples.push(what === 'sound' ? Math.round((random() * 2 - 1) * 0.2 * 32767) : 0);
  }
  const out = Buffer.alloc(samples.length * 2);
  samples.forEach((s, i) => out.writeInt16LE(s, i * 2));
  return out;
}

interface Session {
  socket: WebSocket;
  messages: Array<Record<string, unknown>>;
  closed: Promise<{ code: number; reason: string }>;
}

async function connect(query = '?model=zip-test'): Promise<Session> {
  const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/audio/transcriptions/stream${query}`);
  const messages: Array<Record<string, unknown>> = [];
  socket.on('message', (data) => messages.push(JSON.parse(data.toString()) as Record<string, unknown>));
  const closed = new Promise<{ code: number; reason: string }>((resolve) => socket.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('error', reject);
  });
  return { socket, messages, closed };
}

/** Sends audio in chunks of random sizes (even byte counts), as a microphone would. */
async function send(socket: WebSocket, audio: Buffer, seed = 7): Promise<void> {
  const random = seededRandom(seed);
  for (let at = 0; at < audio.length; ) {
    const size = 2 * (100 + Math.floor(random() * 3000));
    socket.send(audio.subarray(at, at + size));
    at += size;
    await new Promise((r) => setImmediate(r));
  }
}

describe('GET /v1/audio/transcriptions/stream', () => {
  it('streams partials, a final at each pause, and a last final after {"type":"end"}, then closes normally', async () => {
    const { socket, messages, closed } = await connect();
    await send(socket, pcm([['sound', 1.5], ['silence', 2.0], ['sound', 1.2]]));
    socket.send(JSON.stringify({ type: 'end' }));
    const { code } = await closed;
    expect(code).toBe(1000);
    for (const m of messages) expect(Object.keys(m).sort()).toEqual(['is_final', 'text']);
    const finals = messages.filter((m) => m.is_final);
    expect(messages.some((m) => !m.is_final && typeof m.text === 'string' && m.text !== '')).toBe(true);
    // One final at the pause, and the last one after the end message.
    expect(finals.length).toBeGreaterThanOrEqual(2);
    expect(messages.at(-1)!.is_final).toBe(true);
    // After a final the next utterance starts from empty text: the first partial after it does not repeat it.
    const firstFinal = messages.findIndex((m) => m.is_final && m.text !== '');
    const next = messages.slice(firstFinal + 1).find((m) => !m.is_final);
    if (next) expect(String(next.text).startsWith(String(messages[firstFinal]!.text))).toBe(false);
  });

  it('serves concurrent streams independently', async () => {
    const sessions = await Promise.all([1, 2, 3].map(() => connect()));
    await Promise.all(sessions.map((s, i) => send(s.socket, pcm([['sound', 1.0], ['silence', 0.3]], i + 1), i + 11)));
    for (const s of sessions) s.socket.send(JSON.stringify({ type: 'end' }));
    const codes = await Promise.all(sessions.map((s) => s.closed));
    expect(codes.map((c) => c.code)).toEqual([1000, 1000, 1000]);
    for (const s of sessions) expect(s.messages.at(-1)!.is_final).toBe(true);
  });

  it.each([
    ['an unknown model', '?model=no-such-model', undefined, 4404, 'model_not_found'],
    ['a model that is not a streaming one', '?model=whisper-test', undefined, 4400, 'wrong_model_kind'],
    ['an odd number of bytes', '?model=zip-test', Buffer.alloc(3), 4400, 'invalid_audio'],
    ['text that is not JSON', '?model=zip-test', 'hello', 4400, 'invalid_message'],
    ['an unknown control message', '?model=zip-test', JSON.stringify({ type: 'pause' }), 4400, 'invalid_message'],
  ])('%s: an error message and close %i', async (_name, query, payload, closeCode, code) => {
    const { socket, messages, closed } = await connect(query);
    if (payload !== undefined) socket.send(payload);
    const result = await closed;
    expect(result.code).toBe(closeCode);
    expect(messages.at(-1)).toMatchObject({ error: { message: expect.any(String), code } });
  });

  it('closes a silent client after the idle time (4408)', async () => {
    const { messages, closed } = await connect();
    const { code } = await closed;
    expect(code).toBe(4408);
    expect(messages.at(-1)).toMatchObject({ error: { code: 'idle_timeout' } });
  });

  it('when the recognizer process dies, its streams get an error and a 1011 close; the next stream works', async () => {
    const { socket, messages, closed } = await connect();
    await send(socket, pcm([['sound', 0.5]]));
    process.kill(streamingLoader.supervisor.pid!, 'SIGKILL');
    const { code } = await closed;
    expect(code).toBe(1011);
    expect(messages.at(-1)).toMatchObject({ error: { message: expect.stringMatching(/recognizer process/) } });
    const again = await connect();
    await send(again.socket, pcm([['sound', 1.0], ['silence', 0.3]]));
    again.socket.send(JSON.stringify({ type: 'end' }));
    expect((await again.closed).code).toBe(1000);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('GET /v1/audio/info lists the streaming model\'s languages from its layout\'s defaults', async () => {
    const body = (await (await fetch(`${server.url}/v1/audio/info?model=zip-test`)).json()) as Record<string, unknown>;
    expect(body).toEqual({ model: 'zip-test', kind: 'asr-stream', asr_supported_languages: ['en'] });
  });

  it('refuses the upgrade with 503 beyond the maximum of concurrent streams', async () => {
    const open = await Promise.all(Array.from({ length: streamingLoader.supervisor.maxStreams }, () => connect()));
    const refused = await new Promise<number>((resolve) => {
      const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/audio/transcriptions/stream?model=zip-test`);
      socket.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0));
      socket.on('open', () => resolve(101));
    });
    expect(refused).toBe(503);
    for (const s of open) s.socket.close();
    await Promise.all(open.map((s) => s.closed));
  });
});
