import { describe, expect, it } from 'vitest';
import { InputAudio } from '../../src/realtime/input-audio.js';

/**
 * Where a realtime session places the end of the user's speech on its own
 * clock (the start of the voice-latency metric): by when the audio after it
 * arrived, as a client streaming from a microphone sends it.
 */

const CHUNK = 320; // 20 ms at 16 kHz
const noTurns = { speechStarted() {}, speechStopped() {}, failed() {} };

/** A buffer without turn detection, fed ten 20 ms chunks: chunk k (ms 20k to 20k + 20) arrives at 1000 + 20(k + 1) ms, plus `late[k]`. */
function streamed(late: Record<number, number> = {}): InputAudio {
  const input = new InputAudio(null, undefined, noTurns, new AbortController().signal);
  for (let k = 0; k < 10; k++) input.append(new Float32Array(CHUNK), 1000 + 20 * (k + 1) + (late[k] ?? 0));
  return input;
}

describe('InputAudio.arrivalOf', () => {
  it('places audio by the arrival of the chunk that carried it, less the audio after it in that chunk', () => {
    expect(streamed().arrivalOf(50)).toBeCloseTo(1050, 6);
    expect(streamed().arrivalOf(60)).toBeCloseTo(1060, 6);
  });

  it('is not moved by a chunk the server took in late: the chunks after it place the audio', () => {
    // The chunk with ms 50 in it (40–60) and the one after it arrive 50 and 30 ms late; the later ones on time.
    expect(streamed({ 2: 50, 3: 30 }).arrivalOf(50)).toBeCloseTo(1050, 6);
  });

  it('takes the latest audio as arriving now when nothing arrived after the time asked', () => {
    const input = streamed();
    const before = performance.now();
    const at = input.arrivalOf(input.endMs + 100);
    expect(at).toBeGreaterThanOrEqual(before);
    expect(at).toBeLessThanOrEqual(performance.now());
  });
});
