import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/compose.js';
import { DiffusionPipeline } from '../../src/families/stable-diffusion/diffusion-pipeline.js';
import { decodeTiled, tileOrigins, type Tiling } from '../../src/families/stable-diffusion/tiled-decode.js';
import { OnnxSession } from '../../src/runtimes/onnx/session.js';
import type { Lease } from '../../src/core/manager.js';
import { TINY_SD, tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { vaeDecoder } from '../fixtures/onnx/sd-turbo/vae.js';

/**
 * Tiled VAE decoding through the real pipeline and ONNX Runtime, with small
 * tiles, against a whole decode of the same latents.
 *
 * The suite's tiny SD-Turbo has a near-identity VAE (each latent cell
 * painted back as its 8×8 block, no spatial mixing): its tiles reproduce
 * the whole decode exactly, which checks the plumbing but could hide a seam.
 * So the seams are measured with a random-weight VAE decoder of the same
 * shape (the fixture's `random` weights): its convolutions mix neighbours,
 * its group norms and mid-block attention see only their tile, so tiles
 * disagree near their edges and in their overall statistics, as a real VAE's
 * do, only more. Blended, the tiled image has no seams: the mean change
 * between adjacent pixel columns (rows) at any tile edge or overlap middle
 * stays within SEAM_FACTOR of its mean elsewhere (measured ≤ 1.5; the whole
 * decode itself: 1.2–1.4). The same tiles pasted without blending (each
 * pixel from one tile, cut at the tile edge or mid-overlap) measure 3.8–7.7,
 * and the test checks that too, so the bound is one blending has to earn.
 */

const SEAM_FACTOR = 2;
/** Mean |tiled − whole| in [-1, 1] pixel units for the random VAE (measured 0.11–0.13; mean |pixel| ≈ 0.49). */
const MAX_MEAN_DIFFERENCE = 0.16;
const F = 8;

let dir: string;
let engine: Engine;
let lease: Lease<DiffusionPipeline>;
let randomVae: OnnxSession;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-tiled-vae-'));
  engine = new Engine({ home: path.join(dir, 'home'), threads: 1, keepAliveMs: -1, isolation: 'server' });
  await engine.store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: 'sd-tiles' });
  lease = await engine.acquire<DiffusionPipeline>('sd-tiles', ['image']);
  const file = path.join(dir, 'vae-random.onnx');
  await writeFile(file, vaeDecoder(TINY_SD.vae, 'float32', 'random'));
  randomVae = await OnnxSession.create(file, { threads: 1 });
});

