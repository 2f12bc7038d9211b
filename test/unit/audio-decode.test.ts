import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { decodeAudio, type DecodedAudio } from '../../src/audio/decode.js';
import { PayloadTooLargeError, UnsupportedMediaError } from '../../src/core/errors.js';

/**
 * decodeAudio on real files of every accepted container/codec (the 440 Hz
 * tones of test/fixtures/audio/make-tones.sh, made by ffmpeg) and on WAVs
 * written here in every sample format: each must come out as 16 kHz mono of
 * the right length, pitch and level. Then every way bytes can be bad.
 */

const TONES = new URL('../fixtures/audio/tones/', import.meta.url);
const RATE = 16_000;
const TONE_HZ = 440;

/** Frequency from the upward zero crossings of the middle 60 % (interpolated between samples). */
function frequency(x: Float32Array, rate: number): number {
  const from = Math.floor(x.length * 0.2);
  const to = Math.floor(x.length * 0.8);
  let first = -1;
  let last = -1;
  let crossings = 0;
  for (let i = from; i < to - 1; i++) {
    if (x[i]! < 0 && x[i + 1]! >= 0) {
      const t = i - x[i]! / (x[i + 1]! - x[i]!);
      if (first < 0) first = t;
      last = t;
      crossings++;
    }
  }
  return ((crossings - 1) * rate) / (last - first);
}

/** Sine amplitude from the RMS of the middle 60 %. */
function amplitude(x: Float32Array): number {
  const from = Math.floor(x.length * 0.2);
  const to = Math.floor(x.length * 0.8);
  let sum = 0;
  for (let i = from; i < to; i++) sum += x[i]! * x[i]!;
  return Math.sqrt((2 * sum) / (to - from));
}

interface Expected {
  format: string;
  sourceRate: number;
  channels: number;
  seconds: number;
  /** Allowed duration error: one codec frame (0 for PCM and FLAC) plus one output sample. */
  frameSeconds: number;
  amplitude: number;
  lossy: boolean;
}

/** What a fixture must decode to, read from its name (see make-tones.sh). */
function expectedFor(name: string): Expected {
  const match = /^(\w+)-(\d+)-(mono|stereo|3ch)/.exec(name);
  if (!match) throw new Error(`unexpected fixture name ${name}`);
  const [, codec, rateText, layout] = match as unknown as [string, string, string, string];
  const rate = Number(rateText);
  const channels = layout === 'mono' ? 1 : layout === 'stereo' ? 2 : 3;
  const pcm = ['wav', 'aiff', 'caf'].includes(codec);
  // Mono 0.5; stereo left 0.5, right 0.25 → 0.375; 3 channels 0.5, 0.25, 0 → 0.25.
  const level = channels === 1 ? 0.5 : channels === 2 ? 0.375 : 0.25;
  const table: Record<string, Omit<Expected, 'channels' | 'seconds' | 'amplitude'>> = {
    wav: { format: 'wav', sourceRate: rate, frameSeconds: 0, lossy: false },
    aiff: { format: 'aiff', sourceRate: rate, frameSeconds: 0, lossy: false },
    caf: { format: 'caf', sourceRate: rate, frameSeconds: 0, lossy: false },
    flac: { format: 'flac', sourceRate: rate, frameSeconds: 0, lossy: false },
    mp3: { format: 'mp3', sourceRate: rate, frameSeconds: (rate >= 32_000 ? 1152 : 576) / rate, lossy: true },
    vorbis: { format: 'ogg', sourceRate: rate, frameSeconds: 2048 / rate, lossy: true },
    // Opus always decodes at 48 kHz, in frames of ≤ 20 ms (plus up to 6.5 ms of look-ahead).
    opus: { format: 'ogg', sourceRate: 48_000, frameSeconds: 0.0265, lossy: true },
    webm: { format: 'webm', sourceRate: 48_000, frameSeconds: 0.0265, lossy: true },
    mka: { format: 'mkv', sourceRate: 48_000, frameSeconds: 0.0265, lossy: true },
    aac: { format: 'm4a', sourceRate: rate, frameSeconds: 1024 / rate, lossy: true },
    // Raw ADTS carries no edit list (the encoder's priming stays in) and FAAD2 decodes
    // low-rate AAC-LC at twice the rate (it allows for implicit SBR).
    adts: { format: 'aac', sourceRate: rate <= 24_000 ? 2 * rate : rate, frameSeconds: 2048 / rate, lossy: true },
  };
  const base = table[codec];
  if (!base) throw new Error(`no expectations for ${name}`);
  return { ...base, channels, seconds: rate === 8000 && !pcm ? 1 : 0.5, amplitude: level };
}

