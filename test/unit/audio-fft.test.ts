import { describe, expect, it } from 'vitest';
import { Fft, RealFft } from '../../src/audio/fft.js';

/** The mixed-radix FFT and the real-input FFT against a direct DFT, for Whisper's 400 points and other sizes. */

function dft(re: Float64Array, im: Float64Array): [Float64Array, Float64Array] {
  const n = re.length;
  const outRe = new Float64Array(n);
  const outIm = new Float64Array(n);
  for (let k = 0; k < n; k++) {
    for (let t = 0; t < n; t++) {
      const a = (-2 * Math.PI * k * t) / n;
      outRe[k] += re[t]! * Math.cos(a) - im[t]! * Math.sin(a);
      outIm[k] += re[t]! * Math.sin(a) + im[t]! * Math.cos(a);
    }
  }
  return [outRe, outIm];
}

describe('Fft', () => {
  it.each([1, 2, 3, 5, 8, 12, 30, 200, 400, 512, 490, 1000])('matches a direct DFT at size %i', (n) => {
    const random = noise(n);
    const re = Float64Array.from({ length: n }, random);
    const im = Float64Array.from({ length: n }, random);
    const [expectRe, expectIm] = dft(re, im);
    new Fft(n).transform(re, im);
    for (let k = 0; k < n; k++) {
      expect(re[k]).toBeCloseTo(expectRe[k]!, 9);
      expect(im[k]).toBeCloseTo(expectIm[k]!, 9);
    }
  });

  it('refuses sizes with a large prime factor', () => {
    expect(() => new Fft(22)).toThrow(/prime factor/);
  });
});

describe('RealFft', () => {
  it.each([2, 4, 10, 400, 512, 980])('gives bins 0 … N/2 of a direct DFT of real input at size %i', (n) => {
    const random = noise(n + 1);
    const signal = Float64Array.from({ length: n }, random);
    const [expectRe, expectIm] = dft(signal, new Float64Array(n));
    const re = new Float64Array(n / 2 + 1);
    const im = new Float64Array(n / 2 + 1);
    new RealFft(n).load(signal).spectrum(re, im);
    for (let k = 0; k <= n / 2; k++) {
      expect(re[k], `re ${k}`).toBeCloseTo(expectRe[k]!, 9);
      expect(im[k], `im ${k}`).toBeCloseTo(expectIm[k]!, 9);
    }
  });

  it('refuses odd sizes', () => {
    expect(() => new RealFft(401)).toThrow(/even/);
  });
});

/** Deterministic uniform values in [-1, 1). */
function noise(seed: number): () => number {
  return () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1;
}
