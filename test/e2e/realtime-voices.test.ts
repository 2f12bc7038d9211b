import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OutputAudioEncoder } from '../../src/api/realtime/audio-format.js';
import { defaultSessionConfig } from '../../src/api/realtime/session-config.js';
import { SPOKEN_PIECES } from '../../src/realtime/reply.js';
import { prepareSpeech, type SpeakRequest } from '../../src/core/tasks/speak.js';
import { SentenceStream } from '../../src/core/tasks/speak/sentences.js';
import { RealtimeSession } from '../../src/realtime/session.js';
import { tinyQwen3TtsModel } from '../fixtures/onnx/qwen3-tts.js';
import { CHAT_MODEL_ID } from '../helpers/chat-model.js';
import { busyModels, connectRaw, EventLog, SPEECH_WAV, startVoiceServer, type WireEvent } from '../helpers/realtime.js';
import type { TestServer } from '../helpers/server.js';

/**
 * Described and cloned voices in realtime sessions (lserve's own session
 * fields, named as /v1/audio/speech names them), on the synthetic
 * Qwen3-TTS voice-design and voice-clone models, whose graphs let the
 * description and the reference reach the audio. Each answer's audio is
 * checked against the speech task speaking the same pieces of the same
 * text with the same voice settings: equal with the session's voice,
 * different with another description or reference.
 */

let server: TestServer;
let reference: Buffer;

