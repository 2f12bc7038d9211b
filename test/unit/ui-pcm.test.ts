import { describe, expect, it } from 'vitest';
import { base64ToBytes, bytesToBase64, pcm16ToFloat32, PlaybackSchedule, SampleJoiner } from '../../src/ui/pcm.js';

/**
 * The playground's PCM helpers (src/ui/pcm.ts), without a browser: base64,
 * PCM16 to floats, a byte stream cut into whole samples, and where streamed
 * audio is scheduled and how much of an item an interruption heard.
 */

/** Deterministic bytes: every value 0–255 occurs. */
const bytes = (n: number, seed = 1) => Uint8Array.from({ length: n }, (_, i) => (i * 131 + seed * 17) & 0xff);

describe('base64', () => {
  it('round-trips bytes of any length, as Node encodes them (also past the slice size used for btoa)', () => {
    for (const n of [0, 1, 2, 3, 4800, 0x8000, 0x8000 * 2 + 7]) {
      const data = bytes(n);
      const encoded = bytesToBase64(data);
      expect(encoded).toBe(Buffer.from(data).toString('base64'));
      expect(base64ToBytes(encoded)).toEqual(data);
    }
  });
});

describe('pcm16ToFloat32', () => {
  it('reads little-endian samples as value / 32768, from any offset in a buffer', () => {
    const samples = Int16Array.from([0, 1, -1, 32767, -32768, 12345]);
    const raw = new Uint8Array(samples.buffer);
    expect([...pcm16ToFloat32(raw)]).toEqual([...samples].map((s) => s / 32768));
    // Byte order is little-endian whatever the machine: 0x0102 is [0x02, 0x01].
    expect(pcm16ToFloat32(Uint8Array.from([0x02, 0x01]))[0]).toBe(0x0102 / 32768);
    // A view one byte into a larger buffer (base64-decoded or sliced input need not be aligned).
    const shifted = new Uint8Array(raw.length + 1);
    shifted.set(raw, 1);
    expect([...pcm16ToFloat32(shifted.subarray(1))]).toEqual([...samples].map((s) => s / 32768));
  });
});

describe('SampleJoiner', () => {
  it('gives back the stream as whole samples however it was cut, holding a half sample for the next piece', () => {
    const stream = bytes(1001, 3);
    for (const cuts of [[1, 2, 3], [7, 7, 7, 1, 999], [1000], [333, 1, 1, 1, 1, 664]]) {
      const joiner = new SampleJoiner();
      const out: number[] = [];
      let at = 0;
      for (const size of [...cuts, stream.length]) {
        const piece = joiner.push(stream.subarray(at, Math.min(at + size, stream.length)));
        expect(piece.length % 2).toBe(0);
        out.push(...piece);
        at = Math.min(at + size, stream.length);
      }
      // 1001 bytes: 500 whole samples, the last byte still waiting.
      expect(out).toEqual([...stream.subarray(0, 1000)]);
    }
  });
});

describe('PlaybackSchedule', () => {
  it('schedules pieces back to back as they arrive, the first and any after a gap a lead from now', () => {
    const schedule = new PlaybackSchedule(0.05);
    expect(schedule.playing(0)).toBe(false);
    expect(schedule.add(0.2, 1.0, 'a')).toBeCloseTo(1.05);
    // Arrives while the first plays: right after it, not at its own arrival time.
    expect(schedule.add(0.2, 1.1, 'a')).toBeCloseTo(1.25);
    expect(schedule.add(0.3, 1.12, 'a')).toBeCloseTo(1.45);
    expect(schedule.playing(1.74)).toBe(true);
    expect(schedule.playing(1.76)).toBe(false);
    // Arrives after everything played (the model paused between sentences): a fresh lead, not in the past.
    expect(schedule.add(0.1, 3, 'a')).toBeCloseTo(3.05);
  });

  it('tells how much of each item was heard, and which one plays now', () => {
    const schedule = new PlaybackSchedule(0);
    schedule.add(0.5, 0, 'first');
    schedule.add(0.5, 0.1, 'first');
    schedule.add(0.4, 0.2, 'second');
    schedule.add(0.4, 0.3, 'second');
    expect(schedule.current(0.2)).toBe('first');
    expect(schedule.played(0.7, 'first')).toBeCloseTo(0.7);
    expect(schedule.played(0.7, 'second')).toBe(0);
    expect(schedule.current(1.3)).toBe('second');
    expect(schedule.played(1.3, 'first')).toBeCloseTo(1.0);
    expect(schedule.played(1.3, 'second')).toBeCloseTo(0.3);
    expect(schedule.played(1.3)).toBeCloseTo(1.3);
    expect(schedule.current(1.8)).toBeUndefined();
    expect(schedule.played(5, 'second')).toBeCloseTo(0.8);
  });

  it('keeps its totals exact when played pieces are folded away in a long stream', () => {
    const schedule = new PlaybackSchedule(0);
    // 10 minutes of 200 ms pieces, each arriving 100 ms before it is due.
    let now = 0;
    for (let i = 0; i < 3000; i++) {
      schedule.add(0.2, now, i < 1500 ? 'one' : 'two');
      now = (i + 1) * 0.2 - 0.1;
      if (i === 1499) {
        expect(schedule.played(now, 'one')).toBeCloseTo(299.9, 6);
        expect(schedule.played(now, 'two')).toBe(0);
      }
    }
    expect(schedule.played(now, 'one')).toBeCloseTo(300, 6);
    expect(schedule.played(now, 'two')).toBeCloseTo(299.9, 6);
    expect(schedule.current(now)).toBe('two');
    expect(schedule.played(now + 1)).toBeCloseTo(600, 6);
  });

  it('a barge-in: clear forgets what was still to play, and the next answer starts afresh', () => {
    const schedule = new PlaybackSchedule(0.05);
    for (let i = 0; i < 5; i++) schedule.add(0.2, 1 + i * 0.01, 'answer');
    // The user speaks 0.42 s into the answer's audio.
    const now = 1.05 + 0.42;
    expect(schedule.current(now)).toBe('answer');
    expect(schedule.played(now, 'answer')).toBeCloseTo(0.42);
    schedule.clear();
    expect(schedule.playing(now)).toBe(false);
    expect(schedule.current(now)).toBeUndefined();
    expect(schedule.played(now, 'answer')).toBe(0);
    expect(schedule.add(0.2, now, 'next')).toBeCloseTo(now + 0.05);
  });
});