function checkTone(audio: DecodedAudio, seconds: number, frameSeconds: number, level: number, lossy: boolean): void {
  expect(audio.sampleRate).toBe(RATE);
  expect(audio.samples.length).toBe(Math.round(audio.duration * RATE));
  expect(Math.abs(audio.duration - seconds)).toBeLessThanOrEqual(frameSeconds + 1 / RATE);
  expect(Math.abs(frequency(audio.samples, RATE) - TONE_HZ)).toBeLessThan(TONE_HZ * 0.01);
  // Lossless: the exact average of the channels; lossy: low-bitrate encoders move the level a little.
  expect(Math.abs(amplitude(audio.samples) - level)).toBeLessThan(level * (lossy ? 0.2 : 0.01));
}

const fixtures = readdirSync(TONES).sort();

describe('decodeAudio: committed fixtures (ffmpeg)', () => {
  it('finds every fixture', () => {
    expect(fixtures.length).toBeGreaterThanOrEqual(36);
  });

  it.each(fixtures)('%s → 16 kHz mono with the right length, pitch and level', async (name) => {
    const expected = expectedFor(name);
    const audio = await decodeAudio(readFileSync(new URL(name, TONES)), { sampleRate: RATE });
    expect(audio.format).toBe(expected.format);
    expect(audio.sourceSampleRate).toBe(expected.sourceRate);
    expect(audio.channels).toBe(expected.channels);
    checkTone(audio, expected.seconds, expected.frameSeconds, expected.amplitude, expected.lossy);
  });

  it('reads a view into a larger buffer at an odd offset (a pooled Buffer, a multipart slice)', async () => {
    for (const name of ['mp3-44100-stereo.mp3', 'flac-8000-mono.flac', 'opus-48000-mono.ogg', 'webm-8000-mono.webm', 'aac-48000-mono.m4a']) {
      const bytes = readFileSync(new URL(name, TONES));
      const host = new Uint8Array(bytes.length + 21).fill(0xff);
      host.set(bytes, 13);
      const audio = await decodeAudio(host.subarray(13, 13 + bytes.length), { sampleRate: RATE });
      expect(audio.format).toBe(expectedFor(name).format);
      expect(Math.abs(frequency(audio.samples, RATE) - TONE_HZ)).toBeLessThan(TONE_HZ * 0.01);
    }
  });

  it('decodes to other output rates', async () => {
    const bytes = readFileSync(new URL('flac-44100-stereo.flac', TONES));
    for (const rate of [8000, 48_000]) {
      const audio = await decodeAudio(bytes, { sampleRate: rate });
      expect(audio.sampleRate).toBe(rate);
      expect(audio.duration).toBeCloseTo(0.5, 3);
      expect(Math.abs(frequency(audio.samples, rate) - TONE_HZ)).toBeLessThan(TONE_HZ * 0.01);
    }
  });
});

type SampleFormat = 'u8' | 's16' | 's24' | 's32' | 'f32' | 'f64';

/**
 * A 440 Hz WAV: channel c has amplitude 0.5 / (c + 1). WAVE_FORMAT_EXTENSIBLE
 * when asked (the sub-format GUID then carries PCM or IEEE float).
 */
