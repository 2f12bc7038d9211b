import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { LogMel, WHISPER_MEL } from '../../src/audio/mel.js';

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
});
