import net from 'node:net';
import { readFileSync } from 'node:fs';
import OpenAIClient from 'openai';
import { CHAT_MODEL_ID, tinyQwen3File } from './chat-model.js';
import { startTestServer, type TestServer } from './server.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { tinyWhisperModel } from '../fixtures/onnx/whisper.js';
type OpenAI = OpenAIClient;
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import type { RealtimeServerEvent } from 'openai/resources/realtime/realtime';
import WebSocket from 'ws';
import { decodeAudio } from '../../src/audio/decode.js';
import { floatToInt16, int16LeBytes } from '../../src/audio/encode/pcm16.js';

/**
 * Clients of GET /v1/realtime for the e2e tests: the official `openai` Node
 * SDK's OpenAIRealtimeWS, unmodified, and a raw `ws` socket for what no SDK
 * sends (query parameters, malformed frames). Both record every server event
 * in order and wait for events by type.
 *
 * The SDK always dials wss:// (it has no option for a plain-HTTP server);
 * the socket it opens is given a plain TCP connection through the `ws`
 * options it passes on, as a client of a local server would.
 */

/** speech.wav (espeak-ng): "hello world", a 1.5 s pause, "this is a test"; Silero VAD hears both as speech. */
export const SPEECH_WAV = new URL('../fixtures/audio/speech.wav', import.meta.url).pathname;

/** 24 kHz PCM16 (the session's default input format) of a WAV file. */
export async function pcm24k(file: string): Promise<Buffer> {
  const audio = await decodeAudio(readFileSync(file), { sampleRate: 24_000 });
  const bytes = int16LeBytes(floatToInt16(audio.samples));
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** `seconds` of 24 kHz PCM16 silence. */
export const silence = (seconds: number) => Buffer.alloc(Math.round(seconds * 24_000) * 2);

/** Milliseconds that `bytes` of 24 kHz PCM16 play for. */
export const pcm24kMs = (bytes: number) => (bytes / 2 / 24_000) * 1000;

export type ServerEvent = RealtimeServerEvent;
export type EventOf<T extends ServerEvent['type']> = Extract<ServerEvent, { type: T }>;

/** Every server event of a session, in order, and a way to wait for one. */
export class EventLog<E extends { type: string } = ServerEvent> {
  readonly events: E[] = [];
  private waiters: Array<{ type: string; from: number; resolve: (e: E) => void }> = [];

  push(event: E): void {
    this.events.push(event);
    for (const w of [...this.waiters]) {
      if (event.type === w.type && this.events.length - 1 >= w.from) {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve(event);
      }
    }
  }

  /** The first event of `type` at index `after` or later, now or when it comes (60 s at most). */
  next<T extends string>(type: T, after = 0, timeoutMs = 60_000): Promise<E & { type: T }> {
    const found = this.events.slice(after).find((e) => e.type === type);
    if (found) return Promise.resolve(found as E & { type: T });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${type} within ${timeoutMs / 1000} s; got ${this.types().join(', ')}`)), timeoutMs);
      this.waiters.push({ type, from: after, resolve: (e) => (clearTimeout(timer), resolve(e as E & { type: T })) });
    });
  }

  types(): string[] {
    return this.events.map((e) => e.type);
  }

  errors(): E[] {
    return this.events.filter((e) => e.type === 'error');
  }
}

export interface SdkSession {
  rt: OpenAIRealtimeWS;
  log: EventLog;
  events: ServerEvent[];
  next: EventLog['next'];
}

/** A session through the SDK, once session.created has come. */
export async function connectSdk(client: OpenAI, model: string): Promise<SdkSession> {
  const rt = new OpenAIRealtimeWS({ model, options: { createConnection: (options: net.NetConnectOpts) => net.connect(options) } as never }, client);
  const log = new EventLog();
  rt.on('event', (event) => log.push(event));
  rt.on('error', () => {}); // error events are asserted from the log
  await log.next('session.created');
  return { rt, log, events: log.events, next: log.next.bind(log) };
}

/** Streams audio as a microphone would send it: 20 ms chunks of 24 kHz PCM16. */
export function streamAudio(session: { send(event: { type: 'input_audio_buffer.append'; audio: string }): void }, audio: Buffer): void {
  for (let at = 0; at < audio.length; at += 960) session.send({ type: 'input_audio_buffer.append', audio: audio.subarray(at, at + 960).toString('base64') });
}

export type WireEvent = { type: string; [key: string]: unknown };

export interface RawSession {
  socket: WebSocket;
  log: EventLog<WireEvent>;
  send(event: unknown): void;
  closed: Promise<{ code: number; reason: string }>;
}

/** A raw WebSocket session (`query` after /v1/realtime), once session.created (or whatever came first) has come. */
export async function connectRaw(baseUrl: string, query: string, options: { waitFor?: string } = {}): Promise<RawSession> {
  const socket = new WebSocket(`${baseUrl.replace(/^http/, 'ws')}/v1/realtime${query}`);
  const log = new EventLog<WireEvent>();
  socket.on('message', (data) => log.push(JSON.parse(data.toString()) as WireEvent));
  const closed = new Promise<{ code: number; reason: string }>((resolve) => socket.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('error', reject);
  });
  socket.on('error', () => {}); // a close is asserted from `closed`
  await log.next(options.waitFor ?? 'session.created');
  // Strings and buffers go as they are (text and binary frames), anything else as one JSON text frame.
  const send = (event: unknown) => socket.send(typeof event === 'string' || Buffer.isBuffer(event) ? event : JSON.stringify(event));
  return { socket, log, send, closed };
}

/** The loaded models that still have leases on them (a finished session must leave none). */
export function busyModels(engine: { manager: { loaded(): Array<{ id: string; activeRequests: number }> } }): string[] {
  return engine.manager
    .loaded()
    .filter((m) => m.activeRequests > 0)
    .map((m) => `${m.id} (${m.activeRequests})`);
}

/** Sends audio in 20 ms chunks at the pace it plays, as a microphone does. */
export async function streamAudioLive(session: Parameters<typeof streamAudio>[0], audio: Buffer): Promise<void> {
  const started = performance.now();
  for (let at = 0, n = 0; at < audio.length; at += 960, n++) {
    const due = started + n * 20;
    if (due > performance.now()) await new Promise((r) => setTimeout(r, due - performance.now()));
    session.send({ type: 'input_audio_buffer.append', audio: audio.subarray(at, at + 960).toString('base64') });
  }
}

/**
 * A test server with what a voice session uses: the tiny Qwen3 chat model
 * (CHAT_MODEL_ID), a tiny Whisper ('whisper-test') and the synthetic Piper
 * voice ('piper-test', speaker 'lessac'); the openai client pointed at it.
 */
export async function startVoiceServer(options: { metrics?: boolean } = {}): Promise<{ server: TestServer; client: OpenAIClient }> {
  const server = await startTestServer({ engine: { threads: 1, parallel: 2 }, server: { metrics: options.metrics ?? false } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  await server.engine.store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-test' });
  await server.engine.store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'piper-test' });
  return { server, client: new OpenAIClient({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 }) };
}