function makeWav(rate: number, channels: number, format: SampleFormat, extensible: boolean, seconds = 0.5): Uint8Array {
  const bytesPer = { u8: 1, s16: 2, s24: 3, s32: 4, f32: 4, f64: 8 }[format];
  const float = format === 'f32' || format === 'f64';
  const frames = Math.round(rate * seconds);
  const fmtSize = extensible ? 40 : 16;
  const dataSize = frames * channels * bytesPer;
  const out = new Uint8Array(12 + 8 + fmtSize + 8 + dataSize);
  const view = new DataView(out.buffer);
  const text = (at: number, s: string) => [...s].forEach((ch, i) => (out[at + i] = ch.charCodeAt(0)));
  text(0, 'RIFF');
  view.setUint32(4, out.length - 8, true);
  text(8, 'WAVE');
  text(12, 'fmt ');
  view.setUint32(16, fmtSize, true);
  const tag = float ? 3 : 1;
  view.setUint16(20, extensible ? 0xfffe : tag, true);
  view.setUint16(22, channels, true);
  view.setUint32(24, rate, true);
  view.setUint32(28, rate * channels * bytesPer, true);
  view.setUint16(32, channels * bytesPer, true);
  view.setUint16(34, bytesPer * 8, true);
  if (extensible) {
    view.setUint16(36, 22, true); // cbSize
    view.setUint16(38, bytesPer * 8, true); // valid bits
    view.setUint32(40, (1 << channels) - 1, true); // channel mask
    // SubFormat GUID: {tag}-0000-0010-8000-00aa00389b71
    view.setUint16(44, tag, true);
    out.set([0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71], 46);
  }
  const data = 12 + 8 + fmtSize;
  text(data, 'data');
  view.setUint32(data + 4, dataSize, true);
  let at = data + 8;
  for (let i = 0; i < frames; i++) {
    for (let c = 0; c < channels; c++) {
      const v = (0.5 / (c + 1)) * Math.sin((2 * Math.PI * TONE_HZ * i) / rate);
      if (format === 'u8') view.setUint8(at, Math.round(128 + v * 127));
      else if (format === 's16') view.setInt16(at, Math.round(v * 32767), true);
      else if (format === 's24') {
        const s = Math.round(v * 8388607);
        view.setUint8(at, s & 0xff);
        view.setUint8(at + 1, (s >> 8) & 0xff);
        view.setUint8(at + 2, (s >> 16) & 0xff);
      } else if (format === 's32') view.setInt32(at, Math.round(v * 2147483647), true);
      else if (format === 'f32') view.setFloat32(at, v, true);
      else view.setFloat64(at, v, true);
      at += bytesPer;
    }
  }
  return out;
}

/** Average of 0.5 / (c + 1) over the channels. */
const wavLevel = (channels: number) => Array.from({ length: channels }, (_, c) => 0.5 / (c + 1)).reduce((a, b) => a + b) / channels;

describe('decodeAudio: WAV in every sample format', () => {
  const layouts: [number, number][] = [
    [8000, 1],
    [22_050, 2],
    [44_100, 2],
    [48_000, 1],
  ];
  const formats: SampleFormat[] = ['u8', 's16', 's24', 's32', 'f32', 'f64'];
  // Every sample format, plain and WAVE_FORMAT_EXTENSIBLE, each at two of the rate/channel layouts (all four in turn).
  const cases = formats.flatMap((format, i) =>
    [layouts[i % 4]!, layouts[(i + 1) % 4]!].map(([rate, channels]) => ({ format, rate, channels })),
  );
  it.each(cases)('$format $rate Hz × $channels', async ({ format, rate, channels }) => {
    for (const extensible of [false, true]) {
      const audio = await decodeAudio(makeWav(rate, channels, format, extensible), { sampleRate: RATE });
      expect(audio).toMatchObject({ format: 'wav', sourceSampleRate: rate, channels });
      checkTone(audio, 0.5, 0, wavLevel(channels), false);
    }
  });

  it('6 channels (5.1, WAVE_FORMAT_EXTENSIBLE) are averaged', async () => {
    const audio = await decodeAudio(makeWav(48_000, 6, 's16', true), { sampleRate: RATE });
    expect(audio.channels).toBe(6);
    checkTone(audio, 0.5, 0, wavLevel(6), false);
  });

  it('passes 16 kHz mono through unchanged', async () => {
    const wav = makeWav(RATE, 1, 'f32', false);
    const audio = await decodeAudio(wav, { sampleRate: RATE });
    const original = new Float32Array(wav.buffer.slice(wav.length - (RATE / 2) * 4));
    expect(audio.samples.length).toBe(original.length);
    expect(audio.samples.every((v, i) => v === original[i])).toBe(true);
  });
});

