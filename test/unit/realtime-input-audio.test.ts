import { describe, expect, it } from 'vitest';
import type { TurnDetection } from '../../src/api/realtime/types.js';
import type { VoiceActivityStream } from '../../src/core/voice-activity.js';
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

/** A stand-in for Silero: 512-sample windows, speech (1) where a window's mean level is above 0.1, buffering the rest as VadStream does. */
class LevelVad implements VoiceActivityStream {
  readonly sampleRate = 16_000;
  readonly windowSamples = 512;
  private pending: number[] = [];
  get buffered(): number {
    return this.pending.length;
  }
  push(samples: Float32Array): Promise<Float32Array> {
    this.pending.push(...samples);
    const out: number[] = [];
    while (this.pending.length >= 512) {
      const window = this.pending.splice(0, 512);
      out.push(window.reduce((sum, x) => sum + Math.abs(x), 0) / 512 > 0.1 ? 1 : 0);
    }
    return Promise.resolve(Float32Array.from(out));
  }
  close(): void {}
}

describe('InputAudio turn detection', () => {
  const detection: TurnDetection = { type: 'server_vad', threshold: 0.5, prefixPaddingMs: 0, silenceDurationMs: 500, createResponse: true, interruptResponse: true, idleTimeoutMs: null };

  it('places the end of speech at the first silent window of the stream, also when turn detection changed mid-window', async () => {
    const ends: number[] = [];
    const input = new InputAudio(detection, new LevelVad(), { ...noTurns, speechStopped: (endMs) => ends.push(endMs) }, new AbortController().signal);
    // 100 ms of silence (1600 samples: three windows and 64 samples toward the fourth), then the client changes the silence.
    for (let k = 0; k < 5; k++) input.append(new Float32Array(CHUNK), 0);
    input.configure({ ...detection, silenceDurationMs: 400 });
    // Speech from 300 ms to 1000 ms (sample 16 000, inside window 31: 992–1024 ms), then silence.
    for (let k = 5; k < 100; k++) input.append(new Float32Array(CHUNK).fill(k >= 15 && k < 50 ? 0.5 : 0), 0);
    await new Promise((resolve) => setTimeout(resolve, 10));
    // Window 32 (1024 ms on) is the first without speech: the end, on the session's timeline (not 4 ms later, where the
    // detector's windows would fall if they started at the change rather than where the stream's next window began).
    expect(ends).toEqual([1024]);
  });
});
