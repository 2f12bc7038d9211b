import net from 'node:net';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import type { RealtimeServerEvent } from 'openai/resources/realtime/realtime';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudio } from '../../src/audio/decode.js';
import { floatToInt16, int16LeBytes } from '../../src/audio/encode/pcm16.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { tinyWhisperModel } from '../fixtures/onnx/whisper.js';

/**
 * The Realtime API through the official `openai` Node SDK's WebSocket client
 * (OpenAIRealtimeWS), unmodified, on the synthetic fixtures: a tiny Qwen3
 * chat model, a tiny Whisper and a synthetic Piper voice. Speech is
 * test/fixtures/audio/speech.wav (espeak-ng), which Silero VAD hears as
 * speech; the models are random, so answers are checked for their shape
 * and flow, not their words.
 *
 * The SDK always dials wss:// (it has no option for a plain-HTTP server);
 * the socket it opens is given a plain TCP connection through the `ws`
 * options it passes on, as a client of a local server would.
 */

let server: TestServer;
let client: OpenAI;
let speech: Buffer;

/** 24 kHz PCM16 (the session's default input format) of a WAV file, and of silence. */
async function pcm24k(file: string): Promise<Buffer> {
  const audio = await decodeAudio(readFileSync(file), { sampleRate: 24_000 });
  const bytes = int16LeBytes(floatToInt16(audio.samples));
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
const silence = (seconds: number) => Buffer.alloc(Math.round(seconds * 24_000) * 2);

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1, parallel: 2 } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  await server.engine.store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-test' });
  await server.engine.store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'piper-test' });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  speech = await pcm24k(new URL('../fixtures/audio/speech.wav', import.meta.url).pathname);
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

/** A session through the SDK, with every server event it received in order. */
async function connect(model = CHAT_MODEL_ID): Promise<{ rt: OpenAIRealtimeWS; events: RealtimeServerEvent[]; next: (type: string, after?: number) => Promise<RealtimeServerEvent> }> {
  const rt = new OpenAIRealtimeWS({ model, options: { createConnection: (options: net.NetConnectOpts) => net.connect(options) } as never }, client);
  const events: RealtimeServerEvent[] = [];
  const waiters: Array<{ type: string; from: number; resolve: (e: RealtimeServerEvent) => void }> = [];
  rt.on('event', (event) => {
    events.push(event);
    for (const w of [...waiters]) {
      if (event.type === w.type && events.length - 1 >= w.from) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(event);
      }
    }
  });
  rt.on('error', () => {}); // error events are asserted from `events`
  const next = (type: string, after = 0) => {
    const found = events.slice(after).find((e) => e.type === type);
    if (found) return Promise.resolve(found);
    return new Promise<RealtimeServerEvent>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no ${type} within 60 s; got ${events.map((e) => e.type).join(', ')}`)), 60_000);
      waiters.push({ type, from: after, resolve: (e) => (clearTimeout(timer), resolve(e)) });
    });
  };
  await next('session.created');
  return { rt, events, next };
}

/** Streams audio as a microphone would send it: 20 ms chunks. */
function stream(rt: OpenAIRealtimeWS, audio: Buffer): void {
  for (let at = 0; at < audio.length; at += 960) rt.send({ type: 'input_audio_buffer.append', audio: audio.subarray(at, at + 960).toString('base64') });
}

const types = (events: RealtimeServerEvent[]) => events.map((e) => e.type);

describe('Realtime API through the openai SDK', () => {
  it('hears a spoken turn, transcribes it and answers in text and audio', async () => {
    const { rt, events, next } = await connect();
    rt.send({ type: 'session.update', session: { type: 'realtime', max_output_tokens: 24, audio: { output: { voice: 'marin' } } } as never });
    await next('session.updated');
    stream(rt, Buffer.concat([silence(0.5), speech, silence(1.5)]));
    const started = await next('input_audio_buffer.speech_started');
    const stopped = await next('input_audio_buffer.speech_stopped');
    expect((stopped as { audio_end_ms: number }).audio_end_ms).toBeGreaterThan((started as { audio_start_ms: number }).audio_start_ms);
    const transcript = await next('conversation.item.input_audio_transcription.completed');
    expect(typeof (transcript as { transcript: string }).transcript).toBe('string');
    const done = (await next('response.done')) as Extract<RealtimeServerEvent, { type: 'response.done' }>;
    // A random model rarely ends on its own before max_output_tokens: either end is a whole response.
    expect(done.response.status, JSON.stringify(events.filter((e) => e.type === "error"))).toMatch(/^(completed|incomplete)$/);
    expect(done.response.usage?.output_tokens).toBeGreaterThan(0);
    const seen = types(events);
    const order = ['input_audio_buffer.speech_started', 'input_audio_buffer.speech_stopped', 'input_audio_buffer.committed', 'conversation.item.input_audio_transcription.completed', 'response.created', 'response.output_item.added', 'response.output_audio_transcript.delta', 'response.output_audio.delta', 'response.output_audio.done', 'response.output_item.done', 'response.done'];
    const at = order.map((t) => seen.indexOf(t as never));
    expect(at.every((i) => i >= 0), `events: ${seen.join(', ')}`).toBe(true);
    expect([...at].sort((a, b) => a - b)).toEqual(at);
    const audio = events.filter((e) => e.type === 'response.output_audio.delta').reduce((n, e) => n + Buffer.from((e as { delta: string }).delta, 'base64').length, 0);
    expect(audio).toBeGreaterThan(2400); // more than 50 ms of 24 kHz PCM16
    expect(events.filter((e) => e.type === 'error')).toEqual([]);
    rt.close();
  }, 120_000);

  it('round-trips a function call', async () => {
    const { rt, events, next } = await connect();
    rt.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        output_modalities: ['text'],
        audio: { input: { turn_detection: null } },
        tools: [{ type: 'function', name: 'get_time', description: 'The current time', parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] } }],
        tool_choice: 'required',
        max_output_tokens: 48,
      },
    });
    await next('session.updated');
    rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'What time is it in Paris?' }] } });
    rt.send({ type: 'response.create' });
    const call = (await next("response.function_call_arguments.done")) as Extract<RealtimeServerEvent, { type: 'response.function_call_arguments.done' }>;
    expect(call.name).toBe('get_time');
    expect(JSON.parse(call.arguments)).toHaveProperty('zone');
    const first = await next('response.done');
    rt.send({ type: 'session.update', session: { type: 'realtime', tool_choice: 'none' } });
    rt.send({ type: 'conversation.item.create', item: { type: 'function_call_output', call_id: call.call_id, output: '{"time":"12:00"}' } });
    rt.send({ type: 'response.create' });
    const second = (await next('response.done', events.indexOf(first) + 1)) as Extract<RealtimeServerEvent, { type: 'response.done' }>;
    expect(second.response.status, JSON.stringify(events.filter((e) => e.type === "error"))).toMatch(/completed|incomplete/);
    expect(events.filter((e) => e.type === 'error')).toEqual([]);
    rt.close();
  }, 120_000);
});
