import { describe, expect, it } from 'vitest';
import { pcm16ToFloat32 } from '../../src/audio/pcm.js';
import { resample, Resampler } from '../../src/audio/resample.js';

/** Resampler quality (pass band, stop band, timing, DC) and the streaming/one-shot equivalence; PCM16 parsing. */

function tone(hz: number, rate: number, seconds: number, phase = 0): Float32Array {
  const x = new Float32Array(Math.round(rate * seconds));
  for (let i = 0; i < x.length; i++) x[i] = Math.sin((2 * Math.PI * hz * i) / rate + phase);
  return x;
}

/** RMS of the middle 80 % (away from the zero-padded edges). */
function rms(x: Float32Array): number {
  const from = Math.floor(x.length * 0.1);
  const to = Math.floor(x.length * 0.9);
  let sum = 0;
  for (let i = from; i < to; i++) sum += x[i]! * x[i]!;
  return Math.sqrt(sum / (to - from));
}

const gainDb = (from: number, to: number, hz: number) => {
  const x = tone(hz, from, 0.5);
  return 20 * Math.log10(rms(resample(x, from, to)) / rms(x));
};

describe('resample: quality', () => {
  for (const from of [48_000, 44_100]) {
    it(`${from} → 16000: a 7 kHz tone is kept within 0.5 dB, a 12 kHz tone is ≥ 60 dB down`, () => {
      expect(Math.abs(gainDb(from, 16_000, 7000))).toBeLessThan(0.5);
      expect(gainDb(from, 16_000, 12_000)).toBeLessThan(-60);
      // Just past the stop-band edge (1.1 × 8 kHz), where the alias would land in 7–8 kHz.
      expect(gainDb(from, 16_000, 9000)).toBeLessThan(-60);
      expect(Math.abs(gainDb(from, 16_000, 440))).toBeLessThan(0.01);
    });
  }

  it('upsampling 8000 → 16000 keeps the band and adds no image above 4 kHz', () => {
    expect(Math.abs(gainDb(8000, 16_000, 3500))).toBeLessThan(0.1);
    const y = resample(tone(3000, 8000, 0.5), 8000, 16_000);
    // The image of 3 kHz would sit at 5 kHz: correlate against it.
    let re = 0;
    let im = 0;
    const from = Math.floor(y.length * 0.1);
    const to = Math.floor(y.length * 0.9);
    for (let i = from; i < to; i++) {
      re += y[i]! * Math.cos((2 * Math.PI * 5000 * i) / 16_000);
      im += y[i]! * Math.sin((2 * Math.PI * 5000 * i) / 16_000);
    }
    const imageAmplitude = (2 * Math.hypot(re, im)) / (to - from);
    expect(20 * Math.log10(imageAmplitude)).toBeLessThan(-60);
  });

  it.each([
    [48_000, 16_000],
    [44_100, 16_000],
    [22_050, 16_000],
    [8000, 16_000],
    [16_000, 8000],
    [44_101, 16_000],
  ])('%i → %i: no delay, no drift, DC gain 1', (from, to) => {
    // A 300 Hz sine must come out as the same sine sampled at the output instants.
    const y = resample(tone(300, from, 0.5, 0.3), from, to);
    expect(y.length).toBe(Math.ceil((Math.round(from * 0.5) * to) / from));
    let worst = 0;
    for (let i = Math.floor(y.length * 0.1); i < y.length * 0.9; i++) {
      worst = Math.max(worst, Math.abs(y[i]! - Math.sin((2 * Math.PI * 300 * i) / to + 0.3)));
    }
    expect(worst).toBeLessThan(1e-3);
    const dc = resample(new Float32Array(from / 10).fill(0.25), from, to);
    expect(Math.abs(dc[Math.floor(dc.length / 2)]! - 0.25)).toBeLessThan(1e-4);
  });
});

describe('resample: API', () => {
  it('returns the input itself when the rates are equal', () => {
    const x = tone(440, 16_000, 0.1);
    expect(resample(x, 16_000, 16_000)).toBe(x);
  });

  it('output length is ⌈n · to / from⌉', () => {
    expect(Resampler.outputLength(8000, 48_000, 16_000)).toBe(2667);
    expect(Resampler.outputLength(44_100, 44_100, 16_000)).toBe(16_000);
    expect(Resampler.outputLength(1, 44_100, 16_000)).toBe(1);
    expect(Resampler.outputLength(0, 44_100, 16_000)).toBe(0);
    expect(resample(new Float32Array(8000), 48_000, 16_000).length).toBe(2667);
    expect(resample(new Float32Array(0), 48_000, 16_000).length).toBe(0);
  });

  it('rejects rates that are not positive integers', () => {
    expect(() => resample(new Float32Array(10), 0, 16_000)).toThrow(RangeError);
    expect(() => resample(new Float32Array(10), 44_100.5, 16_000)).toThrow(RangeError);
    expect(() => new Resampler(48_000, -1)).toThrow(RangeError);
  });

  it.each([
    [48_000, 16_000],
    [44_100, 16_000],
    [8000, 16_000],
    [44_101, 16_000],
  ])('%i → %i streamed in uneven chunks equals the one-shot result', (from, to) => {
    let seed = 7;
    const x = new Float32Array(Math.round(from * 0.3)).map(() => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1);
    const whole = resample(x, from, to);
    const resampler = new Resampler(from, to);
    const parts: Float32Array[] = [];
    const sizes = [1, 5, 997, 2, 4096, 13, 20_000];
    for (let at = 0, i = 0; at < x.length; i++) {
      const size = sizes[i % sizes.length]!;
      parts.push(resampler.process(x.subarray(at, at + size)));
      at += size;
    }
    parts.push(resampler.flush());
    const streamed = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
    parts.reduce((at, p) => (streamed.set(p, at), at + p.length), 0);
    expect(streamed.length).toBe(whole.length);
    expect(streamed.every((v, i) => v === whole[i])).toBe(true);
    expect(() => resampler.process(x)).toThrow(/flushed/);
  });
});

describe('pcm16ToFloat32', () => {
  const samples = [0, 1, -1, 32767, -32768, 12345, -54];
  const bytes = new Uint8Array(new Int16Array(samples).buffer);
  const expected = samples.map((s) => s / 32768);

  it('converts little-endian PCM16 to [-1, 1)', () => {
    expect(Array.from(pcm16ToFloat32(bytes))).toEqual(expected);
  });

  it('reads a view at an odd byte offset without throwing', () => {
    const host = new Uint8Array(bytes.length + 3);
    host.set(bytes, 1);
    expect(Array.from(pcm16ToFloat32(host.subarray(1, 1 + bytes.length)))).toEqual(expected);
    const pooled = Buffer.concat([Buffer.from([9]), Buffer.from(bytes)]).subarray(1);
    expect(Array.from(pcm16ToFloat32(pooled))).toEqual(expected);
  });

  it('ignores a trailing odd byte, and an empty input gives no samples', () => {
    const odd = new Uint8Array(bytes.length + 1);
    odd.set(bytes);
    expect(Array.from(pcm16ToFloat32(odd))).toEqual(expected);
    expect(pcm16ToFloat32(new Uint8Array(0)).length).toBe(0);
    expect(pcm16ToFloat32(new Uint8Array([0x34])).length).toBe(0);
  });

  it('reads an aligned view in place (no copy of the input is kept)', () => {
    const host = new Uint8Array(bytes.length + 4);
    host.set(bytes, 2);
    const out = pcm16ToFloat32(host.subarray(2, 2 + bytes.length));
    expect(Array.from(out)).toEqual(expected);
    expect(out.buffer).not.toBe(host.buffer);
  });
});
