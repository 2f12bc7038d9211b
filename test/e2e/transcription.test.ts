import { readFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinyWhisperModel, tinyWhisperTimestampedModel } from '../fixtures/onnx/whisper.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * POST /v1/audio/transcriptions end to end: the synthetic Whisper export
 * (the onnx-community layout and interface, random weights) registered as a
 * model directory, real audio decoding, the real ONNX Runtime, and the
 * official OpenAI client. The random model's text is nonsense; everything
 * around it — windows, timestamps, formats, errors — runs for real.
 */

const SPEECH = fileURLToPath(new URL('../fixtures/audio/speech.wav', import.meta.url));
/** Sampling at one temperature keeps a random model from running the whole fallback ladder on every window. */
const FAST = { temperature: 0.5 } as const;

let server: TestServer;
let client: OpenAI;
let speech: Buffer;

beforeAll(async () => {
  server = await startTestServer({ server: { allowLocalFiles: [dirname(SPEECH)] } });
  await server.engine.store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-test' });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  speech = await readFile(SPEECH);
});

afterAll(async () => {
  await server?.stop();
});

/** Seconds as a subtitle clock, HH:MM:SS.mmm (SRT writes a comma for the dot). */
function clock(seconds: number): string {
  const ms = Math.round(seconds * 1000);
  const [h, m, s] = [Math.floor(ms / 3_600_000), Math.floor(ms / 60_000) % 60, Math.floor(ms / 1000) % 60];
  return `${[h, m, s].map((n) => String(n).padStart(2, '0')).join(':')}.${String(ms % 1000).padStart(3, '0')}`;
}

