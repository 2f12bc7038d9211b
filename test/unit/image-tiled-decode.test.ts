import { describe, expect, it } from 'vitest';
import { blendWeights, checkTiling, decodeTiled, tileOrigins, type DecodeTile } from '../../src/families/stable-diffusion/tiled-decode.js';

/**
 * The arithmetic of tiled VAE decoding (tiled-decode.ts) over stand-in
 * decoders whose output is known: where tiles start, that their blend
 * weights sum to 1 at every pixel, that every pixel is painted, and that
 * tiles that disagree meet in a linear ramp, not a seam.
 */

const F = 4;

/** Latents [C, h, w] whose channel c at cell (y, x) is a value unique to it. */
function latentsOf(channels: number, h: number, w: number): Float32Array {
  return Float32Array.from({ length: channels * h * w }, (_, i) => Math.sin(i * 0.37) + i * 1e-3);
}

/** A decoder that paints channels 0–2 of each latent cell as an F×F block: tiles agree exactly with the whole. */
const blocks: DecodeTile = async (latents, h, w) => {
  const W = w * F;
  const out = new Float32Array(3 * h * F * W);
  for (let c = 0; c < 3; c++) for (let y = 0; y < h * F; y++) for (let x = 0; x < W; x++) out[(c * h * F + y) * W + x] = latents[(c * h + Math.floor(y / F)) * w + Math.floor(x / F)]!;
  return out;
};

const CASES = [
  { size: 8, tile: 8, overlap: 2 },
  { size: 9, tile: 8, overlap: 2 },
  { size: 30, tile: 8, overlap: 3 },
  { size: 96, tile: 64, overlap: 16 },
  { size: 256, tile: 64, overlap: 16 },
  { size: 13, tile: 4, overlap: 3 },
  { size: 20, tile: 6, overlap: 0 },
];

describe('tile origins', () => {
  it('cover the side with the first tile at 0, the last flush with the end, and neighbours sharing at least the overlap', () => {
    for (const { size, tile, overlap } of CASES) {
      const origins = tileOrigins(size, tile, overlap);
      const side = Math.min(size, tile);
      expect(origins[0]).toBe(0);
      expect(origins.at(-1)! + side).toBe(size);
      for (let i = 1; i < origins.length; i++) {
        expect(origins[i]!).toBeGreaterThan(origins[i - 1]!);
        expect(origins[i - 1]! + side - origins[i]!, `${size}/${tile}/${overlap}`).toBeGreaterThanOrEqual(overlap);
      }
      // As few tiles as that allows: one fewer would leave a gap or a narrower overlap.
      const fewer = origins.length - 1;
      if (fewer >= 1) expect(fewer * tile - (fewer - 1) * overlap).toBeLessThan(size);
    }
    expect(tileOrigins(96, 64, 16)).toEqual([0, 32]);
    expect(tileOrigins(64, 64, 16)).toEqual([0]);
    expect(tileOrigins(30, 8, 3)).toEqual([0, 4, 9, 13, 18, 22]);
  });

  it('refuses tilings that cannot cover an image', () => {
    expect(() => checkTiling({ tile: 8, overlap: 8 })).toThrow(/overlap/);
    expect(() => checkTiling({ tile: 0, overlap: 0 })).toThrow(/tile/);
    expect(() => checkTiling({ tile: 8, overlap: -1 })).toThrow(/overlap/);
    expect(() => checkTiling({ tile: 64, overlap: 16 })).not.toThrow();
  });
});

describe('blend weights', () => {
  it('sum to 1 at every pixel of the side and are positive wherever a tile reaches', () => {
    for (const { size, tile, overlap } of CASES) {
      const side = Math.min(size, tile);
      const origins = tileOrigins(size, side, overlap);
      const weights = blendWeights(origins, side, F);
      const total = new Float64Array(size * F);
      weights.forEach((w, i) => w.forEach((v, p) => {
        expect(v).toBeGreaterThan(0);
        total[origins[i]! * F + p]! += v;
      }));
      for (const t of total) expect(t).toBeCloseTo(1, 6);
    }
  });

  it('ramp linearly from one tile to the next across their overlap', () => {
    // Two tiles of 8 cells over 12: overlap of 4 cells, 16 pixels at F = 4.
    const [a, b] = blendWeights(tileOrigins(12, 8, 4), 8, F);
    expect(tileOrigins(12, 8, 4)).toEqual([0, 4]);
    expect([...a!.subarray(0, 16)].every((v) => v === 1)).toBe(true);
    expect(a![16]).toBeCloseTo(15.5 / 16, 6);
    expect(a![31]).toBeCloseTo(0.5 / 16, 6);
    expect([...b!.subarray(16)].every((v) => v === 1)).toBe(true);
    for (let p = 16; p < 32; p++) expect(a![p]! + b![p - 16]!).toBeCloseTo(1, 6);
  });
});

