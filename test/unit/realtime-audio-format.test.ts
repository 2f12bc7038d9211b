import { describe, expect, it } from 'vitest';
import { floatToInt16, int16LeBytes } from '../../src/audio/encode/pcm16.js';
import { encodeG711 } from '../../src/audio/encode/g711.js';
import { decodeG711 } from '../../src/audio/g711.js';
import { pcm16ToFloat32 } from '../../src/audio/pcm.js';
import { base64Chunks, durationMs, formatRate, InputAudioDecoder, OutputAudioEncoder } from '../../src/api/realtime/audio-format.js';
import type { AudioFormat } from '../../src/api/realtime/types.js';
import { peakHz } from '../helpers/signal.js';

/**
 * The Realtime API's wire audio: client pieces (PCM16 at 24/16 kHz, G.711 at
 * 8 kHz) → 16 kHz floats, synthesised speech → the session's format. Tones
 * must keep their length, pitch and level, and a stream cut into pieces must
 * give exactly what it gives whole.
 */

const PCM24: AudioFormat = { type: 'audio/pcm', rate: 24_000 };
const PCM16K: AudioFormat = { type: 'audio/pcm', rate: 16_000 };
const PCMU: AudioFormat = { type: 'audio/pcmu' };
const PCMA: AudioFormat = { type: 'audio/pcma' };

function tone(hz: number, rate: number, seconds: number, amplitude = 0.5): Float32Array {
  return Float32Array.from({ length: Math.round(rate * seconds) }, (_, i) => amplitude * Math.sin((2 * Math.PI * hz * i) / rate));
}

/** Sine amplitude from the RMS of the middle 60 % (away from the filter's edges). */
function amplitude(x: Float32Array): number {
  const from = Math.floor(x.length * 0.2);
  const to = Math.floor(x.length * 0.8);
  let sum = 0;
  for (let i = from; i < to; i++) sum += x[i]! * x[i]!;
  return Math.sqrt((2 * sum) / (to - from));
}

/** Largest jump between neighbouring samples in the middle 90 %: a click at a piece boundary shows up here. */
function maxStep(x: Float32Array): number {
  let max = 0;
  for (let i = Math.floor(x.length * 0.05); i < x.length * 0.95 - 1; i++) max = Math.max(max, Math.abs(x[i + 1]! - x[i]!));
  return max;
}

function concat<T extends Float32Array | Uint8Array>(parts: T[], make: (n: number) => T): T {
  const out = make(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (out.set(p, at), at + p.length), 0);
  return out;
}

