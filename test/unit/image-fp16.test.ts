import { describe, expect, it } from 'vitest';
import { floatsToHalves, fromHalf, halvesToFloats, toHalf } from '../../src/runtimes/onnx/float16.js';

describe('float16', () => {
  it('encodes known values exactly', () => {
    const cases: Array<[number, number]> = [
      [0, 0x0000],
      [-0, 0x8000],
      [1, 0x3c00],
      [-2, 0xc000],
      [0.5, 0x3800],
      [65504, 0x7bff],
      [2 ** -24, 0x0001],
      [2 ** -14, 0x0400],
      [Infinity, 0x7c00],
      [-Infinity, 0xfc00],
    ];
    for (const [value, bits] of cases) {
      expect(toHalf(value), String(value)).toBe(bits);
      expect(Object.is(fromHalf(bits), value), String(value)).toBe(true);
    }
  });

  it('rounds to nearest even, overflows to infinity and keeps NaN', () => {
    expect(toHalf(1 + 2 ** -11)).toBe(0x3c00); // halfway: ties to even
    expect(toHalf(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(toHalf(65520)).toBe(0x7c00);
    expect(Number.isNaN(fromHalf(toHalf(NaN)))).toBe(true);
    expect(toHalf(2 ** -26)).toBe(0); // below half the smallest subnormal
  });

  it('round-trips every finite half through float32', () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i).filter((h) => (h & 0x7c00) !== 0x7c00);
    expect([...floatsToHalves(halvesToFloats(all))]).toEqual([...all]);
  });
});
