import { Fft } from '../../src/audio/fft.js';

/** Frequency of the strongest peak in the middle 8192 samples of `x` (Hann window, FFT, parabolic interpolation). */
export function peakHz(x: Float32Array, rate: number): number {
  const n = 8192;
  const start = Math.floor((x.length - n) / 2);
  if (start < 0) throw new Error(`peakHz needs at least ${n} samples, got ${x.length}`);
  const re = new Float64Array(n);
  const im = new Float64Array(n);
  for (let i = 0; i < n; i++) re[i] = x[start + i]! * (0.5 - 0.5 * Math.cos((2 * Math.PI * i) / n));
  new Fft(n).transform(re, im);
  const mag = (k: number) => Math.log(Math.hypot(re[k]!, im[k]!) + 1e-12);
  let best = 1;
  for (let k = 2; k < n / 2 - 1; k++) if (mag(k) > mag(best)) best = k;
  const [a, b, c] = [mag(best - 1), mag(best), mag(best + 1)];
  return ((best + (0.5 * (a - c)) / (a - 2 * b + c)) * rate) / n;
}
