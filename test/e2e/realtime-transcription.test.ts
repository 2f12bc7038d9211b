import { readFile } from 'node:fs/promises';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MANIFEST, type Manifest } from '../../src/core/store.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { busyModels, connectRaw, connectSdk, pcm24k, silence, SPEECH_WAV, streamAudio, streamAudioLive, type WireEvent } from '../helpers/realtime.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tinyWhisperModel } from '../fixtures/onnx/whisper.js';
import { tinyZipformerModel } from '../fixtures/onnx/zipformer.js';

/**
 * Transcription sessions of the Realtime API: the user's turns are found by
 * server VAD, committed and transcribed, and nothing answers them. GA
 * clients (the openai SDK, which needs a model to connect) make a session
 * one with session.update `type: 'transcription'`; the beta's way is
 * `?intent=transcription`. With a streaming recogniser (a synthetic
 * Zipformer, kind asr-stream) the transcript's deltas come while the user
 * speaks. speech.wav holds two phrases with a pause between: two turns.
 */

let server: TestServer;
let client: OpenAI;
let speech: Buffer;

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1 } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  await server.engine.store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-test' });
  await server.engine.store.registerDirectory(await tinyZipformerModel(), { kind: 'asr-stream', id: 'zipformer-test' });
  // Loaded before the live test, as on a server in use: the first turn is not spent starting the recogniser.
  (await server.engine.acquire('zipformer-test', ['asr-stream'])).release();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  speech = await pcm24k(SPEECH_WAV);
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

const TURN_EVENTS = [
  'input_audio_buffer.speech_started',
  'input_audio_buffer.speech_stopped',
  'input_audio_buffer.committed',
  'conversation.item.input_audio_transcription.delta',
  'conversation.item.input_audio_transcription.completed',
];

/** The events about one turn (by item id), in order. */
function turn(events: Array<{ type: string }>, itemId: string): string[] {
  return events.filter((e) => (e as { item_id?: string }).item_id === itemId).map((e) => e.type);
}

/** `turns` transcribed turns, each with its events in `order`, and no response of any kind. */
function expectTranscribedTurns(events: Array<{ type: string }>, turns: number, order = TURN_EVENTS): void {
  const completed = events.filter((e) => e.type === 'conversation.item.input_audio_transcription.completed') as unknown as Array<{ item_id: string; transcript: string }>;
  expect(completed).toHaveLength(turns);
  for (const { item_id, transcript } of completed) {
    expect(typeof transcript).toBe('string');
    const seen = turn(events, item_id);
    const at = order.map((t) => seen.indexOf(t));
    expect(at.every((i) => i >= 0), seen.join(', ')).toBe(true);
    expect([...at].sort((a, b) => a - b)).toEqual(at);
  }
  expect(events.filter((e) => e.type.startsWith('response.'))).toEqual([]);
  expect(events.filter((e) => e.type === 'error')).toEqual([]);
}