/** Rejects with a 415 whose message matches. */
async function expect415(bytes: Uint8Array, message: RegExp): Promise<void> {
  const error = await decodeAudio(bytes, { sampleRate: RATE }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(UnsupportedMediaError);
  expect((error as UnsupportedMediaError).status).toBe(415);
  expect((error as UnsupportedMediaError).param).toBe('file');
  expect((error as Error).message).toMatch(message);
}

describe('decodeAudio: bad input', () => {
  it('an empty buffer → 415', async () => {
    await expect415(new Uint8Array(0), /empty \(0 bytes\): not a recognised audio format/);
  });

  it('random bytes → 415 naming the first bytes', async () => {
    let seed = 12345;
    const random = new Uint8Array(4096).map(() => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 0xff);
    await expect415(random, /not a recognised audio format \(first bytes [0-9a-f]{2}( [0-9a-f]{2}){7} /);
  });

  it('a text file → 415 naming the first bytes', async () => {
    await expect415(new TextEncoder().encode('Hello, this is not audio at all.\n'), /not a recognised audio format \(first bytes 48 65 6c 6c 6f 2c 20 74 "Hello, t"\)/);
  });

  it('a recognised but unsupported format (MIDI) → 415 naming it', async () => {
    await expect415(new Uint8Array([0x4d, 0x54, 0x68, 0x64, 0, 0, 0, 6, 0, 0, 0, 1, 0, 96]), /detected as 'mid', which is not supported/);
  });

  // Cut at 90 % and at 10 %. (An MP3 or ADTS stream cut exactly between two frames is
  // indistinguishable from a shorter file; these cuts fall inside frames.)
  const truncatable = fixtures.filter((name) => /-(8000|44100)-/.test(name) || /^(adts|mka)/.test(name));
  it.each(truncatable)('%s truncated → 415 naming the format', async (name) => {
    const bytes = readFileSync(new URL(name, TONES));
    const { format } = expectedFor(name);
    for (const keep of [0.9, 0.1]) {
      await expect415(bytes.subarray(0, Math.floor(bytes.length * keep)), new RegExp(`detected as '${format}'.* could not be decoded: .*truncated`));
    }
  });

  it('a header with no audio → 415', async () => {
    await expect415(makeWav(RATE, 1, 's16', false, 0), /detected as 'wav' but could not be decoded: it contains no audio samples/);
  });

  it('garbage behind a valid header → 415 from the decoder', async () => {
    const bytes = new Uint8Array(readFileSync(new URL('aac-48000-mono.m4a', TONES)));
    // Destroy the moov box (at the end, as ffmpeg writes it) but keep the box structure.
    const moov = Buffer.from(bytes).lastIndexOf('moov');
    bytes.fill(0x41, moov + 4);
    await expect415(bytes, /detected as 'm4a' but could not be decoded: /);
  });
});

describe('decodeAudio: limits', () => {
  it('audio longer than maxDurationSec → 413 naming the limit', async () => {
    const bytes = readFileSync(new URL('opus-8000-mono.ogg', TONES));
    const error = await decodeAudio(bytes, { sampleRate: RATE, maxDurationSec: 0.75 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PayloadTooLargeError);
    expect((error as PayloadTooLargeError).status).toBe(413);
    expect((error as Error).message).toMatch(/longer than the limit of 0\.75 s/);
    await expect(decodeAudio(bytes, { sampleRate: RATE, maxDurationSec: 1 })).resolves.toMatchObject({ duration: 1 });
  });

  it('stops decoding at the limit, long before the end of a long file', async () => {
    // The signal is checked once per piece of ≈ 2 s: count the pieces.
    let pieces = 0;
    const counter = { aborted: false, throwIfAborted: () => void pieces++ } as unknown as AbortSignal;
    const long = makeWav(8000, 1, 's16', false, 20);
    await expect(decodeAudio(long, { sampleRate: RATE, maxDurationSec: 1, signal: counter })).rejects.toThrow(/limit of 1 s/);
    expect(pieces).toBeLessThanOrEqual(2);
    pieces = 0;
    await decodeAudio(long, { sampleRate: RATE, signal: counter });
    expect(pieces).toBeGreaterThan(5);
  });

  it('an aborted signal stops a decode', async () => {
    const controller = new AbortController();
    const decoding = decodeAudio(makeWav(8000, 1, 's16', false, 60), { sampleRate: RATE, signal: controller.signal });
    controller.abort();
    await expect(decoding).rejects.toMatchObject({ name: 'AbortError' });
  });
});
