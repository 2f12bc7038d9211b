import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import net from 'node:net';
import WebSocket from 'ws';
import { MAX_FRAME_BYTES } from '../../src/http/routes/transcription-stream.js';
import { streamingLoader } from '../../src/families/sherpa-streaming/streaming.js';
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

/**
 * The protocol's hostile corner: whatever one client sends, it ends at most
 * its own stream; the server keeps serving and every slot comes back.
 */
describe('GET /v1/audio/transcriptions/stream: hostile clients', () => {
  const wsUrl = () => `${server.url.replace('http', 'ws')}/v1/audio/transcriptions/stream?model=zip-test`;

  /** Every slot is free again: the maximum of streams can be opened at once (and closed). */
  async function expectAllSlotsFree(): Promise<void> {
    const all = await Promise.all(Array.from({ length: streamingLoader.supervisor.maxStreams }, () => connect()));
    for (const s of all) s.socket.close();
    await Promise.all(all.map((s) => s.closed));
  }

  it('audio after {"type":"end"} is a 4400 for that stream only (it used to kill the server)', async () => {
    const { socket, messages, closed } = await connect();
    await send(socket, pcm([['sound', 0.3]]));
    socket.send(JSON.stringify({ type: 'end' }));
    socket.send(pcm([['sound', 0.1]]));
    const { code } = await closed;
    // The last final may win the race with the late audio; either way the server answered and lives.
    if (code === 4400) expect(messages.at(-1)).toMatchObject({ error: { code: 'audio_after_end' } });
    else expect(code).toBe(1000);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('a second {"type":"end"} changes nothing', async () => {
    const { socket, messages, closed } = await connect();
    await send(socket, pcm([['sound', 0.3]]));
    socket.send(JSON.stringify({ type: 'end' }));
    socket.send(JSON.stringify({ type: 'end' }));
    expect((await closed).code).toBe(1000);
    expect(messages.at(-1)!.is_final).toBe(true);
  });

  it(`a frame over ${MAX_FRAME_BYTES} bytes is closed with 1009 (too big), not 1011`, async () => {
    const { socket, closed } = await connect();
    socket.send(Buffer.alloc(MAX_FRAME_BYTES + 2));
    expect((await closed).code).toBe(1009);
    // A frame at the limit is taken (decoding 10 s of audio would take long here: hang up once it is in).
    const ok = await connect();
    ok.socket.send(Buffer.alloc(MAX_FRAME_BYTES));
    await new Promise((r) => setTimeout(r, 300));
    expect(ok.socket.readyState).toBe(WebSocket.OPEN);
    ok.socket.terminate();
    await ok.closed;
  });

  it('text frames: invalid UTF-8 is 1007, JSON of the wrong shape 4400', async () => {
    const broken = await connect();
    // A text frame whose bytes are not UTF-8: the server's ws validates it and closes with 1007 itself.
    broken.socket.send(Buffer.from([0xc3, 0x28]), { binary: false });
    expect((await broken.closed).code).toBe(1007);
    for (const garbage of ['null', '[]', '{"type":5}', '"end"', '{}']) {
      const { socket, messages, closed } = await connect();
      socket.send(garbage);
      expect((await closed).code).toBe(4400);
      expect(messages.at(-1)).toMatchObject({ error: { code: 'invalid_message' } });
    }
  });

  it('a bad frame on a socket that is being refused (unknown model) ends that socket only', async () => {
    for (const frame of [Buffer.alloc(MAX_FRAME_BYTES + 2), Buffer.from([0xc3, 0x28])]) {
      const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/audio/transcriptions/stream?model=no-such-model`);
      const closed = new Promise<number>((resolve) => socket.on('close', (code) => resolve(code)));
      socket.on('error', () => undefined);
      socket.on('open', () => socket.send(frame, { binary: frame.length > 2 }));
      expect([1007, 1009, 4404]).toContain(await closed);
    }
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('abrupt disconnects mid-stream release their slots', async () => {
    for (let round = 0; round < 3; round++) {
      const sessions = await Promise.all(Array.from({ length: 6 }, () => connect()));
      await Promise.all(sessions.map((s, i) => send(s.socket, pcm([['sound', 0.2]], i + 1))));
      for (const s of sessions) s.socket.terminate();
      await Promise.all(sessions.map((s) => s.closed));
    }
    await expectAllSlotsFree();
  });

  it('a client that resets the connection before the upgrade completes leaves no slot behind', async () => {
    const { port } = new URL(server.url);
    for (let i = 0; i < 5; i++) {
      await new Promise<void>((resolve) => {
        const socket = net.connect(Number(port), '127.0.0.1', () => {
          socket.write(
            [
              'GET /v1/audio/transcriptions/stream?model=zip-test HTTP/1.1',
              `Host: 127.0.0.1:${port}`,
              'Upgrade: websocket',
              'Connection: Upgrade',
              'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
              'Sec-WebSocket-Version: 13',
              '',
              '',
            ].join('\r\n'),
          );
          socket.resetAndDestroy();
          resolve();
        });
        socket.on('error', () => resolve());
      });
    }
    await new Promise((r) => setTimeout(r, 200));
    await expectAllSlotsFree();
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
  });

  it('many sockets at once: up to the maximum stream, the rest are refused with 503, and all slots come back', async () => {
    const attempts = streamingLoader.supervisor.maxStreams + 8;
    const outcomes = await Promise.all(
      Array.from(
        { length: attempts },
        () =>
          new Promise<{ status: number; socket?: WebSocket }>((resolve) => {
            const socket = new WebSocket(wsUrl());
            socket.on('unexpected-response', (_req, res) => resolve({ status: res.statusCode ?? 0 }));
            socket.on('open', () => resolve({ status: 101, socket }));
            socket.on('error', () => resolve({ status: 0 }));
          }),
      ),
    );
    expect(outcomes.filter((o) => o.status === 101)).toHaveLength(streamingLoader.supervisor.maxStreams);
    expect(outcomes.filter((o) => o.status === 503)).toHaveLength(8);
    for (const o of outcomes) o.socket?.terminate();
    await new Promise((r) => setTimeout(r, 200));
    await expectAllSlotsFree();
  });

  it('logged no server error through all of it (except the killed recognizer above)', () => {
    expect(server.logs.filter((line) => line.startsWith('error ') && !/recognizer process/.test(line))).toEqual([]);
  });
});

