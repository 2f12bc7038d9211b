import { setImmediate as setImmediatePromise } from 'node:timers/promises';
import { Fft } from './fft.js';

/** Frames computed between yields to the event loop (~15 ms of work). */
const FRAMES_PER_SLICE = 300;

/**
 * Whisper's log-mel spectrogram, as openai/whisper's audio.py and Hugging
 * Face's WhisperFeatureExtractor compute it: the window zero-padded to 30 s,
 * a centred STFT (reflect padding, periodic Hann, n_fft 400, hop 160, the
 * last frame dropped: 3000 frames), power spectrum, Slaney-normalised mel
 * filters from 0 to 8 kHz (librosa's defaults), log10, clamped to 8 below
 * the maximum, then (x + 4) / 4.
 */

export interface MelOptions {
  sampleRate: number;
  nFft: number;
  hop: number;
  nMels: number;
  /** Samples in one window (30 s at 16 kHz). */
  windowSamples: number;
}

export const WHISPER_MEL: MelOptions = { sampleRate: 16_000, nFft: 400, hop: 160, nMels: 80, windowSamples: 480_000 };

/** One mel band: the FFT bins it reads and their weights. */
interface Band {
  first: number;
  weights: Float32Array;
}

export class LogMel {
  readonly frames: number;
  private readonly fft: Fft;
  private readonly window: Float64Array;
  private readonly bands: Band[];
  private readonly re: Float64Array;
  private readonly im: Float64Array;
  private readonly power: Float64Array;

  constructor(readonly options: MelOptions = WHISPER_MEL) {
    const { nFft, hop, windowSamples } = options;
    this.frames = windowSamples / hop;
    this.fft = new Fft(nFft);
    this.window = Float64Array.from({ length: nFft }, (_, n) => 0.5 - 0.5 * Math.cos((2 * Math.PI * n) / nFft));
    this.bands = melFilters(options);
    this.re = new Float64Array(nFft);
    this.im = new Float64Array(nFft);
    this.power = new Float64Array(nFft / 2 + 1);
  }

  /**
   * Features of `samples[offset, offset + length)` (at most one window; the
   * rest is silence) as `[nMels, frames]`, row-major: the encoder's
   * `input_features` for one item. Yields to the event loop every
   * FRAMES_PER_SLICE frames: a whole window costs ~150 ms of CPU.
   */
  async compute(samples: Float32Array, offset = 0, length = Math.min(samples.length - offset, this.options.windowSamples)): Promise<Float32Array> {
    const { nFft, hop, nMels, windowSamples } = this.options;
    const half = nFft / 2;
    // Past the end of `samples` is silence too (a window may end mid-frame).
    const end = Math.min(samples.length, offset + Math.min(length, windowSamples));
    // Sample i of the padded window; the centred STFT reflects at both edges of the 30 s window.
    const at = (i: number): number => {
      let j = i < 0 ? -i : i >= windowSamples ? 2 * (windowSamples - 1) - i : i;
      j += offset;
      return j < end ? samples[j]! : 0;
    };
    const out = new Float32Array(nMels * this.frames);
    const { re, im, power, window } = this;
    let max = -Infinity;
    const silent = Math.log10(1e-10);
    for (let t = 0; t < this.frames; t++) {
      if (t % FRAMES_PER_SLICE === FRAMES_PER_SLICE - 1) await setImmediatePromise();
      const start = t * hop - half;
      if (offset + start >= end && start + nFft <= windowSamples) {
        // Past the end of the audio, inside the zero padding: no energy.
        for (let m = 0; m < nMels; m++) out[m * this.frames + t] = silent;
        max = Math.max(max, silent);
        continue;
      }
      const interior = start >= 0 && start + nFft <= windowSamples;
      for (let n = 0; n < nFft; n++) {
        const j = offset + start + n;
        re[n] = (interior ? (j < end ? samples[j]! : 0) : at(start + n)) * window[n]!;
        im[n] = 0;
      }
      this.fft.transform(re, im);
      for (let k = 0; k <= half; k++) power[k] = re[k]! * re[k]! + im[k]! * im[k]!;
      for (let m = 0; m < nMels; m++) {
        const band = this.bands[m]!;
        let sum = 0;
        for (let k = 0; k < band.weights.length; k++) sum += band.weights[k]! * power[band.first + k]!;
        const value = Math.log10(Math.max(sum, 1e-10));
        out[m * this.frames + t] = value;
        if (value > max) max = value;
      }
    }
    const floor = max - 8;
    for (let i = 0; i < out.length; i++) out[i] = (Math.max(out[i]!, floor) + 4) / 4;
    return out;
  }
}

/** librosa.filters.mel(sr, n_fft, n_mels, fmin=0, fmax=sr/2, htk=False, norm='slaney'), kept sparse. */
export function melFilters(options: MelOptions): Band[] {
  const { sampleRate, nFft, nMels } = options;
  const bins = nFft / 2 + 1;
  const fftFreq = (k: number) => (k * sampleRate) / nFft;
  const low = hzToMel(0);
  const high = hzToMel(sampleRate / 2);
  const melF = Array.from({ length: nMels + 2 }, (_, i) => melToHz(low + ((high - low) * i) / (nMels + 1)));
  const bands: Band[] = [];
  for (let m = 0; m < nMels; m++) {
    const [left, centre, right] = [melF[m]!, melF[m + 1]!, melF[m + 2]!];
    const norm = 2 / (right - left);
    const weights: number[] = [];
    let first = -1;
    for (let k = 0; k < bins; k++) {
      const f = fftFreq(k);
      const w = Math.max(0, Math.min((f - left) / (centre - left), (right - f) / (right - centre))) * norm;
      if (w > 0) {
        if (first < 0) first = k;
        weights.length = k - first;
        weights.push(w);
      }
    }
    bands.push({ first: Math.max(first, 0), weights: Float32Array.from(weights, (w) => w ?? 0) });
  }
  return bands;
}

// Slaney's mel scale: linear below 1 kHz, logarithmic above.
const F_SP = 200 / 3;
const MIN_LOG_HZ = 1000;
const MIN_LOG_MEL = MIN_LOG_HZ / F_SP;
const LOG_STEP = Math.log(6.4) / 27;

function hzToMel(hz: number): number {
  return hz >= MIN_LOG_HZ ? MIN_LOG_MEL + Math.log(hz / MIN_LOG_HZ) / LOG_STEP : hz / F_SP;
}

function melToHz(mel: number): number {
  return mel >= MIN_LOG_MEL ? MIN_LOG_HZ * Math.exp(LOG_STEP * (mel - MIN_LOG_MEL)) : mel * F_SP;
}