async function postJson(body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${server.url}/v1/audio/transcriptions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

async function postForm(fields: Record<string, string | string[]>, file?: { bytes: Uint8Array; name: string }): Promise<Response> {
  const form = new FormData();
  if (file) form.append('file', new Blob([file.bytes]), file.name);
  for (const [key, value] of Object.entries(fields)) for (const v of [value].flat()) form.append(key, v);
  return fetch(`${server.url}/v1/audio/transcriptions`, { method: 'POST', body: form });
}

describe('POST /v1/audio/transcriptions', () => {
  it('transcribes an upload through the OpenAI client: {text, language, duration}, model optional with one installed', async () => {
    const res = await client.audio.transcriptions.create({ file: await toFile(speech, 'speech.wav'), model: 'whisper-test', ...FAST });
    const body = res as unknown as { text: string; language: string; duration: number };
    expect(typeof body.text).toBe('string');
    expect(body.language).toMatch(/^[a-z]{2,3}$/);
    // speech.wav: a 44-byte header, then 16-bit mono samples at 16 kHz.
    expect(body.duration).toBeCloseTo((speech.length - 44) / 32_000, 3);
    const implicit = await postForm({ temperature: '0.5', language: 'en' }, { bytes: speech, name: 'speech.wav' });
    expect(implicit.status).toBe(200);
    expect(((await implicit.json()) as { language: string }).language).toBe('en');
  });

  it('takes JSON audio as a data URI or a local path, with language auto', async () => {
    const dataUri = await postJson({ model: 'whisper-test', audio: `data:audio/wav;base64,${speech.toString('base64')}`, language: 'auto', ...FAST });
    expect(dataUri.status).toBe(200);
    expect(dataUri.json).toMatchObject({ text: expect.any(String), language: expect.any(String), duration: expect.any(Number) });
    const path = await postJson({ model: 'whisper-test', audio: SPEECH, language: 'en', ...FAST });
    expect(path.status).toBe(200);
    expect(path.json.language).toBe('en');
  });

  it('answers every response_format: text, verbose_json with segments, srt and vtt', async () => {
    // Sampling is seeded (seed 0 unless given), so every request transcribes the same.
    const form = (format: string) => postForm({ model: 'whisper-test', language: 'en', response_format: format, temperature: '0.5' }, { bytes: speech, name: 'speech.wav' });
    const json = (await (await form('json')).json()) as { text: string };
    expect(json.text.trim().length).toBeGreaterThan(0);
    const text = await form('text');
    expect(text.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(await text.text()).toBe(`${json.text}\n`);
    const verbose = (await (await form('verbose_json')).json()) as { task: string; language: string; duration: number; text: string; segments: Array<Record<string, unknown>> };
    expect(verbose).toMatchObject({ task: 'transcribe', language: 'en', text: json.text });
    expect(verbose.segments.length).toBeGreaterThan(0);
    for (const segment of verbose.segments) {
      expect(segment).toMatchObject({ id: expect.any(Number), start: expect.any(Number), end: expect.any(Number), text: expect.any(String), tokens: expect.any(Array), avg_logprob: expect.any(Number), no_speech_prob: expect.any(Number) });
      expect(segment.end as number).toBeGreaterThanOrEqual(segment.start as number);
      expect(segment.end as number).toBeLessThanOrEqual(verbose.duration + 1e-6);
    }
    const segments = verbose.segments as Array<{ start: number; end: number; text: string }>;
    // A cue per segment: its number (SRT), its times to the millisecond, its text.
    const srt = (await (await form('srt')).text()).trimEnd().split('\n\n');
    const vtt = await (await form('vtt')).text();
    expect(vtt.startsWith('WEBVTT\n\n')).toBe(true);
    const vttCues = vtt.slice('WEBVTT\n\n'.length).trimEnd().split('\n\n');
    expect(srt).toHaveLength(segments.length);
    expect(vttCues).toHaveLength(segments.length);
    segments.forEach((segment, i) => {
      const times = [segment.start, segment.end].map(clock);
      expect(srt[i]).toBe(`${i + 1}\n${times.join(' --> ').replaceAll('.', ',')}\n${segment.text.trim()}`);
      expect(vttCues[i]).toBe(`${times.join(' --> ')}\n${segment.text.trim()}`);
    });
    expect(segments.map((s) => s.text).join('').trim()).toBe(json.text.trim());
  });

  it('splits long audio into 30 s windows with monotonic timestamps', async () => {
    // 70 s: the speech clip over and over.
    const pcm = speech.subarray(44);
    const repeats = Math.ceil((70 * 32_000) / pcm.length);
    const long = Buffer.concat([wavHeader(repeats * pcm.length), ...Array.from({ length: repeats }, () => pcm)]);
    const res = await postForm({ model: 'whisper-test', language: 'en', response_format: 'verbose_json', temperature: '0.5' }, { bytes: long, name: 'long.wav' });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { duration: number; segments: Array<{ start: number; end: number; seek: number }> };
    expect(body.duration).toBeGreaterThan(69);
    const seeks = [...new Set(body.segments.map((s) => s.seek))];
    expect(seeks.length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < body.segments.length; i++) {
      expect(body.segments[i]!.start).toBeGreaterThanOrEqual(body.segments[i - 1]!.start);
      expect(body.segments[i]!.seek).toBeGreaterThanOrEqual(body.segments[i - 1]!.seek);
    }
    expect(body.segments.at(-1)!.end).toBeLessThanOrEqual(body.duration + 1e-6);
  }, 120_000);

  it('keeps the event loop free while it decodes', async () => {
    const pending = postForm({ model: 'whisper-test', language: 'en', temperature: '0.5' }, { bytes: speech, name: 'speech.wav' });
    await new Promise((r) => setTimeout(r, 200));
    const started = performance.now();
    const health = await fetch(`${server.url}/health`);
    expect(health.status).toBe(200);
    const healthMs = performance.now() - started;
    expect((await pending).status).toBe(200);
    const restMs = performance.now() - started;
    // A decode blocking the loop would hold /health until the decode ends (seconds); yields keep it to one
    // slice. Measured against the rest of that decode, so a loaded machine slows both sides alike.
    expect(healthMs).toBeLessThan(restMs / 4);
  });

  it.each([
    ['no audio', 400, 'missing_required_parameter', () => postForm({ model: 'whisper-test' })],
    ['both file and audio', 400, 'invalid_value', () => postForm({ model: 'whisper-test', audio: SPEECH }, { bytes: speech, name: 'a.wav' })],
    ['undecodable audio', 400, 'invalid_audio', () => postForm({ model: 'whisper-test' }, { bytes: Buffer.from('this is not audio at all'.repeat(20)), name: 'x.wav' })],
    ['a truncated WAV', 400, 'invalid_audio', () => postForm({ model: 'whisper-test' }, { bytes: speech.subarray(0, 30), name: 'x.wav' })],
    ['an unknown model', 404, 'model_not_found', () => postForm({ model: 'whisper-nope' }, { bytes: speech, name: 'a.wav' })],
    ['a model of another kind', 400, 'wrong_model_kind', () => postForm({ model: 'ppocr-v4-mobile' }, { bytes: speech, name: 'a.wav' })],
    ['an unknown language', 400, 'invalid_language', () => postForm({ model: 'whisper-test', language: 'klingon' }, { bytes: speech, name: 'a.wav' })],
    ['a bad response_format', 400, undefined, () => postForm({ model: 'whisper-test', response_format: 'docx' }, { bytes: speech, name: 'a.wav' })],
    ['a temperature out of range', 400, undefined, () => postForm({ model: 'whisper-test', temperature: '3' }, { bytes: speech, name: 'a.wav' })],
    ['word timestamps from an export without cross-attentions', 400, 'unsupported_parameter', () => postForm({ model: 'whisper-test', 'timestamp_granularities[]': ['word', 'segment'] }, { bytes: speech, name: 'a.wav' })],
    ['word timestamps in verbose_json from an export without cross-attentions', 400, 'unsupported_parameter', () => postForm({ model: 'whisper-test', response_format: 'verbose_json', 'timestamp_granularities[]': 'word' }, { bytes: speech, name: 'a.wav' })],
    ['a malformed data URI', 400, 'invalid_base64', () => fetch(`${server.url}/v1/audio/transcriptions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'whisper-test', audio: 'data:audio/wav;base64,@@@' }) })],
  ] as const)('%s → %i', async (_name, status, code, send) => {
    const res = await send();
    expect(res.status).toBe(status);
    const body = (await res.json()) as { error: Record<string, unknown> };
    expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
    if (code) expect(body.error.code).toBe(code);
    expect(JSON.stringify(body)).not.toMatch(/at .*\.(ts|js):\d+/);
  });
});

describe('word timestamps (timestamp_granularities[]=word)', () => {
  // The same weights exported with cross_attentions.{i}, on a server of its own (the one above keeps a single ASR model installed).
  let timestamped: TestServer;
  let tsClient: OpenAI;

  beforeAll(async () => {
    timestamped = await startTestServer();
    await timestamped.engine.store.registerDirectory(await tinyWhisperTimestampedModel(), { kind: 'asr', id: 'whisper-ts' });
    tsClient = new OpenAI({ baseURL: `${timestamped.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  afterAll(async () => {
    await timestamped?.stop();
  });

  type Verbose = { text: string; duration: number; words?: Array<{ word: string; start: number; end: number }>; segments?: Array<{ start: number; end: number; text: string; seek: number }> };

  /** Every word non-empty, in order, never overlapping the previous, inside the audio; together they spell the text. */
  function expectWellFormedWords(body: Verbose): void {
    const words = body.words!;
    expect(words.length).toBeGreaterThan(0);
    let previousEnd = 0;
    for (const w of words) {
      expect(Object.keys(w).sort()).toEqual(['end', 'start', 'word']);
      expect(w.word.trim()).toBe(w.word);
      expect(w.word.length).toBeGreaterThan(0);
      expect(w.start).toBeGreaterThanOrEqual(previousEnd);
      expect(w.end).toBeGreaterThanOrEqual(w.start);
      expect(w.end).toBeLessThanOrEqual(body.duration + 1e-6);
      previousEnd = w.end;
    }
    const squash = (text: string) => text.replace(/\s+/g, '');
    expect(squash(words.map((w) => w.word).join(''))).toBe(squash(body.text));
  }

  it('answers verbose_json with words (and no segments when only words are asked for), through the OpenAI client', async () => {
    const res = await tsClient.audio.transcriptions.create({
      file: await toFile(speech, 'speech.wav'),
      model: 'whisper-ts',
      language: 'en',
      response_format: 'verbose_json',
      timestamp_granularities: ['word'],
      ...FAST,
    });
    const body = res as unknown as Verbose;
    expect(body.text.length).toBeGreaterThan(0);
    expectWellFormedWords(body);
    expect(body.segments).toBeUndefined();
    // The timestamped export is the same model: collecting attention leaves the transcript as it was.
    const plain = (await client.audio.transcriptions.create({ file: await toFile(speech, 'speech.wav'), model: 'whisper-test', language: 'en', response_format: 'verbose_json', ...FAST })) as unknown as Verbose;
    expect(body.text).toBe(plain.text);
  });

  it('gives words and segments when both are asked for, each word inside a segment', async () => {
    const res = await postFormTo(timestamped, { model: 'whisper-ts', language: 'en', response_format: 'verbose_json', temperature: '0.5', 'timestamp_granularities[]': ['word', 'segment'] }, speech);
    expect(res.status).toBe(200);
    const body = (await res.json()) as Verbose;
    expectWellFormedWords(body);
    const segments = body.segments!;
    expect(segments.length).toBeGreaterThan(0);
    for (const w of body.words!) expect(segments.some((s) => s.start <= w.start && w.end <= s.end)).toBe(true);
  });

  it('times words across 30 s windows, offset by each window’s start', async () => {
    const pcm = speech.subarray(44);
    const repeats = Math.ceil((40 * 32_000) / pcm.length);
    const long = Buffer.concat([wavHeader(repeats * pcm.length), ...Array.from({ length: repeats }, () => pcm)]);
    const res = await postFormTo(timestamped, { model: 'whisper-ts', language: 'en', response_format: 'verbose_json', temperature: '0.5', 'timestamp_granularities[]': ['word', 'segment'] }, long);
    expect(res.status).toBe(200);
    const body = (await res.json()) as Verbose;
    expectWellFormedWords(body);
    const later = body.segments!.filter((s) => s.seek > 0);
    expect(later.length).toBeGreaterThan(0);
    expect(body.words!.some((w) => w.start >= later[0]!.start)).toBe(true);
  }, 120_000);

  it('leaves words out of the other formats, as OpenAI does', async () => {
    const json = await postFormTo(timestamped, { model: 'whisper-ts', language: 'en', temperature: '0.5', 'timestamp_granularities[]': 'word' }, speech);
    expect(json.status).toBe(200);
    expect(Object.keys((await json.json()) as object).sort()).toEqual(['duration', 'language', 'text']);
    const srt = await postFormTo(timestamped, { model: 'whisper-ts', language: 'en', temperature: '0.5', response_format: 'srt', 'timestamp_granularities[]': 'word' }, speech);
    expect(srt.status).toBe(200);
    expect(await srt.text()).toMatch(/^1\n\d\d:\d\d:\d\d,\d{3} --> /);
  });

  it('says which exports have word timestamps when the model has none', async () => {
    const res = await postForm({ model: 'whisper-test', response_format: 'verbose_json', 'timestamp_granularities[]': 'word' }, { bytes: speech, name: 'a.wav' });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string; param: string } };
    expect(body.error.param).toBe('timestamp_granularities');
    expect(body.error.message).toMatch(/_timestamped/);
  });
});

describe('one transcription at a time per model, with a bounded line', () => {
  let queued: TestServer;

  beforeAll(async () => {
    queued = await startTestServer({ engine: { maxQueue: 1 } });
    await queued.engine.store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: 'whisper-q' });
  });

  afterAll(async () => {
    await queued?.stop();
  });

  it('runs one, lets --max-queue wait, answers 503 beyond, and serves the next one after', async () => {
    const fields = { model: 'whisper-q', language: 'en', temperature: '0.5' };
    const first = postFormTo(queued, fields, speech);
    // The first holds the model (its load included) before the others arrive.
    for (let i = 0; !queued.engine.manager.loaded().some((m) => m.id === 'whisper-q' && m.activeRequests > 0); i++) {
      if (i > 1500) throw new Error('the first transcription never started');
      await new Promise((r) => setTimeout(r, 20));
    }
    const second = postFormTo(queued, fields, speech);
    await new Promise((r) => setTimeout(r, 300));
    const third = await postFormTo(queued, fields, speech);
    expect(third.status).toBe(503);
    expect(((await third.json()) as { error: { type: string } }).error.type).toBe('overloaded_error');
    expect((await first).status).toBe(200);
    expect((await second).status).toBe(200);
    expect((await postFormTo(queued, fields, speech)).status).toBe(200);
  });
});

async function postFormTo(target: TestServer, fields: Record<string, string | string[]>, audio: Uint8Array): Promise<Response> {
  const form = new FormData();
  form.append('file', new Blob([audio]), 'speech.wav');
  for (const [key, value] of Object.entries(fields)) for (const v of [value].flat()) form.append(key, v);
  return fetch(`${target.url}/v1/audio/transcriptions`, { method: 'POST', body: form });
}

describe('GET /v1/audio/info', () => {
  it("lists a Whisper model's language codes from its generation config, in its order", async () => {
    const res = await fetch(`${server.url}/v1/audio/info?model=whisper-test`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { model: string; asr_supported_languages: string[] };
    expect(body.model).toBe('whisper-test');
    expect(body.asr_supported_languages.slice(0, 3)).toEqual(['en', 'zh', 'de']);
    expect(body.asr_supported_languages).toHaveLength(99);
  });

  it('answers 400 without a model, 404 for an unknown one, 400 for a model that is not an audio model', async () => {
    expect((await fetch(`${server.url}/v1/audio/info`)).status).toBe(400);
    expect((await fetch(`${server.url}/v1/audio/info?model=nope`)).status).toBe(404);
    expect((await fetch(`${server.url}/v1/audio/info?model=ppocr-v4-mobile`)).status).toBe(400);
  });
});

/** A 44-byte PCM16 mono 16 kHz WAV header for `dataBytes` of samples. */
function wavHeader(dataBytes: number): Buffer {
  const h = Buffer.alloc(44);
  h.write('RIFF', 0);
  h.writeUInt32LE(36 + dataBytes, 4);
  h.write('WAVEfmt ', 8);
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20);
  h.writeUInt16LE(1, 22);
  h.writeUInt32LE(16_000, 24);
  h.writeUInt32LE(32_000, 28);
  h.writeUInt16LE(2, 32);
  h.writeUInt16LE(16, 34);
  h.write('data', 36);
  h.writeUInt32LE(dataBytes, 40);
  return h;
}
