import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { runCli } from '../helpers/cli.js';

/**
 * `lserve pull ./dir --kind image` (registration and the fp16 → fp32
 * conversion) and `lserve imagine` as a user runs them: the built CLI on the
 * synthetic SD-Turbo, 64x64 images.
 */

let dir: string;
let home: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-imagine-'));
  home = path.join(dir, 'home');
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const cli = (args: string[]) => runCli(['--home', home, ...args], { timeoutMs: 120_000 });
const imagine = (args: string[]) => cli(['imagine', '-m', 'sd-cli', '--size', '64x64', ...args]);

async function rgb(file: string): Promise<Buffer> {
  return (await sharp(file).removeAlpha().raw().toBuffer({ resolveWithObject: true })).data;
}

describe('lserve pull ./dir --kind image', () => {
  it('registers the export in place and converts its fp16 graphs to fp32 once', async () => {
    const pulled = await cli(['pull', await tinySdTurboModel(), '--kind', 'image', '--id', 'sd-cli']);
    expect(pulled.code, pulled.stderr).toBe(0);
    expect(pulled.stdout).toMatch(/Layout: sd-turbo/);
    for (const role of ['text_encoder', 'unet', 'vae_decoder', 'vae_encoder']) expect(pulled.stdout).toMatch(new RegExp(`${role}: fp16 → fp32`));
    expect((await stat(path.join(home, 'models', 'sd-cli', 'fp32', 'unet', 'model.onnx.data'))).size).toBeGreaterThan(0);
    const list = await cli(['list']);
    expect(list.stdout).toMatch(/^ID +KIND +BACKEND +SIZE +SOURCE +LICENSE +STATUS$/m);
    expect(list.stdout).toMatch(/sd-cli \* +image +onnx .* local +unknown +installed/);
    const again = await cli(['pull', await tinySdTurboModel(), '--kind', 'image', '--id', 'sd-cli-2']);
    expect(again.code).toBe(0);
  });
});

describe('lserve imagine', () => {
  it('writes the image, numbered files for -n, in the format of the extension, reproducibly from --seed', async () => {
    const out = path.join(dir, 'fox.png');
    const one = await imagine(['a red fox', '--seed', '5', '-o', out]);
    expect(one.code, one.stderr).toBe(0);
    expect(one.stdout.trim()).toBe(`${out}  64x64  seed 5`);
    expect((await sharp(out).metadata()).format).toBe('png');
    const many = await imagine(['a red fox', '--seed', '5', '-n', '2', '--steps', '2', '-o', path.join(dir, 'many.webp')]);
    expect(many.code, many.stderr).toBe(0);
    expect(many.stdout).toContain('seed 6');
    for (const name of ['many-1.webp', 'many-2.webp']) expect((await sharp(path.join(dir, name)).metadata()).format).toBe('webp');
    const again = await imagine(['a red fox', '--seed', '5', '-o', path.join(dir, 'fox-again.png')]);
    expect(again.code).toBe(0);
    expect((await readFile(path.join(dir, 'fox-again.png'))).equals(await readFile(out))).toBe(true);
  });

  it('repaints an image: --init with --strength, and --init with --mask keeping unmasked pixels', async () => {
    const init = path.join(dir, 'init.png');
    const raw = Buffer.alloc(64 * 64 * 3);
    for (let i = 0; i < 64 * 64; i++) raw.set([60 + (i % 64) * 2, 120, 200 - Math.floor(i / 64) * 2], i * 3);
    await sharp(raw, { raw: { width: 64, height: 64, channels: 3 } }).png().toFile(init);
    const mask = path.join(dir, 'mask.png');
    const maskRaw = Buffer.alloc(64 * 64 * 3);
    for (let y = 0; y < 32; y++) maskRaw.fill(255, y * 64 * 3, y * 64 * 3 + 32 * 3);
    await sharp(maskRaw, { raw: { width: 64, height: 64, channels: 3 } }).png().toFile(mask);

    const img2img = await imagine(['a painting', '--init', init, '--strength', '0.2', '--seed', '1', '-o', path.join(dir, 'i2i.png')]);
    expect(img2img.code, img2img.stderr).toBe(0);
    const inpaint = await imagine(['a painting', '--init', init, '--mask', mask, '--seed', '1', '-o', path.join(dir, 'edit.png')]);
    expect(inpaint.code, inpaint.stderr).toBe(0);
    const [original, edited] = await Promise.all([rgb(init), rgb(path.join(dir, 'edit.png'))]);
    let changed = 0;
    for (let i = 0; i < 64 * 64; i++) {
      const same = edited.subarray(i * 3, i * 3 + 3).equals(original.subarray(i * 3, i * 3 + 3));
      const masked = i % 64 < 32 && i < 32 * 64;
      if (!masked) expect(same).toBe(true);
      else if (!same) changed++;
    }
    expect(changed).toBeGreaterThan(500);
  });

  it('reports bad usage with exit 2 and a message, a missing model with exit 1', async () => {
    const noInit = await imagine(['x', '--strength', '0.3']);
    expect([noInit.code, noInit.stderr]).toEqual([2, 'lserve: --strength and --mask need --init <image>\n']);
    const size = await imagine(['x', '--size', '100x100']);
    expect(size.code).toBe(2);
    expect(size.stderr).toMatch(/^lserve: --size must be WIDTHxHEIGHT with each side a multiple of 64 from 64 to 768/);
    const missing = await cli(['imagine', 'x', '-m', 'sd-turbo']);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/lserve pull sd-turbo/);
  });
});
