import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudio } from '../../src/audio/decode.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * POST /v1/audio/speech and what it hands out, end to end with the synthetic
 * Piper voice (sherpa-onnx's real OfflineTts in its supervised child process,
 * espeak-ng phonemizing for real; only the voice's weights are fake): the
 * specification's JSON one-shot form and its file, stream jobs, OpenAI's
 * direct-bytes form through the official SDK, every output format, and bad
 * input. The Qwen3-TTS modes have their own file (speech-qwen3.test.ts).
 */

const TEXT = 'The quick brown fox jumps over the lazy dog. Then it rests in the sun for a while.';
const RATE = 22_050;
/**
 * A streamed MP3 carries no gapless tag, so it decodes longer by the codec's
 * delay (LAME's 576 + the decoder's 529 samples) plus the padding of its last
 * frame (< 576 samples at 22.05 kHz): under 0.08 s here.
 */
const MP3_SLACK = (576 + 529 + 576) / RATE;

let server: TestServer;
let client: OpenAI;

beforeAll(async () => {
  server = await startTestServer();
  await server.engine.store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'piper-test' });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.stop();
});

function post(body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${server.url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

async function seconds(bytes: Uint8Array): Promise<number> {
  return (await decodeAudio(bytes, { sampleRate: RATE })).duration;
}

/** Duration of TEXT as the one-shot form reports it, measured once. */
let reference: number;

describe('POST /v1/audio/speech (one-shot, the specification form)', () => {
  it('answers {audio_url, sample_rate, duration}; the file is served with its type and length, and decodes to that duration', async () => {
    const res = await post({ model: 'piper-test', input: TEXT, voice: 'lessac' });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { audio_url: string; sample_rate: number; duration: number };
    expect(body.audio_url).toMatch(/^\/v1\/audio\/files\/[0-9a-f]{32}\.wav$/);
    expect(body.sample_rate).toBe(RATE);
    expect(body.duration).toBeGreaterThan(1);
    reference = body.duration;
    const file = await fetch(`${server.url}${body.audio_url}`);
    expect(file.status).toBe(200);
    expect(file.headers.get('content-type')).toBe('audio/wav');
    const bytes = new Uint8Array(await file.arrayBuffer());
    expect(Number(file.headers.get('content-length'))).toBe(bytes.length);
    expect(file.headers.get('cache-control')).toMatch(/max-age=\d+/);
    expect(await seconds(bytes)).toBeCloseTo(body.duration, 3);
  });

  it('needs no model when one synthesis model is installed, and applies speed natively', async () => {
    const res = await post({ input: TEXT, speed: 2 });
    expect(res.status).toBe(200);
    const { duration } = (await res.json()) as { duration: number };
    expect(duration / reference).toBeGreaterThan(0.45);
    expect(duration / reference).toBeLessThan(0.55);
  });

  it('serves no file it did not write: traversal, encoded separators, unknown names → 404', async () => {
    for (const name of ['..%2F..%2Fetc%2Fpasswd', '%2Fetc%2Fpasswd', 'deadbeef.wav', `${'0'.repeat(32)}.wav`, '..', '.%2E']) {
      const res = await fetch(`${server.url}/v1/audio/files/${name}`);
      expect(res.status, name).toBe(404);
      expect(((await res.json()) as { error: { type: string } }).error.type).toBe('not_found_error');
    }
  });
});

describe('GET /v1/audio/files/:name as players fetch it: ranges, HEAD, revalidation', () => {
  let url: string;
  let whole: Buffer;
  let etag: string;
  let lastModified: string;

  beforeAll(async () => {
    const { audio_url } = (await (await post({ model: 'piper-test', input: TEXT, voice: 'lessac' })).json()) as { audio_url: string };
    url = `${server.url}${audio_url}`;
    const res = await fetch(url);
    whole = Buffer.from(await res.arrayBuffer());
    etag = res.headers.get('etag')!;
    lastModified = res.headers.get('last-modified')!;
    expect(res.headers.get('accept-ranges')).toBe('bytes');
    expect(etag).toMatch(/^(W\/)?"[^"]+"$/);
    expect(new Date(lastModified).getTime()).toBeGreaterThan(Date.now() - 120_000);
    expect(whole.length).toBeGreaterThan(10_000);
  });

  const get = (headers: Record<string, string>, method = 'GET') => fetch(url, { method, headers });
  /**
   * A revalidation as a browser sends it on reload. (fetch() on its own adds
   * `Cache-Control: no-cache` to a conditional request, which asks for the
   * file whatever the validators say.)
   */
  const revalidate = (headers: Record<string, string>) => get({ 'cache-control': 'max-age=0', ...headers });

  it('answers a byte range with 206, its Content-Range and exactly those bytes', async () => {
    const size = whole.length;
    const cases: Array<[string, number, number]> = [
      ['bytes=0-43', 0, 43],
      ['bytes=1000-4999', 1000, 4999],
      ['bytes=-100', size - 100, size - 1],
      [`bytes=${size - 10}-`, size - 10, size - 1],
      [`bytes=${size - 5}-${size + 1000}`, size - 5, size - 1],
      // Overlapping ranges are one range.
      ['bytes=0-9,5-19', 0, 19],
    ];
    for (const [range, start, end] of cases) {
      const res = await get({ range });
      expect(res.status, range).toBe(206);
      expect(res.headers.get('content-range'), range).toBe(`bytes ${start}-${end}/${size}`);
      expect(res.headers.get('content-type')).toBe('audio/wav');
      const bytes = Buffer.from(await res.arrayBuffer());
      expect(Number(res.headers.get('content-length'))).toBe(end - start + 1);
      expect(bytes.equals(whole.subarray(start, end + 1)), range).toBe(true);
    }
  });

  it('sends the whole file for several ranges or a malformed Range, and 416 (JSON, with the length) for a range past the end', async () => {
    for (const range of ['bytes=0-9,1000-1009', 'bytes=abc', 'bytes=x-y', 'items=0-9']) {
      const res = await get({ range });
      expect(res.status, range).toBe(200);
      expect(Buffer.from(await res.arrayBuffer()).equals(whole), range).toBe(true);
    }
    for (const range of [`bytes=${whole.length}-`, `bytes=${whole.length + 100}-${whole.length + 200}`, 'bytes=-0']) {
      const res = await get({ range });
      expect(res.status, range).toBe(416);
      expect(res.headers.get('content-range')).toBe(`bytes */${whole.length}`);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(res.headers.get('etag')).toBeNull();
      const body = (await res.json()) as { error: { type: string; code: string; message: string } };
      expect(body.error).toMatchObject({ type: 'invalid_request_error', code: 'range_not_satisfiable' });
      expect(body.error.message).toContain(String(whole.length));
    }
  });

  it('answers HEAD with the headers of GET and no body, for the whole file and for a range', async () => {
    const head = await get({}, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.headers.get('content-length')).toBe(String(whole.length));
    expect(head.headers.get('content-type')).toBe('audio/wav');
    expect(head.headers.get('etag')).toBe(etag);
    expect(head.headers.get('accept-ranges')).toBe('bytes');
    expect(head.headers.get('cache-control')).toMatch(/^private, max-age=\d+, immutable$/);
    expect((await head.arrayBuffer()).byteLength).toBe(0);
    const ranged = await get({ range: 'bytes=10-19' }, 'HEAD');
    expect(ranged.status).toBe(206);
    expect(ranged.headers.get('content-range')).toBe(`bytes 10-19/${whole.length}`);
    expect((await ranged.arrayBuffer()).byteLength).toBe(0);
    expect((await fetch(`${server.url}/v1/audio/files/${'0'.repeat(32)}.wav`, { method: 'HEAD' })).status).toBe(404);
  });

  it('answers 304 to a matching If-None-Match, the file to another tag, and 412 to a failed If-Match', async () => {
    const fresh = await revalidate({ 'if-none-match': etag });
    expect(fresh.status).toBe(304);
    expect(fresh.headers.get('etag')).toBe(etag);
    expect((await fresh.arrayBuffer()).byteLength).toBe(0);
    const changed = await revalidate({ 'if-none-match': '"something-else"' });
    expect(changed.status).toBe(200);
    expect(Buffer.from(await changed.arrayBuffer()).equals(whole)).toBe(true);
    // If-Range with a stale tag: the whole file, not the range.
    const stale = await get({ range: 'bytes=0-9', 'if-range': '"something-else"' });
    expect(stale.status).toBe(200);
    expect(Number(stale.headers.get('content-length'))).toBe(whole.length);
    await stale.arrayBuffer();
    const failed = await get({ 'if-match': '"something-else"' });
    expect(failed.status).toBe(412);
    expect(((await failed.json()) as { error: { code: string } }).error.code).toBe('precondition_failed');
  });

  it('answers 304 to If-Modified-Since at or after Last-Modified, and the file to an earlier date', async () => {
    const fresh = await revalidate({ 'if-modified-since': lastModified });
    expect(fresh.status).toBe(304);
    expect((await fresh.arrayBuffer()).byteLength).toBe(0);
    const older = await revalidate({ 'if-modified-since': new Date(Date.parse(lastModified) - 60_000).toUTCString() });
    expect(older.status).toBe(200);
    expect(Buffer.from(await older.arrayBuffer()).equals(whole)).toBe(true);
  });
});

describe('OpenAI compatibility: the audio bytes themselves', () => {
  it('client.audio.speech.create from the official SDK returns audio (mp3 by default, an OpenAI voice name accepted)', async () => {
    const response = await client.audio.speech.create({ model: 'piper-test', voice: 'alloy', input: TEXT });
    expect(response.headers.get('content-type')).toBe('audio/mpeg');
    const bytes = new Uint8Array(await response.arrayBuffer());
    expect(Math.abs((await seconds(bytes)) - reference)).toBeLessThan(MP3_SLACK);
  });

  it('every response_format decodes back to the same duration', async () => {
    const types = { wav: 'audio/wav', mp3: 'audio/mpeg', opus: 'audio/ogg; codecs=opus', flac: 'audio/flac', pcm: 'application/octet-stream' } as const;
    for (const [format, type] of Object.entries(types)) {
      const res = await post({ model: 'piper-test', input: TEXT, response_format: format });
      expect(res.status, format).toBe(200);
      expect(res.headers.get('content-type'), format).toBe(type);
      const bytes = new Uint8Array(await res.arrayBuffer());
      const rate = Number(res.headers.get('x-sample-rate'));
      const duration = format === 'pcm' ? bytes.length / 2 / rate : (await decodeAudio(bytes, { sampleRate: rate })).duration;
      expect(Math.abs(duration - reference), format).toBeLessThan(format === 'mp3' ? MP3_SLACK : 0.03);
    }
  });

  it('an Accept header asking for audio gets audio; */* and JSON get the JSON form', async () => {
    const wav = await post({ model: 'piper-test', input: 'Short one here.' }, { accept: 'audio/wav' });
    expect(wav.headers.get('content-type')).toBe('audio/wav');
    const octet = await post({ model: 'piper-test', input: 'Short one here.' }, { accept: 'application/octet-stream' });
    expect(octet.headers.get('content-type')).toBe('audio/mpeg');
    for (const accept of ['*/*', 'application/json', 'application/json, audio/wav']) {
      const json = await post({ model: 'piper-test', input: 'Short one here.' }, { accept });
      expect(json.headers.get('content-type'), accept).toMatch(/^application\/json/);
    }
  });
});

describe('stream jobs', () => {
  it('returns a stream_url at once; GET streams chunked audio once, then 404', async () => {
    const res = await post({ model: 'piper-test', input: TEXT, stream: true });
    expect(res.status).toBe(200);
    const { stream_url } = (await res.json()) as { stream_url: string };
    expect(stream_url).toMatch(/^\/v1\/audio\/speech\/stream\/[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    const audio = await fetch(`${server.url}${stream_url}`);
    expect(audio.status).toBe(200);
    expect(audio.headers.get('content-type')).toBe('audio/wav');
    expect(audio.headers.get('transfer-encoding')).toBe('chunked');
    expect(audio.headers.get('content-length')).toBeNull();
    const bytes = new Uint8Array(await audio.arrayBuffer());
    // The streaming WAV header does not know its length (0xFFFFFFFF); decoders read to the end.
    expect(new DataView(bytes.buffer, bytes.byteOffset).getUint32(40, true)).toBe(0xffffffff);
    expect(await seconds(bytes)).toBeCloseTo(reference, 2);
    const again = await fetch(`${server.url}${stream_url}`);
    expect(again.status).toBe(404);
    expect(((await again.json()) as { error: { code: string } }).error.code).toBe('stream_not_found');
  });

  it('streams the format the job asked for, and unknown tokens are 404', async () => {
    const { stream_url } = (await (await post({ model: 'piper-test', input: 'Streamed as MP3.', stream: true, response_format: 'mp3' })).json()) as { stream_url: string };
    const audio = await fetch(`${server.url}${stream_url}`);
    expect(audio.headers.get('content-type')).toBe('audio/mpeg');
    expect((await audio.arrayBuffer()).byteLength).toBeGreaterThan(0);
    for (const token of ['00000000-0000-4000-8000-000000000000', 'not-a-uuid', '..%2F..%2Fhealth']) {
      expect((await fetch(`${server.url}/v1/audio/speech/stream/${token}`)).status, token).toBe(404);
    }
  });
});

describe('GET /v1/audio/info for a synthesis model', () => {
  it('lists its languages and speakers', async () => {
    const res = await fetch(`${server.url}/v1/audio/info?model=piper-test`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ tts_supported_languages: ['English'], supported_speakers: ['lessac'] });
  });
});

describe('bad input', () => {
  const cases: Array<[string, unknown, number, string]> = [
    ['unknown model', { model: 'nope', input: 'Hi there.' }, 404, 'model_not_found'],
    ['empty input', { model: 'piper-test', input: '   ' }, 400, 'missing_required_parameter'],
    ['input over the limit', { model: 'piper-test', input: 'a'.repeat(4097) }, 413, 'payload_too_large'],
    ['input not a string', { model: 'piper-test', input: 42 }, 400, 'invalid_value'],
    ['missing input', { model: 'piper-test' }, 400, 'missing_required_parameter'],
    ['speed out of range', { model: 'piper-test', input: 'Hi there.', speed: 10 }, 400, 'invalid_value'],
    ['unknown voice', { model: 'piper-test', input: 'Hi there.', voice: 'bob' }, 400, 'unknown_speaker'],
    ['unknown speaker', { model: 'piper-test', input: 'Hi there.', speaker: 'alloy' }, 400, 'unknown_speaker'],
    ['unsupported language', { model: 'piper-test', input: 'Hi there.', language: 'klingon' }, 400, 'unsupported_language'],
    ['unknown response_format', { model: 'piper-test', input: 'Hi there.', response_format: 'aac' }, 400, 'invalid_value'],
  ];
  for (const [name, body, status, code] of cases) {
    it(`${name} → ${status} ${code}`, async () => {
      const res = await post(body);
      expect(res.status).toBe(status);
      const json = (await res.json()) as { error: { code: string; message: string } };
      expect(json.error.code).toBe(code);
      expect(json.error.message.length).toBeGreaterThan(10);
    });
  }

  it('lists the valid speakers in the unknown-speaker message', async () => {
    const json = (await (await post({ model: 'piper-test', input: 'Hi there.', voice: 'bob' })).json()) as { error: { message: string; param: string } };
    expect(json.error).toMatchObject({ param: 'voice', message: "Model 'piper-test' has no speaker 'bob'. Speakers: lessac." });
  });

  it('a model of another kind → 400 wrong_model_kind naming both kinds', async () => {
    // PP-OCRv4 ships with lserve (bundled), so every server has it installed: a real model, of kind ocr.
    const res = await post({ model: 'ppocr-v4-mobile', input: 'Hi there.' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: unknown }).error).toEqual({
      message: expect.stringMatching(/^Model 'ppocr-v4-mobile' is an OCR model, not a speech synthesis model\. Installed: (.+, )?piper-test[,.]/),
      type: 'invalid_request_error',
      param: 'model',
      code: 'wrong_model_kind',
    });
  });

  it('keeps serving afterwards', async () => {
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    expect((await post({ model: 'piper-test', input: 'Still here.' })).status).toBe(200);
  });
});
