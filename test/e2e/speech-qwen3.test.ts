import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudio } from '../../src/audio/decode.js';
import { tinyQwen3TtsModel } from '../fixtures/onnx/qwen3-tts.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * The three Qwen3-TTS modes through the real server: synthetic exports with
 * the onnx-community graphs' names, dtypes and shapes (tiny hidden size,
 * random weights, the real special and codec ids; the talker raises eos
 * after 2·(tokens + 2) frames) run by the real frame loop on ONNX Runtime.
 * The fixture graphs let each mode's input reach the audio (speaker slot,
 * described voice, reference x-vector), so the tests can see that the
 * request's fields arrive; stream jobs are timed against the frame loop.
 */

const REFERENCE = fileURLToPath(new URL('../fixtures/audio/speech.wav', import.meta.url));
const LONG = Array.from({ length: 12 }, (_, i) => `This is sentence number ${i + 1} of a long text, spoken in pieces.`).join(' ');

let server: TestServer;
let reference: Buffer;

beforeAll(async () => {
  server = await startTestServer({ server: { allowLocalFiles: [dirname(REFERENCE)] } });
  const store = server.engine.store;
  await store.registerDirectory(await tinyQwen3TtsModel('customvoice'), { kind: 'tts', id: 'qwen-preset' });
  await store.registerDirectory(await tinyQwen3TtsModel('voicedesign'), { kind: 'tts', id: 'qwen-design' });
  await store.registerDirectory(await tinyQwen3TtsModel('base'), { kind: 'tts', id: 'qwen-clone' });
  reference = await readFile(REFERENCE);
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

function post(body: Record<string, unknown>): Promise<Response> {
  return fetch(`${server.url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

/** WAV bytes of a synthesis (OpenAI's direct form), and its samples at 24 kHz. */
async function speak(body: Record<string, unknown>): Promise<{ bytes: Buffer; samples: Float32Array }> {
  const res = await post({ response_format: 'wav', seed: 7, ...body });
  expect(res.status, await res.clone().text().catch(() => '')).toBe(200);
  const bytes = Buffer.from(await res.arrayBuffer());
  return { bytes, samples: (await decodeAudio(bytes, { sampleRate: 24_000 })).samples };
}

describe('preset speakers (CustomVoice)', () => {
  it('the speaker reaches the model; the same seed gives the same bytes', async () => {
    const vivian = await speak({ model: 'qwen-preset', input: 'Hello there, how are you?', voice: 'Vivian' });
    const again = await speak({ model: 'qwen-preset', input: 'Hello there, how are you?', voice: 'vivian' });
    const ryan = await speak({ model: 'qwen-preset', input: 'Hello there, how are you?', speaker: 'Ryan', voice: 'Vivian' });
    expect(again.bytes.equals(vivian.bytes)).toBe(true);
    expect(ryan.bytes.equals(vivian.bytes)).toBe(false);
    expect(ryan.samples.length).toBe(vivian.samples.length);
    const otherSeed = await speak({ model: 'qwen-preset', input: 'Hello there, how are you?', voice: 'Vivian', seed: 8 });
    expect(otherSeed.bytes.equals(vivian.bytes)).toBe(false);
  });

  it('the specification form: {audio_url, sample_rate 24000, duration} from whole codec frames', async () => {
    const res = await post({ model: 'qwen-preset', input: 'One short sentence.', voice: 'Serena' });
    const body = (await res.json()) as { audio_url: string; sample_rate: number; duration: number };
    expect(body.sample_rate).toBe(24_000);
    // 1920 samples per 80 ms frame.
    expect(Math.round(body.duration * 24_000) % 1920).toBe(0);
    const file = await fetch(`${server.url}${body.audio_url}`);
    expect((await decodeAudio(new Uint8Array(await file.arrayBuffer()), { sampleRate: 24_000 })).duration).toBeCloseTo(body.duration, 4);
  });

  it('`frames` caps the codec frames; `speed` time-stretches (the model has no rate control)', async () => {
    const capped = await speak({ model: 'qwen-preset', input: LONG.slice(0, 200), frames: 5 });
    expect(capped.samples.length).toBe(5 * 1920);
    const normal = await speak({ model: 'qwen-preset', input: 'A sentence to stretch a little.' });
    const fast = await speak({ model: 'qwen-preset', input: 'A sentence to stretch a little.', speed: 2 });
    expect(fast.samples.length / normal.samples.length).toBeGreaterThan(0.47);
    expect(fast.samples.length / normal.samples.length).toBeLessThan(0.53);
  });

  it('languages by name or code are checked against the model; speakers listed on a miss', async () => {
    expect((await post({ model: 'qwen-preset', input: 'Bonjour à tous.', language: 'fr', response_format: 'wav' })).status).toBe(200);
    const bad = await post({ model: 'qwen-preset', input: 'Hi there.', language: 'klingon' });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(/Languages: auto, .*English/i);
    const unknown = await post({ model: 'qwen-preset', input: 'Hi there.', speaker: 'Nobody' });
    expect(unknown.status).toBe(400);
    expect(((await unknown.json()) as { error: { message: string } }).error.message).toMatch(/Speakers: .*Vivian.*Ryan|Speakers: .*Ryan.*Vivian/);
  });

  it('GET /v1/audio/info lists the config speakers and languages', async () => {
    const info = (await (await fetch(`${server.url}/v1/audio/info?model=qwen-preset`)).json()) as { supported_speakers: string[]; tts_supported_languages: string[] };
    expect(info.supported_speakers).toEqual(expect.arrayContaining(['Vivian', 'Serena', 'Uncle_Fu', 'Ryan', 'Aiden', 'Ono_Anna', 'Sohee', 'Eric', 'Dylan']));
    expect(info.tts_supported_languages).toEqual(expect.arrayContaining(['English', 'Chinese', 'Japanese']));
  });
});

describe('voice design', () => {
  it('the description reaches the model (instructions is its OpenAI alias); without one → 400 naming voice_description', async () => {
    const calm = await speak({ model: 'qwen-design', input: 'Good evening.', voice_description: 'a calm, low voice' });
    const alias = await speak({ model: 'qwen-design', input: 'Good evening.', instructions: 'a calm, low voice' });
    const bright = await speak({ model: 'qwen-design', input: 'Good evening.', voice_description: 'a bright, fast, cheerful voice' });
    expect(alias.bytes.equals(calm.bytes)).toBe(true);
    expect(bright.bytes.equals(calm.bytes)).toBe(false);
    const missing = await post({ model: 'qwen-design', input: 'Good evening.', voice: 'alloy' });
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { error: { param: string; code: string } }).error).toMatchObject({ param: 'voice_description', code: 'missing_required_parameter' });
  });
});

describe('voice clone', () => {
  it('ref_audio as a data URI, bare base64 or a path reaches the model; a different reference changes the voice', async () => {
    const base64 = reference.toString('base64');
    const dataUri = await speak({ model: 'qwen-clone', input: 'Words in a borrowed voice.', ref_audio: `data:audio/wav;base64,${base64}` });
    const bare = await speak({ model: 'qwen-clone', input: 'Words in a borrowed voice.', ref_audio: base64 });
    const byPath = await speak({ model: 'qwen-clone', input: 'Words in a borrowed voice.', ref_audio: REFERENCE });
    expect(bare.bytes.equals(dataUri.bytes)).toBe(true);
    expect(byPath.bytes.equals(dataUri.bytes)).toBe(true);
    // The second half of the recording: another "voice" to the synthetic speaker encoder.
    const half = Buffer.concat([reference.subarray(0, 44), reference.subarray(44 + Math.floor((reference.length - 44) / 4) * 2)]);
    half.writeUInt32LE(half.length - 8, 4);
    half.writeUInt32LE(half.length - 44, 40);
    const other = await speak({ model: 'qwen-clone', input: 'Words in a borrowed voice.', ref_audio: half.toString('base64') });
    expect(other.bytes.equals(dataUri.bytes)).toBe(false);
    const withText = await speak({ model: 'qwen-clone', input: 'Words in a borrowed voice.', ref_audio: base64, ref_text: 'What the reference says.' });
    expect(withText.samples.length).toBeGreaterThan(0);
  });

  it('bad references: missing → 400 naming ref_audio; not audio → 400 invalid_audio naming ref_audio; not base64 → 400', async () => {
    const missing = await post({ model: 'qwen-clone', input: 'Hi there.' });
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { error: { param: string } }).error.param).toBe('ref_audio');
    const garbage = await post({ model: 'qwen-clone', input: 'Hi there.', ref_audio: Buffer.from('this is not audio at all, just text').toString('base64') });
    expect(garbage.status).toBe(400);
    expect(((await garbage.json()) as { error: unknown }).error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_audio', param: 'ref_audio' });
    const notBase64 = await post({ model: 'qwen-clone', input: 'Hi there.', ref_audio: 'not base64 at all!' });
    expect(notBase64.status).toBe(400);
  });
});

describe('stream jobs on the frame loop', () => {
  it('the first audio arrives long before synthesis ends; a disconnect stops the work', async () => {
    const job = async () => ((await (await post({ model: 'qwen-preset', input: LONG, stream: true, response_format: 'pcm' })).json()) as { stream_url: string }).stream_url;
    const started = performance.now();
    const res = await fetch(`${server.url}${await job()}`);
    const reader = res.body!.getReader();
    let first = 0;
    let bytes = 0;
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!first) first = performance.now() - started;
      bytes += value.byteLength;
    }
    const total = performance.now() - started;
    expect(bytes).toBeGreaterThan(0);
    expect(first).toBeLessThan(total / 4);

    // Again, hanging up after the first chunk: the next request does not wait for the rest of it.
    const controller = new AbortController();
    const second = await fetch(`${server.url}${await job()}`, { signal: controller.signal });
    await second.body!.getReader().read();
    controller.abort();
    const after = performance.now();
    await speak({ model: 'qwen-preset', input: 'Next.' });
    expect(performance.now() - after).toBeLessThan(total / 3);
    // A hang-up is not a server error.
    expect(server.logs.filter((line) => line.startsWith('error') || line.includes('failed'))).toEqual([]);
  });
});
