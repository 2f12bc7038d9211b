import { describe, expect, it } from 'vitest';
import { alphaMask, composite, featherMask, latentMask, repaintMask } from '../../src/image/mask.js';
import { gaussianNoise, seedOf } from '../../src/families/stable-diffusion/noise.js';
import type { RgbaImage } from '../../src/image/rgba.js';

function rgba(width: number, height: number, pixel: (x: number, y: number) => [number, number, number, number], hasAlpha = true): RgbaImage {
  const data = new Uint8Array(width * height * 4);
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) data.set(pixel(x, y), (y * width + x) * 4);
  return { data, width, height, hasAlpha };
}

describe('masks', () => {
  it('reads transparency as repaint (OpenAI), and white as repaint in a mask without alpha', () => {
    const alpha = rgba(2, 1, (x) => [255, 255, 255, x === 0 ? 0 : 255]);
    expect([...repaintMask(alpha)]).toEqual([1, 0]);
    const white = rgba(3, 1, (x) => (x === 0 ? [255, 255, 255, 255] : x === 1 ? [0, 0, 0, 255] : [128, 128, 128, 255]), false);
    const mask = repaintMask(white);
    expect([mask[0], mask[1]]).toEqual([1, 0]);
    expect(mask[2]).toBeCloseTo(128 / 255, 5);
  });

  it("takes an image's own transparency as its mask, and none when it is opaque", () => {
    expect(alphaMask(rgba(2, 2, () => [1, 2, 3, 255]))).toBeUndefined();
    expect(alphaMask(rgba(2, 2, () => [1, 2, 3, 255], false))).toBeUndefined();
    expect([...alphaMask(rgba(2, 1, (x) => [1, 2, 3, x ? 255 : 0]))!]).toEqual([1, 0]);
  });

  it('marks a latent cell for repainting when any of its pixels is', () => {
    const mask = new Float32Array(16 * 8);
    mask[3 * 16 + 9] = 1; // one pixel in cell (1, 0)
    expect([...latentMask(mask, 16, 8, 8)]).toEqual([0, 1]);
  });

  it('feathers inside the mask only: weight 0 wherever the mask is 0, 1 deep inside', () => {
    const width = 40;
    const mask = new Float32Array(width * width);
    for (let y = 10; y < 30; y++) for (let x = 10; x < 30; x++) mask[y * width + x] = 1;
    const weight = featherMask(mask, width, width, 3);
    for (let i = 0; i < mask.length; i++) if (mask[i] === 0) expect(weight[i]).toBe(0);
    expect(weight[20 * width + 20]).toBeCloseTo(1, 6);
    expect(weight[10 * width + 20]).toBeGreaterThan(0);
    expect(weight[10 * width + 20]).toBeLessThan(0.8);
  });

  it('composites: weight 0 copies the original exactly, 1 takes the generated pixel, between blends', () => {
    const original = Uint8Array.from([10, 20, 30, 10, 20, 30, 100, 100, 100]);
    const generated = Uint8Array.from([200, 200, 200, 200, 200, 200, 0, 0, 0]);
    expect([...composite(original, generated, Float32Array.from([0, 1, 0.5]))]).toEqual([10, 20, 30, 200, 200, 200, 50, 50, 50]);
  });
});

describe('noise', () => {
  it('is the same for a seed, different across seeds, and standard normal', () => {
    const a = gaussianNoise(42, 4 * 64 * 64);
    expect(Buffer.from(a.buffer).equals(Buffer.from(gaussianNoise(42, 4 * 64 * 64).buffer))).toBe(true);
    expect(Buffer.from(a.buffer).equals(Buffer.from(gaussianNoise(43, 4 * 64 * 64).buffer))).toBe(false);
    const mean = a.reduce((s, v) => s + v, 0) / a.length;
    const variance = a.reduce((s, v) => s + (v - mean) ** 2, 0) / a.length;
    expect(Math.abs(mean)).toBeLessThan(0.05);
    expect(variance).toBeGreaterThan(0.95);
    expect(variance).toBeLessThan(1.05);
    expect(seedOf(0xffffffff, 1)).toBe(0);
  });
});