/** `samples` in `format`'s bytes at its own rate (the signal must already be at that rate). */
function wireBytes(samples: Float32Array, format: AudioFormat): Buffer {
  const bytes = format.type === 'audio/pcm' ? int16LeBytes(floatToInt16(samples)) : encodeG711(samples, format.type === 'audio/pcmu' ? 'ulaw' : 'alaw');
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** Decodes `bytes` sent in pieces of the given sizes (cycled), then flushes. */
function decodeInPieces(format: AudioFormat, bytes: Buffer, sizes: number[]): Float32Array {
  const decoder = new InputAudioDecoder(format);
  const parts: Float32Array[] = [];
  for (let at = 0, i = 0; at < bytes.length; i++) {
    const size = sizes[i % sizes.length]!;
    parts.push(decoder.decode(bytes.subarray(at, at + size).toString('base64')));
    at += size;
  }
  parts.push(decoder.flush());
  return concat(parts, (n) => new Float32Array(n));
}

describe('formats: rate and duration', () => {
  it('PCM runs at its rate, G.711 at 8 kHz; bytes → milliseconds', () => {
    expect(formatRate(PCM24)).toBe(24_000);
    expect(formatRate(PCM16K)).toBe(16_000);
    expect(formatRate(PCMU)).toBe(8000);
    expect(formatRate(PCMA)).toBe(8000);
    expect(durationMs(48_000, PCM24)).toBe(1000);
    expect(durationMs(4800, PCM24)).toBe(100);
    expect(durationMs(32_000, PCM16K)).toBe(1000);
    expect(durationMs(8000, PCMU)).toBe(1000);
    expect(durationMs(160, PCMA)).toBe(20);
    expect(durationMs(0, PCM24)).toBe(0);
  });
});

describe('InputAudioDecoder', () => {
  it.each([
    ['PCM16 24 kHz', PCM24, 0.005],
    ['PCM16 16 kHz', PCM16K, 0.005],
    ['μ-law 8 kHz', PCMU, 0.02],
    ['A-law 8 kHz', PCMA, 0.02],
  ] as const)('%s: a 440 Hz tone → 16 kHz with the right length, pitch and level', (_, format, levelError) => {
    const rate = formatRate(format);
    const out = decodeInPieces(format, wireBytes(tone(440, rate, 1), format), [rate / 10]);
    expect(Math.abs(out.length - 16_000)).toBeLessThanOrEqual(1);
    expect(Math.abs(peakHz(out, 16_000) - 440)).toBeLessThan(0.5);
    expect(Math.abs(amplitude(out) - 0.5)).toBeLessThan(levelError);
  });

  it('16 kHz PCM16 passes through unchanged', () => {
    const bytes = wireBytes(tone(440, 16_000, 0.1), PCM16K);
    expect(Array.from(decodeInPieces(PCM16K, bytes, [640]))).toEqual(Array.from(pcm16ToFloat32(bytes)));
  });

  it.each([
    ['PCM16 24 kHz', PCM24, [2, 4800, 6, 998, 1234]],
    ['μ-law 8 kHz', PCMU, [1, 160, 7, 333, 2001]],
    ['A-law 8 kHz', PCMA, [3, 160, 1, 999]],
  ] as const)('%s in uneven pieces equals the whole stream, with no click at any boundary', (_, format, sizes) => {
    const bytes = wireBytes(tone(440, formatRate(format), 0.5), format);
    const whole = decodeInPieces(format, bytes, [bytes.length]);
    const pieces = decodeInPieces(format, bytes, [...sizes]);
    expect(pieces.length).toBe(whole.length);
    expect(pieces.every((v, i) => v === whole[i])).toBe(true);
    // A 0.5-amplitude 440 Hz sine moves at most 2π·440/16000·0.5 ≈ 0.086 per sample (plus G.711's quantization
    // noise); a filter restarted at a boundary would jump by up to the full 0.5.
    expect(maxStep(pieces)).toBeLessThan(0.1);
  });

  it('flush ends one stream and the next starts afresh', () => {
    const bytes = wireBytes(tone(440, 24_000, 0.2), PCM24);
    const decoder = new InputAudioDecoder(PCM24);
    const first = concat([decoder.decode(bytes.toString('base64')), decoder.flush()], (n) => new Float32Array(n));
    const second = concat([decoder.decode(bytes.toString('base64')), decoder.flush()], (n) => new Float32Array(n));
    expect(first.length).toBe(3200);
    expect(Array.from(second)).toEqual(Array.from(first));
  });

  it('refuses an odd number of PCM16 bytes (G.711 has no such rule) and leaves the stream intact', () => {
    const bytes = wireBytes(tone(440, 24_000, 0.1), PCM24);
    const decoder = new InputAudioDecoder(PCM24);
    const parts = [decoder.decode(bytes.subarray(0, 1000).toString('base64'))];
    expect(() => decoder.decode(bytes.subarray(1000, 1001).toString('base64'))).toThrow(
      expect.objectContaining({ status: 400, type: 'invalid_request_error', code: 'invalid_audio', param: 'audio', message: expect.stringMatching(/1 bytes.*even/) }),
    );
    parts.push(decoder.decode(bytes.subarray(1000).toString('base64')), decoder.flush());
    expect(Array.from(concat(parts, (n) => new Float32Array(n)))).toEqual(Array.from(decodeInPieces(PCM24, bytes, [bytes.length])));
    const ulaw = new InputAudioDecoder(PCMU);
    expect(ulaw.decode(Buffer.from([0xff, 0x7f, 0x80]).toString('base64')).length + ulaw.flush().length).toBe(6);
  });

  it.each(['AAA*', 'AA AA', 'AAAA\n', 'AAAAA', 'AA===', 'not base64!', '=AAA', 'data:audio/pcm;base64,AAAA'])('refuses %j as base64', (text) => {
    expect(() => new InputAudioDecoder(PCMU).decode(text)).toThrow(expect.objectContaining({ status: 400, code: 'invalid_base64', param: 'audio' }));
  });

  it('takes empty pieces, and base64 with or without padding', () => {
    const decoder = new InputAudioDecoder(PCM16K);
    expect(decoder.decode('').length).toBe(0);
    // 0x0001, 0x7fff: 'AQD/fw==' padded, 'AQD/fw' not.
    expect(Array.from(decoder.decode('AQD/fw=='))).toEqual([1 / 32768, 32767 / 32768]);
    expect(Array.from(decoder.decode('AQD/fw'))).toEqual([1 / 32768, 32767 / 32768]);
  });
});

describe('OutputAudioEncoder', () => {
  function encodeInPieces(format: AudioFormat, sourceRate: number, samples: Float32Array, size: number): Buffer {
    const encoder = new OutputAudioEncoder(format, sourceRate);
    const parts: Buffer[] = [];
    for (let at = 0; at < samples.length; at += size) parts.push(encoder.encode(samples.subarray(at, at + size)));
    parts.push(encoder.flush());
    return Buffer.concat(parts);
  }

  it('24 kHz speech to 24 kHz PCM16: the samples as 16-bit little-endian, nothing held back', () => {
    const samples = tone(440, 24_000, 0.1);
    const encoder = new OutputAudioEncoder(PCM24, 24_000);
    expect(encoder.encode(samples).equals(wireBytes(samples, PCM24))).toBe(true);
    expect(encoder.flush().length).toBe(0);
  });

  it.each([
    ['22.05 kHz → PCM16 24 kHz', PCM24, 22_050, 0.005],
    ['24 kHz → μ-law 8 kHz', PCMU, 24_000, 0.02],
    ['24 kHz → A-law 8 kHz', PCMA, 24_000, 0.02],
    ['16 kHz → μ-law 8 kHz', PCMU, 16_000, 0.02],
  ] as const)('%s: a 440 Hz tone keeps its length, pitch and level, whole or in pieces', (_, format, sourceRate, levelError) => {
    const samples = tone(440, sourceRate, 1.5);
    const whole = encodeInPieces(format, sourceRate, samples, samples.length);
    expect(encodeInPieces(format, sourceRate, samples, 1000).equals(whole)).toBe(true);
    const rate = formatRate(format);
    const bytesPerSample = format.type === 'audio/pcm' ? 2 : 1;
    expect(whole.length).toBe(Math.ceil((samples.length * rate) / sourceRate) * bytesPerSample);
    expect(durationMs(whole.length, format)).toBeCloseTo(1500, 0);
    const decoded = format.type === 'audio/pcm' ? pcm16ToFloat32(whole) : decodeG711(whole, format.type === 'audio/pcmu' ? 'ulaw' : 'alaw');
    expect(Math.abs(peakHz(decoded, rate) - 440)).toBeLessThan(0.5);
    expect(Math.abs(amplitude(decoded) - 0.5)).toBeLessThan(levelError);
    expect(maxStep(decoded)).toBeLessThan((2 * Math.PI * 440 * 0.5) / rate + 0.01);
  });

  it('μ-law out, μ-law back in: the session round trip keeps the tone', () => {
    const bytes = encodeInPieces(PCMU, 24_000, tone(440, 24_000, 1), 480);
    const chunks = base64Chunks(bytes, 800);
    const decoder = new InputAudioDecoder(PCMU);
    const back = concat([...chunks.map((c) => decoder.decode(c)), decoder.flush()], (n) => new Float32Array(n));
    expect(back.length).toBe(16_000);
    expect(Math.abs(peakHz(back, 16_000) - 440)).toBeLessThan(0.5);
    expect(Math.abs(amplitude(back) - 0.5)).toBeLessThan(0.02);
  });
});

describe('base64Chunks', () => {
  const bytes = Buffer.from(Array.from({ length: 1001 }, (_, i) => i & 0xff));

  it('cuts into pieces of at most maxBytes, rounded down to whole 16-bit samples, that join back to the bytes', () => {
    const chunks = base64Chunks(bytes, 301);
    const sizes = chunks.map((c) => Buffer.from(c, 'base64').length);
    expect(sizes).toEqual([300, 300, 300, 101]);
    expect(Buffer.concat(chunks.map((c) => Buffer.from(c, 'base64'))).equals(bytes)).toBe(true);
    expect(base64Chunks(bytes.subarray(0, 0), 100)).toEqual([]);
    // A view into a larger buffer: only its own bytes go out.
    expect(base64Chunks(bytes.subarray(10, 14), 100)).toEqual([bytes.subarray(10, 14).toString('base64')]);
  });

  it('refuses a piece size under one sample', () => {
    for (const bad of [0, 1, -4, Number.NaN, 2.5]) expect(() => base64Chunks(bytes, bad)).toThrow(RangeError);
  });
});