describe('Realtime transcription sessions', () => {
  it('a GA client (the openai SDK) turns its session into a transcription session with session.update', async () => {
    const { rt, events, next } = await connectSdk(client, CHAT_MODEL_ID);
    rt.send({ type: 'session.update', session: { type: 'transcription', audio: { input: { transcription: { model: 'whisper-test' } } } } });
    const updated = await next('session.updated');
    expect(updated.session).toMatchObject({ type: 'transcription', object: 'realtime.transcription_session', audio: { input: { transcription: { model: 'whisper-test' } } } });
    streamAudio(rt, Buffer.concat([silence(0.5), speech, silence(1)]));
    await next('conversation.item.input_audio_transcription.completed');
    const first = events.findIndex((e) => e.type === 'conversation.item.input_audio_transcription.completed');
    await next('conversation.item.input_audio_transcription.completed', first + 1);
    expectTranscribedTurns(events, 2);
    // A transcription session answers nothing, even when asked.
    rt.send({ type: 'response.create', event_id: 'evt_answer' });
    const refused = await next('error');
    expect(refused.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_session_type', event_id: 'evt_answer' });
    rt.close();
  });

  it('a session whose conversation has begun stays a realtime session', async () => {
    const { rt, next } = await connectSdk(client, CHAT_MODEL_ID);
    rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi' }] } });
    await next('conversation.item.done');
    rt.send({ type: 'session.update', session: { type: 'transcription' }, event_id: 'evt_switch' });
    const error = await next('error');
    expect(error.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_value', param: 'session.type', event_id: 'evt_switch' });
    rt.close();
  });

  it('?intent=transcription opens one, transcribing with the installed speech-to-text model', async () => {
    const { socket, log, send } = await connectRaw(server.url, '?intent=transcription');
    expect(log.events[0]).toMatchObject({ type: 'session.created', session: { type: 'transcription' } });
    // "hello world" only: one turn.
    streamAudio({ send }, Buffer.concat([silence(0.5), speech.subarray(0, 2.2 * 24_000 * 2), silence(1)]));
    await log.next('conversation.item.input_audio_transcription.completed');
    expectTranscribedTurns(log.events, 1);
    socket.close();
  });

  it("a session that names no model, or OpenAI's name for the default, transcribes with the default's int8 twin where it is installed; the kind's default stays", async () => {
    // Installed as the catalog's whisper-tiny and whisper-tiny-q8 (pulled, as a user who pulled both; the first ranks first), the files the tiny model's.
    const { store } = server.engine;
    const { model } = await store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'tiny-whisper-files' });
    const { files } = JSON.parse(await readFile(path.join(store.modelDir(model.id), MANIFEST), 'utf8')) as Manifest;
    for (const id of ['whisper-tiny', 'whisper-tiny-q8']) await store.writeManifest(id, { id, source: 'catalog', installedAt: new Date().toISOString(), files });
    const used: string[] = [];
    const off = server.engine.events.on((event) => {
      if (event.type === 'transcription') used.push(event.model);
    });
    try {
      expect(await server.engine.defaultModel('asr')).toBe('whisper-tiny');
      const { socket, log, send } = await connectRaw(server.url, '?intent=transcription');
      streamAudio({ send }, Buffer.concat([silence(0.5), speech.subarray(0, 2.2 * 24_000 * 2), silence(1)]));
      await log.next('conversation.item.input_audio_transcription.completed');
      expectTranscribedTurns(log.events, 1);
      socket.close();
      expect(used).toEqual(['whisper-tiny-q8']);
      // A name OpenAI's clients send for the default goes there too; a model's own id is used as named.
      for (const [named, model] of [['whisper-1', 'whisper-tiny-q8'], ['whisper-tiny', 'whisper-tiny']]) {
        const named_ = await connectRaw(server.url, '?intent=transcription');
        named_.send({ type: 'session.update', session: { type: 'transcription', audio: { input: { transcription: { model: named } } } } });
        await named_.log.next('session.updated');
        streamAudio({ send: named_.send }, Buffer.concat([silence(0.5), speech.subarray(0, 2.2 * 24_000 * 2), silence(1)]));
        await named_.log.next('conversation.item.input_audio_transcription.completed');
        named_.socket.close();
        expect(used.at(-1)).toBe(model);
      }
      used.length = 1;
      // A transcription request that names none: the default itself.
      const wav = new File([await readFile(SPEECH_WAV)], 'speech.wav', { type: 'audio/wav' });
      expect((await client.audio.transcriptions.create({ file: wav, model: 'whisper-1' })).text).toEqual(expect.any(String));
      expect(used).toEqual(['whisper-tiny-q8', 'whisper-tiny']);
    } finally {
      off();
      for (const id of ['whisper-tiny', 'whisper-tiny-q8', 'tiny-whisper-files']) await store.remove(id);
    }
  });

  it('a streaming recogniser sends the transcript while the user speaks, and releases its model after', async () => {
    const { socket, log, send } = await connectRaw(server.url, '?intent=transcription&model=zipformer-test');
    // A second of silence ends a turn (the pause in speech.wav is 1.5 s): room for a busy machine's recogniser to keep up.
    send({ type: 'session.update', session: { type: 'transcription', audio: { input: { turn_detection: { type: 'server_vad', silence_duration_ms: 1000 } } } } });
    await log.next('session.updated');
    await streamAudioLive({ send }, Buffer.concat([silence(0.3), speech, silence(1.2)]));
    const first = log.events.indexOf(await log.next('conversation.item.input_audio_transcription.completed'));
    await log.next('conversation.item.input_audio_transcription.completed', first + 1);
    // The deltas' place is checked below: during the speech.
    expectTranscribedTurns(log.events, 2, TURN_EVENTS.filter((t) => !t.endsWith('.delta')));
    const completed = log.events.filter((e) => e.type === 'conversation.item.input_audio_transcription.completed') as Array<WireEvent & { item_id: string; transcript: string }>;
    for (const { item_id, transcript } of completed) {
      const seen = turn(log.events, item_id);
      // Live: deltas before the end of the turn's speech, not only after it was committed.
      expect(seen.indexOf('conversation.item.input_audio_transcription.delta'), seen.join(', ')).toBeLessThan(seen.indexOf('input_audio_buffer.speech_stopped'));
      const deltas = log.events.filter((e) => e.type === 'conversation.item.input_audio_transcription.delta' && e.item_id === item_id).map((e) => e.delta as string);
      // Append-only pieces of the growing transcript.
      expect(transcript.startsWith(deltas.join(''))).toBe(true);
      expect(transcript).not.toBe('');
    }
    socket.close();
    await expect.poll(() => busyModels(server.engine), { timeout: 5000 }).toEqual([]);
  });

  it('a streaming recogniser also transcribes a turn the client commits itself, however long', async () => {
    const { socket, log, send } = await connectRaw(server.url, '?intent=transcription&model=zipformer-test');
    send({ type: 'session.update', session: { type: 'transcription', audio: { input: { turn_detection: null } } } });
    await log.next('session.updated');
    // Over 30 s, more than a recogniser stream holds undecoded, in one append: the clip is fed as the recogniser keeps up.
    send({ type: 'input_audio_buffer.append', audio: Buffer.concat(Array.from({ length: 8 }, () => speech)).toString('base64') });
    send({ type: 'input_audio_buffer.commit' });
    const { item_id } = await log.next('input_audio_buffer.committed');
    const completed = await log.next('conversation.item.input_audio_transcription.completed', 0, 20_000);
    expect(completed.item_id).toBe(item_id);
    const deltas = log.events.filter((e) => e.type === 'conversation.item.input_audio_transcription.delta' && e.item_id === item_id).map((e) => e.delta as string);
    expect(deltas.length).toBeGreaterThan(0);
    expect(completed.transcript).not.toBe('');
    expect(String(completed.transcript).startsWith(deltas.join(''))).toBe(true);
    expect(log.errors()).toEqual([]);
    socket.close();
    await expect.poll(() => busyModels(server.engine), { timeout: 5000 }).toEqual([]);
  });
});
