import { describe, expect, it } from 'vitest';
import { createStretcher, stretch, stretchedLength } from '../../src/audio/stretch.js';
import { concatFloats } from '../../src/runtimes/onnx/float-io.js';
import { peakHz } from '../helpers/signal.js';

/**
 * WSOLA time stretching: duration scales by 1/speed, pitch stays, events
 * land at t/speed, no clicks, and a stream pushed in any block sizes gives
 * the same samples as one push.
 */

const RATE = 24_000;

function tone(hz: number, seconds: number, amplitude = 0.5): Float32Array {
  const x = new Float32Array(Math.round(RATE * seconds));
  for (let i = 0; i < x.length; i++) x[i] = amplitude * Math.sin((2 * Math.PI * hz * i) / RATE);
  return x;
}

/** Voiced-speech-like: 20 harmonics of a gliding 90–170 Hz pitch, syllable-rate envelope, a little noise. */
function speechLike(seconds: number): Float32Array {
  const x = new Float32Array(Math.round(RATE * seconds));
  let phase = 0;
  let seed = 5;
  for (let i = 0; i < x.length; i++) {
    const t = i / RATE;
    const f0 = 130 + 40 * Math.sin(2 * Math.PI * 0.7 * t);
    phase += (2 * Math.PI * f0) / RATE;
    let v = 0;
    for (let h = 1; h <= 20; h++) v += Math.sin(h * phase) / h;
    seed = (seed * 1103515245 + 12345) >>> 0;
    x[i] = 0.25 * Math.max(0, Math.sin(2 * Math.PI * 3 * t)) * v + 0.01 * (seed / 2 ** 32 - 0.5);
  }
  return x;
}

function maxJump(x: Float32Array): number {
  let jump = 0;
  for (let i = 1; i < x.length; i++) jump = Math.max(jump, Math.abs(x[i]! - x[i - 1]!));
  return jump;
}

function pushAll(x: Float32Array, speed: number, block: number): Float32Array {
  const stretcher = createStretcher(RATE, speed);
  const parts: Float32Array[] = [];
  for (let i = 0; i < x.length; i += block) parts.push(stretcher.push(x.subarray(i, i + block)));
  parts.push(stretcher.flush());
  return concatFloats(parts);
}

const SPEEDS = [0.25, 0.5, 1.5, 2, 4];

describe('stretch', () => {
  it.each(SPEEDS)('speed %f: a 440 Hz tone keeps its pitch and lasts length / speed', (speed) => {
    const x = tone(440, 2);
    const y = stretch(x, RATE, speed);
    expect(Math.abs(y.length - x.length / speed)).toBeLessThanOrEqual(0.02 * (x.length / speed));
    expect(y.length).toBe(stretchedLength(x.length, speed));
    expect(Math.abs(peakHz(y, RATE) - 440)).toBeLessThan(440 * 0.005);
  });

  it.each(SPEEDS)('speed %f: a change at 1 s in the input comes at 1 s / speed in the output', (speed) => {
    // A 440 Hz tone that steps from 0.1 to 0.5 at 1 s; found in the output by its envelope crossing 0.3.
    const x = tone(440, 2);
    for (let i = 0; i < RATE; i++) x[i]! *= 0.2;
    const y = stretch(x, RATE, speed);
    let onset = -1;
    for (let i = 0, peak = 0; i < y.length && onset < 0; i++) {
      peak = Math.max(peak * 0.999, Math.abs(y[i]!)); // decays over a few periods
      if (peak > 0.3) onset = i;
    }
    // Within 2 %, or 45 ms at high speeds: a frame may be taken 12.5 ms from its nominal place, and a change
    // shows anywhere within the 30 ms frame that first holds it.
    expect(Math.abs(onset / RATE - 1 / speed)).toBeLessThan(Math.max(0.02 / speed, 0.045));
  });

  it.each(SPEEDS)('speed %f: no clicks — no sample-to-sample step beyond the input’s', (speed) => {
    for (const x of [tone(440, 1.5), speechLike(2)]) {
      // Crossfading two in-phase pieces can add at most a hair (window slope × their difference).
      expect(maxJump(stretch(x, RATE, speed))).toBeLessThanOrEqual(maxJump(x) * 1.05);
    }
  });

  it.each(SPEEDS)('speed %f: pushed in blocks of 1, 777 and 1920 samples, the same output as one push', (speed) => {
    const x = speechLike(1.2);
    const whole = stretch(x, RATE, speed);
    for (const block of [1, 777, 1920]) expect(pushAll(x, speed, block)).toEqual(whole);
  });

  it('a stream gives output before it ends, a frame or so behind the input', () => {
    const stretcher = createStretcher(RATE, 1.5);
    let out = 0;
    const block = 1920;
    for (let i = 0; i < 10; i++) out += stretcher.push(tone(440, block / RATE)).length;
    // 10 blocks in (0.8 s): all of its output but ≈ 75 ms has left.
    expect(out).toBeGreaterThan((10 * block) / 1.5 - 0.075 * RATE);
    expect(out + stretcher.flush().length).toBe(stretchedLength(10 * block, 1.5));
  });

  it('speed 1 returns the input itself', () => {
    const x = speechLike(0.5);
    const stretcher = createStretcher(RATE, 1);
    expect(stretcher.push(x)).toBe(x);
    expect(stretcher.flush()).toHaveLength(0);
    expect(stretch(x, RATE, 1)).toBe(x);
  });

  it('short and empty inputs', () => {
    expect(stretch(new Float32Array(0), RATE, 2)).toHaveLength(0);
    const y = stretch(tone(440, 0.01), RATE, 0.5); // shorter than one frame
    expect(y).toHaveLength(480);
    expect(y.every(Number.isFinite)).toBe(true);
  });

  it('rejects a speed outside 0.25–4 and a bad sample rate', () => {
    for (const speed of [0, 0.2, 4.5, Number.NaN, Infinity]) expect(() => createStretcher(RATE, speed)).toThrow(RangeError);
    expect(() => createStretcher(0, 2)).toThrow(RangeError);
    const stretcher = createStretcher(RATE, 2);
    stretcher.flush();
    expect(() => stretcher.push(new Float32Array(10))).toThrow(/flushed/);
  });
});
