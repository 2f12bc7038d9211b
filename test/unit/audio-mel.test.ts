import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { LogMel, melFilters, WHISPER_MEL } from '../../src/audio/mel.js';

/**
 * Whisper's log-mel features against values computed with numpy following
 * openai/whisper's audio.py and librosa's Slaney filters
 * (test/fixtures/audio/whisper-mel-reference.py), on a chirp plus tones.
 */

const reference = JSON.parse(readFileSync(new URL('../fixtures/audio/whisper-mel-reference.json', import.meta.url), 'utf8')) as {
  frames: number[];
  values: number[][];
  shape: [number, number];
};

function signal(): Float32Array {
  const sr = 16_000;
  return Float32Array.from({ length: sr * 2.5 }, (_, i) => {
    const t = i / sr;
    return 0.3 * Math.sin(2 * Math.PI * (200 * t + 600 * t * t)) + 0.2 * Math.sin(2 * Math.PI * 440 * t) + 0.1 * Math.sin(2 * Math.PI * 3000 * t);
  });
}

describe('LogMel (Whisper features)', () => {
  it('matches the reference at the edges, inside the sound, at its end and in the silence', async () => {
    const mel = new LogMel();
    const features = await mel.compute(signal());
    expect([WHISPER_MEL.nMels, mel.frames]).toEqual(reference.shape);
    expect(features.length).toBe(80 * 3000);
    reference.frames.forEach((frame, i) => {
      for (let m = 0; m < 80; m++) expect(features[m * 3000 + frame], `mel ${m} frame ${frame}`).toBeCloseTo(reference.values[i]![m]!, 4);
    });
  });

  it('reads a window at an offset as if the samples before it did not exist', async () => {
    const mel = new LogMel();
    const audio = signal();
    const padded = new Float32Array(audio.length + 16_000);
    padded.set(audio, 16_000);
    expect(await mel.compute(padded, 16_000, audio.length)).toEqual(await mel.compute(audio));
  });

  it('reads a window that runs past the end of the samples as silence there', async () => {
    const mel = new LogMel();
    const audio = signal();
    const features = await mel.compute(audio, 0, audio.length + 159);
    expect(features.every(Number.isFinite)).toBe(true);
    expect(features).toEqual(await mel.compute(audio));
  });

  it('computes 128 bands (large-v3) as a direct DFT and dense filterbank would, at the edges and inside', async () => {
    const options = { ...WHISPER_MEL, nMels: 128 };
    const mel = new LogMel(options);
    const audio = signal();
    const features = await mel.compute(audio);
    const bands = melFilters(options);
    const top = features.reduce((a, b) => Math.max(a, b), -Infinity) * 4 - 4;
    for (const frame of [0, 1, 57, 156, 249, 250, 251, 2999]) {
      // The centred frame, reflected at the window's edges; past the audio, silence.
      const x = Array.from({ length: 400 }, (_, n) => {
        let i = frame * 160 - 200 + n;
        i = i < 0 ? -i : i >= 480_000 ? 2 * 479_999 - i : i;
        return (i < audio.length ? audio[i]! : 0) * (0.5 - 0.5 * Math.cos((2 * Math.PI * n) / 400));
      });
      const power = Array.from({ length: 201 }, (_, k) => {
        let re = 0;
        let im = 0;
        x.forEach((v, n) => {
          re += v * Math.cos((2 * Math.PI * k * n) / 400);
          im -= v * Math.sin((2 * Math.PI * k * n) / 400);
        });
        return re * re + im * im;
      });
      bands.forEach((band, m) => {
        const sum = band.weights.reduce((acc, w, i) => acc + w * power[band.first + i]!, 0);
        const expected = (Math.max(Math.log10(Math.max(sum, 1e-10)), top - 8) + 4) / 4;
        expect(features[m * 3000 + frame], `mel ${m} frame ${frame}`).toBeCloseTo(expected, 4);
      });
    }
  });
});
