import { describe, expect, it } from 'vitest';
import { alphaMask, binarizeMask, composite, edgeFeather, latentMask, maskedPixels, pasteWeight, repaintMask } from '../../src/image/mask.js';
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
    // Barely transparent (alpha 200) is not transparent enough to repaint.
    expect(alphaMask(rgba(2, 2, () => [1, 2, 3, 200]))).toBeUndefined();
  });

  it('binarises at 50% as diffusers does: alpha below 128, or luminance from 50%, repaints', () => {
    const alpha = rgba(4, 1, (x) => [0, 0, 0, [0, 127, 128, 255][x]!]);
    expect([...binarizeMask(repaintMask(alpha))]).toEqual([1, 1, 0, 0]);
    const grey = rgba(4, 1, (x) => { const v = [0, 127, 128, 255][x]!; return [v, v, v, 255]; }, false);
    expect([...binarizeMask(repaintMask(grey))]).toEqual([0, 0, 1, 1]);
    expect(maskedPixels(binarizeMask(repaintMask(rgba(3, 3, () => [0, 0, 0, 255], false))))).toBe(0);
  });

  it('marks a latent cell for repainting when any of its pixels is', () => {
    const mask = new Float32Array(16 * 8);
    mask[3 * 16 + 9] = 1; // one pixel in cell (1, 0)
    expect([...latentMask(mask, 16, 8, 8)]).toEqual([0, 1]);
  });

  it('pastes with weight 0 outside the mask and 1 inside, but for a narrow ramp just inside its edge', () => {
    expect([edgeFeather(64, 64), edgeFeather(512, 512), edgeFeather(768, 512), edgeFeather(768, 768)]).toEqual([1, 3, 3, 4]);
    const width = 40;
    const mask = new Float32Array(width * width);
    for (let y = 10; y < 30; y++) for (let x = 10; x < 30; x++) mask[y * width + x] = 1;
    const weight = pasteWeight(mask, width, width, 3);
    for (let i = 0; i < mask.length; i++) if (mask[i] === 0) expect(weight[i]).toBe(0);
    // Along a row through the middle: 1/4, 2/4, 3/4 over the first three pixels inside, then 1.
    expect([...weight.subarray(20 * width + 10, 20 * width + 16)]).toEqual([0.25, 0.5, 0.75, 1, 1, 1]);
    expect(weight[20 * width + 29]).toBe(0.25);
    // Everything more than the feather from the edge is wholly the new pixel: a 24-pixel hole is mostly new content.
    let full = 0;
    for (let i = 0; i < mask.length; i++) if (weight[i] === 1) full++;
    expect(full).toBe(14 * 14);
    // A mask touching the image border has no ramp there: the border is no kept pixel.
    const edge = new Float32Array(8 * 8).fill(1);
    expect([...pasteWeight(edge, 8, 8, 3)].every((v) => v === 1)).toBe(true);
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