describe('decodeTiled', () => {
  it('decodes latents that fit one tile whole: one call with the latents themselves', async () => {
    const latents = latentsOf(4, 8, 6);
    const calls: Array<[Float32Array, number, number]> = [];
    const out = await decodeTiled(latents, { channels: 4, height: 8, width: 6, factor: F }, { tile: 8, overlap: 2 }, async (l, h, w) => (calls.push([l, h, w]), blocks(l, h, w)));
    expect(calls).toHaveLength(1);
    expect(calls[0]![0]).toBe(latents);
    expect(out).toEqual(await blocks(latents, 8, 6));
  });

  it('paints every pixel once in full (a decoder of ones gives ones), on sides that are not multiples of the tile', async () => {
    for (const [h, w] of [[13, 30], [9, 5], [30, 8]] as const) {
      const sizes: string[] = [];
      const ones: DecodeTile = async (_, th, tw) => (sizes.push(`${th}x${tw}`), new Float32Array(3 * th * F * tw * F).fill(1));
      const out = await decodeTiled(latentsOf(4, h, w), { channels: 4, height: h, width: w, factor: F }, { tile: 8, overlap: 3 }, ones);
      expect(out.length).toBe(3 * h * F * w * F);
      let worst = 0;
      for (const v of out) worst = Math.max(worst, Math.abs(v - 1));
      expect(worst).toBeLessThan(1e-6);
      // Every tile is a full tile (the last flush with the edge): none is a sliver.
      expect(new Set(sizes)).toEqual(new Set([`${Math.min(h, 8)}x${Math.min(w, 8)}`]));
      expect(sizes).toHaveLength(tileOrigins(h, 8, 3).length * tileOrigins(w, 8, 3).length);
    }
  });

  it('gives what a whole decode gives when tiles agree (each tile cut from the right latents, put at the right place)', async () => {
    const [c, h, w] = [4, 13, 30];
    const latents = latentsOf(c, h, w);
    const whole = await blocks(latents.slice(), h, w);
    const tiled = await decodeTiled(latents, { channels: c, height: h, width: w, factor: F }, { tile: 8, overlap: 3 }, blocks);
    let worst = 0;
    for (let i = 0; i < whole.length; i++) worst = Math.max(worst, Math.abs(whole[i]! - tiled[i]!));
    expect(worst).toBeLessThan(1e-5);
  });

  it('turns tiles that disagree into a seamless linear ramp across each overlap', async () => {
    // Each tile paints one value, its order of decoding: neighbouring tiles differ by 1 (along a row) or by the columns' count.
    const [h, w] = [8, 20];
    let k = 0;
    const constant: DecodeTile = async (_, th, tw) => new Float32Array(3 * th * F * tw * F).fill(k++);
    const out = await decodeTiled(latentsOf(4, h, w), { channels: 4, height: h, width: w, factor: F }, { tile: 8, overlap: 2 }, constant);
    const origins = tileOrigins(w, 8, 2);
    expect(origins).toEqual([0, 6, 12]);
    const W = w * F;
    const row = out.subarray(5 * W, 6 * W);
    // Outside the overlaps each tile's own value; within an overlap of 2 cells (8 px) a ramp of steps 1/8.
    expect(row[0]).toBeCloseTo(0, 6);
    expect(row[10 * F]).toBeCloseTo(1, 6);
    expect(row[W - 1]).toBeCloseTo(2, 6);
    let steepest = 0;
    for (let x = 1; x < W; x++) {
      expect(row[x]!).toBeGreaterThanOrEqual(row[x - 1]! - 1e-6);
      steepest = Math.max(steepest, row[x]! - row[x - 1]!);
    }
    expect(steepest).toBeCloseTo(1 / (2 * F), 5);
    // The same on every channel and row of this one-row grid.
    for (let c = 0; c < 3; c++) for (let y = 0; y < h * F; y++) expect(out.subarray((c * h * F + y) * W, (c * h * F + y + 1) * W)).toEqual(row);
  });

  it('stops between tiles when its signal is aborted', async () => {
    const controller = new AbortController();
    let calls = 0;
    const decode: DecodeTile = async (l, h, w) => {
      if (++calls === 2) controller.abort(new Error('gone'));
      return blocks(l, h, w);
    };
    await expect(decodeTiled(latentsOf(4, 8, 30), { channels: 4, height: 8, width: 30, factor: F }, { tile: 8, overlap: 2 }, decode, controller.signal)).rejects.toThrow('gone');
    expect(calls).toBe(2);
  });
});