afterAll(async () => {
  lease?.release();
  await randomVae?.release();
  await engine?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The loaded tiny model's pipeline with another VAE decoder and tiling. */
function pipeline(options: { random?: boolean; tiling?: Tiling } = {}): DiffusionPipeline {
  const base = lease.model;
  const sessions = { ...base.sessions, vaeDecoder: options.random ? randomVae : base.sessions.vaeDecoder };
  return new DiffusionPipeline(sessions, base.tokenizer, base.info, base.queue, base.memoryBytes, base.schedulerConfig, { tiling: options.tiling });
}

/** Unscaled latents [4, h, w] with smooth structure and some fine noise, in the range a VAE decoder sees. */
function latents(h: number, w: number): Float32Array {
  return Float32Array.from({ length: 4 * h * w }, (_, i) => {
    const c = Math.floor(i / (h * w));
    const y = Math.floor((i % (h * w)) / w);
    const x = i % w;
    return 3 * Math.sin(x * 0.25 + c) * Math.cos(y * 0.2 - c) + 0.5 * Math.sin(i * 12.9898);
  });
}

function meanDifference(a: Float32Array, b: Float32Array): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += Math.abs(a[i]! - b[i]!);
  return sum / a.length;
}

/** Pixel positions along a side where tiling could leave a seam: every tile edge inside the image and every overlap's middle. */
function seamLines(origins: readonly number[], tile: number): Set<number> {
  const lines = new Set<number>();
  origins.forEach((o, i) => {
    if (i > 0) lines.add(o * F).add(Math.floor(((origins[i - 1]! + tile + o) / 2) * F));
    if (i < origins.length - 1) lines.add((o + tile) * F);
  });
  return lines;
}

/**
 * The largest mean |change| between adjacent pixel columns (and rows) on a
 * seam line, over the mean change between adjacent columns (rows) elsewhere.
 */
function seamRatio(image: Float32Array, H: number, W: number, columns: Set<number>, rows: Set<number>): { columns: number; rows: number } {
  const plane = H * W;
  const ratio = (count: number, lines: Set<number>, change: (at: number) => number) => {
    let seam = 0;
    let other = 0;
    for (let at = 1; at < count; at++) {
      const d = change(at);
      if (lines.has(at)) seam = Math.max(seam, d);
      else other += d / (count - 1 - lines.size);
    }
    return seam / other;
  };
  const columnChange = (x: number) => {
    let sum = 0;
    for (let c = 0; c < 3; c++) for (let y = 0; y < H; y++) sum += Math.abs(image[c * plane + y * W + x]! - image[c * plane + y * W + x - 1]!);
    return sum / (3 * H);
  };
  const rowChange = (y: number) => {
    let sum = 0;
    for (let c = 0; c < 3; c++) for (let x = 0; x < W; x++) sum += Math.abs(image[c * plane + y * W + x]! - image[c * plane + (y - 1) * W + x]!);
    return sum / (3 * W);
  };
  return { columns: ratio(W, columns, columnChange), rows: ratio(H, rows, rowChange) };
}

interface DecodedTile {
  y0: number;
  x0: number;
  h: number;
  w: number;
  pixels: Float32Array;
}

/** Tiles pasted without blending: each pixel from the last tile covering it ('edge': cut where a tile starts) or from the tile whose side of the overlap's middle it is on ('middle'). */
function pasted(tiles: readonly DecodedTile[], H: number, W: number, cut: 'edge' | 'middle'): Float32Array {
  const image = new Float32Array(3 * H * W);
  const rows = [...new Set(tiles.map((t) => t.y0))];
  const cols = [...new Set(tiles.map((t) => t.x0))];
  const owns = (origins: number[], o: number, side: number, p: number) => {
    const i = origins.indexOf(o);
    if (cut === 'edge') return true;
    const from = i > 0 ? ((origins[i - 1]! + side + o) / 2) * F : 0;
    const to = i < origins.length - 1 ? ((o + side + origins[i + 1]!) / 2) * F : Infinity;
    return p >= from && p < to;
  };
  for (const t of tiles) {
    const [ph, pw] = [t.h * F, t.w * F];
    for (let c = 0; c < 3; c++) {
      for (let y = 0; y < ph; y++) {
        for (let x = 0; x < pw; x++) {
          const [gy, gx] = [t.y0 * F + y, t.x0 * F + x];
          if (owns(rows, t.y0, t.h, gy) && owns(cols, t.x0, t.w, gx)) image[(c * H + gy) * W + gx] = t.pixels[(c * ph + y) * pw + x]!;
        }
      }
    }
  }
  return image;
}

describe('tiled VAE decoding on the tiny SD-Turbo', () => {
  it("decodes latents that fit a tile whole, and with the model's near-identity VAE tiles give the whole decode", async () => {
    const [h, w] = [24, 40];
    const whole = await pipeline().decode(latents(h, w), h, w);
    // Default tiling (64 latents): one whole decode, as before tiling existed.
    expect(pipeline().tiling).toEqual({ tile: 64, overlap: 16 });
    const tiled = await pipeline({ tiling: { tile: 16, overlap: 6 } }).decode(latents(h, w), h, w);
    expect(tiled.length).toBe(3 * h * F * w * F);
    expect(meanDifference(whole, tiled)).toBeLessThan(1e-4);
  });

  for (const [h, w, tiling] of [
    [24, 40, { tile: 16, overlap: 6 }],
    [20, 44, { tile: 16, overlap: 4 }],
  ] as const) {
    it(`leaves no seams with a mixing VAE: ${h}x${w} latents in tiles of ${tiling.tile} overlapping by ${tiling.overlap}`, async () => {
      const [H, W] = [h * F, w * F];
      const input = latents(h, w);
      const whole = await pipeline({ random: true }).decode(input.slice(), h, w);
      const tiled = await pipeline({ random: true, tiling }).decode(input.slice(), h, w);
      const rows = tileOrigins(h, tiling.tile, tiling.overlap);
      const cols = tileOrigins(w, tiling.tile, tiling.overlap);
      const lines = { columns: seamLines(cols, tiling.tile), rows: seamLines(rows, tiling.tile) };

      const difference = meanDifference(whole, tiled);
      const seams = seamRatio(tiled, H, W, lines.columns, lines.rows);
      const reference = seamRatio(whole, H, W, lines.columns, lines.rows);
      console.log(`${h}x${w}, tiles ${tiling.tile}/${tiling.overlap}: mean |tiled − whole| ${difference.toFixed(4)}; seam ratio columns ${seams.columns.toFixed(2)}, rows ${seams.rows.toFixed(2)} (whole decode ${reference.columns.toFixed(2)}, ${reference.rows.toFixed(2)})`);
      expect(difference).toBeLessThan(MAX_MEAN_DIFFERENCE);
      expect(seams.columns).toBeLessThan(SEAM_FACTOR);
      expect(seams.rows).toBeLessThan(SEAM_FACTOR);

      // The same tiles without blending do show seams, and differ more from the whole decode.
      const tiles: DecodedTile[] = [];
      let k = 0;
      const reblended = await decodeTiled(input.slice(), { channels: 4, height: h, width: w, factor: F }, tiling, async (tile, th, tw) => {
        const pixels = await pipeline({ random: true }).decode(tile, th, tw);
        tiles.push({ y0: rows[Math.floor(k / cols.length)]!, x0: cols[k++ % cols.length]!, h: th, w: tw, pixels });
        return pixels;
      });
      expect(meanDifference(reblended, tiled)).toBeLessThan(1e-6);
      for (const cut of ['edge', 'middle'] as const) {
        const image = pasted(tiles, H, W, cut);
        const unblended = seamRatio(image, H, W, lines.columns, lines.rows);
        expect(Math.min(unblended.columns, unblended.rows), cut).toBeGreaterThan(SEAM_FACTOR);
        expect(meanDifference(whole, image)).toBeGreaterThan(difference);
      }
    });
  }
});