beforeAll(async () => {
  ({ server } = await startVoiceServer());
  await server.engine.store.registerDirectory(await tinyQwen3TtsModel('voicedesign'), { kind: 'tts', id: 'qwen-design' });
  await server.engine.store.registerDirectory(await tinyQwen3TtsModel('base'), { kind: 'tts', id: 'qwen-clone' });
  reference = await readFile(SPEECH_WAV);
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

interface Answer {
  audio: Buffer;
  /** The pieces the session spoke, cut from the text's deltas as the session cuts them. */
  pieces: string[];
  errors: WireEvent[];
}

/** A text turn answered in audio by a session with these output settings. */
async function answer(output: Record<string, unknown>): Promise<Answer> {
  const log = new EventLog<WireEvent>();
  const session = new RealtimeSession(
    { engine: server.engine, dialect: 'ga', send: (event) => log.push(event as WireEvent), log: () => {}, readReferenceAudio: async (value) => Buffer.from(value, 'base64') },
    defaultSessionConfig(CHAT_MODEL_ID),
  );
  const send = (event: unknown) => session.receive(JSON.stringify(event));
  session.open();
  await log.next('session.created');
  send({ type: 'session.update', session: { type: 'realtime', max_output_tokens: 16, audio: { output } } });
  await log.next('session.updated');
  send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Say something.' }] } });
  send({ type: 'response.create' });
  await log.next('response.done');
  session.close();
  await session.settled();
  const audio = Buffer.concat(log.events.filter((e) => e.type === 'response.output_audio.delta').map((e) => Buffer.from(String(e.delta), 'base64')));
  const sentences = new SentenceStream(SPOKEN_PIECES);
  const pieces = log.events.filter((e) => e.type === 'response.output_audio_transcript.delta').flatMap((e) => sentences.push(String(e.delta)));
  return { audio, pieces: [...pieces, ...sentences.end()], errors: log.errors() };
}

/** The same pieces spoken by the speech task with these voice settings, in the session's output format. */
async function spoken(pieces: string[], voice: Partial<SpeakRequest>): Promise<Buffer> {
  const parts: Buffer[] = [];
  let encoder: OutputAudioEncoder | undefined;
  for (const input of pieces) {
    const prepared = await prepareSpeech(server.engine, { ...voice, input, seed: 0 });
    encoder ??= new OutputAudioEncoder({ type: 'audio/pcm', rate: 24_000 }, prepared.sampleRate);
    await prepared.run((samples) => parts.push(encoder!.encode(samples)), new AbortController().signal);
  }
  if (encoder) parts.push(encoder.flush());
  return Buffer.concat(parts);
}

/** A WAV of a sine tone: a voice of another kind to copy. */
function tone(seconds: number, hz: number): Buffer {
  const rate = 24_000;
  const samples = Math.round(seconds * rate);
  const wav = Buffer.alloc(44 + samples * 2);
  wav.write('RIFF', 0);
  wav.writeUInt32LE(36 + samples * 2, 4);
  wav.write('WAVEfmt ', 8);
  wav.writeUInt32LE(16, 16);
  wav.writeUInt16LE(1, 20);
  wav.writeUInt16LE(1, 22);
  wav.writeUInt32LE(rate, 24);
  wav.writeUInt32LE(rate * 2, 28);
  wav.writeUInt16LE(2, 32);
  wav.writeUInt16LE(16, 34);
  wav.write('data', 36);
  wav.writeUInt32LE(samples * 2, 40);
  for (let i = 0; i < samples; i++) wav.writeInt16LE(Math.round(8000 * Math.sin((2 * Math.PI * hz * i) / rate)), 44 + i * 2);
  return wav;
}

describe('described and cloned voices in realtime sessions', () => {
  it('speaks every piece with the described voice', async () => {
    const calm = 'A calm, low male voice, speaking slowly.';
    const run = await answer({ model: 'qwen-design', voice_description: calm });
    expect(run.errors).toEqual([]);
    expect(run.pieces.length).toBeGreaterThan(0);
    expect(run.audio.length).toBeGreaterThan(2400);
    expect((await spoken(run.pieces, { model: 'qwen-design', voiceDescription: calm })).equals(run.audio)).toBe(true);
    expect((await spoken(run.pieces, { model: 'qwen-design', voiceDescription: 'A bright, cheerful young voice.' })).equals(run.audio)).toBe(false);
  }, 120_000);

  it('a voice-design model without a description fails the answer with an error naming voice_description', async () => {
    const run = await answer({ model: 'qwen-design' });
    expect(run.errors.map((e) => (e.error as { param?: string }).param)).toEqual(['voice_description']);
    expect(busyModels(server.engine)).toEqual([]);
  }, 120_000);

  it('speaks every piece with the voice of ref_audio', async () => {
    const run = await answer({ model: 'qwen-clone', ref_audio: reference.toString('base64'), ref_text: 'hello world, this is a test' });
    expect(run.errors).toEqual([]);
    expect(run.audio.length).toBeGreaterThan(2400);
    expect((await spoken(run.pieces, { model: 'qwen-clone', refAudio: reference, refText: 'hello world, this is a test' })).equals(run.audio)).toBe(true);
    expect((await spoken(run.pieces, { model: 'qwen-clone', refAudio: tone(1.5, 220), refText: 'hello world, this is a test' })).equals(run.audio)).toBe(false);
  }, 120_000);

  it('through the server: a reference that is no audio, or too short, is an error event naming the field, and the session keeps its voice', async () => {
    const { log, send, socket } = await connectRaw(server.url, `?model=${CHAT_MODEL_ID}`);
    const update = (output: Record<string, unknown>) => send({ type: 'session.update', session: { type: 'realtime', audio: { output } } });
    update({ model: 'qwen-clone', ref_audio: Buffer.from('not audio at all').toString('base64') });
    update({ ref_audio: tone(0.2, 220).toString('base64') });
    // A path the server was not told to read from, and a URL to a private address: refused as the speech API refuses them.
    update({ ref_audio: '/etc/passwd' });
    update({ ref_audio: 'http://169.254.169.254/latest/meta-data' });
    update({ model: 'qwen-clone', ref_audio: reference.toString('base64'), ref_text: 'hello world' });
    const updated = await log.next('session.updated');
    const errors = log.errors().map((e) => e.error as { param?: string; message: string });
    expect(errors.map((e) => e.param)).toEqual(Array(4).fill('session.audio.output.ref_audio'));
    expect(JSON.stringify(errors)).not.toMatch(/root:/);
    expect(errors[1]!.message).toMatch(/at least half a second/);
    // The bytes of a file never come back in a message, nor the reference in the session object.
    expect(JSON.stringify(errors)).not.toContain('not audio at all');
    expect((updated.session as { audio: { output: Record<string, unknown> } }).audio.output).toMatchObject({ model: 'qwen-clone', ref_text: 'hello world' });
    expect((updated.session as { audio: { output: Record<string, unknown> } }).audio.output).not.toHaveProperty('ref_audio');
    socket.close();
  }, 120_000);
});
