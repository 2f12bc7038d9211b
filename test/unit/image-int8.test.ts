import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Engine } from '../../src/compose.js';
import type { InstalledModel } from '../../src/core/store.js';
import { generateImages } from '../../src/core/tasks/image.js';
import { prepareInt8 } from '../../src/families/stable-diffusion/int8.js';
import { IMAGE_MIN_PSNR, readInt8Report, UNET_TOLERANCE } from '../../src/families/stable-diffusion/int8-report.js';
import { imageLoader } from '../../src/families/stable-diffusion/loader.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { onnx } from '../fixtures/onnx/build.js';

/**
 * The int8 graphs prepared at pull (families/stable-diffusion/int8.ts) on
 * the suite's synthetic SD-Turbo: calibrated, probed against fp32, kept or
 * removed by the probe's bounds, recorded, chosen by the loader, said in the
 * load line, priced in the memory estimate, and making the fp32 pipeline's
 * image within the bound. The tiny model is probed as it samples by default
 * (guidance 7.5): its random UNet's guided prediction moves ≈ 100 % with
 * 8-bit activations in its convolutions, and even with 8-bit weights alone
 * its image is under 30 dB PSNR from the fp32 latents' image, so it stays
 * fp32; its near-identity VAE decoder holds in full, its text encoder with
 * 8-bit weights. Looser bounds show the layer search and the other paths.
 */

let dir: string;
let engine: Engine;
const lines: string[] = [];

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-sd-int8-'));
  engine = new Engine({ home: path.join(dir, 'home'), threads: 1, keepAliveMs: -1, isolation: 'server', log: (line) => lines.push(line) });
});

afterAll(async () => {
  delete process.env.LSERVE_IMAGE_PRECISION;
  await engine?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function pulled(id: string, precision?: 'fp32'): Promise<{ model: InstalledModel; said: string[] }> {
  const said: string[] = [];
  if (precision) process.env.LSERVE_IMAGE_PRECISION = precision;
  try {
    const { model } = await engine.store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id });
    return { model: await engine.prepare(model, (line) => said.push(line)), said };
  } finally {
    delete process.env.LSERVE_IMAGE_PRECISION;
  }
}

/** The model as pulled with LSERVE_IMAGE_PRECISION=fp32, then given int8 graphs under `bounds`. */
async function preparedWith(id: string, bounds: { unet: number; psnr: number }): Promise<{ model: InstalledModel; said: string }> {
  const { model } = await pulled(id, 'fp32');
  const f = model.files;
  const said: string[] = [];
  const prepared = await prepareInt8(engine.store, model, { textEncoder: f.text_encoder_fp32!, unet: f.unet_fp32!, vaeDecoder: f.vae_decoder_fp32! }, (l) => said.push(l), bounds);
  return { model: prepared, said: said.join('\n') };
}

async function pixels(model: string): Promise<Uint8Array> {
  const result = await generateImages(engine, { model, prompt: 'a lighthouse at dusk', size: '64x64', seed: 7 });
  return new Uint8Array(await sharp(result.images[0]!.data).raw().toBuffer());
}

function psnr(a: Uint8Array, b: Uint8Array): number {
  const mse = a.reduce((s, v, i) => s + (v - b[i]!) ** 2, 0) / a.length;
  return mse === 0 ? Infinity : 10 * Math.log10((255 * 255) / mse);
}

const graphBytes = async (file: string) => (await readFile(file)).length + (existsSync(`${file}.data`) ? (await readFile(`${file}.data`)).length : 0);

describe('int8 graphs prepared at pull', () => {
  let int8: InstalledModel;
  let fp32: InstalledModel;

  it('keeps, role by role, the boldest plan its probe holds to the bounds, saying which and why', async () => {
    const { model, said } = await pulled('sd-int8');
    int8 = model;
    const report = (await readInt8Report(model))!;
    expect(report.text_encoder).toMatchObject({ accepted: true, int8: 'weights' });
    expect(report.text_encoder.error!).toBeLessThanOrEqual(UNET_TOLERANCE);
    expect(report.vae_decoder).toMatchObject({ accepted: true, int8: 'Conv and MatMul' });
    expect(report.vae_decoder.psnr!).toBeGreaterThanOrEqual(IMAGE_MIN_PSNR);
    // The UNet: every plan misses, the bold ones by their noise prediction, the others by their image.
    expect(report.unet.accepted).toBe(false);
    expect(report.unet.reason).toMatch(/^Conv and MatMul in int8: its noise prediction is [\d.]+ % off fp32's, more than 10 %; Conv in int8: its noise prediction is [\d.]+ % off fp32's, more than 10 %; MatMul in int8: its image is [\d.]+ dB PSNR from fp32's latents' image, under 30 dB; weights in int8: its image is [\d.]+ dB PSNR/);
    expect(model.files.unet_int8).toBeUndefined();
    for (const role of ['text_encoder', 'vae_decoder']) expect(model.files[`${role}_int8`]).toBe(path.join(engine.store.modelDir('sd-int8'), 'int8', role, 'model.onnx'));
    // Nothing of the measuring graphs is left behind.
    expect((await readdir(path.join(engine.store.modelDir('sd-int8'), 'int8'))).sort()).toEqual(['report.json', 'text_encoder', 'vae_decoder']);
    expect(said.join('\n')).toMatch(/text encoder int8 weights \(noise prediction within [\d.]+ %\), UNet fp32 \(Conv and MatMul in int8: .*\), VAE decoder int8 \([\d.]+ dB PSNR\)/);

    // A second pull does not prepare again.
    const again: string[] = [];
    await engine.prepare(model, (line) => again.push(line));
    expect(again.join('\n')).not.toMatch(/8-bit/);
  });

  it('LSERVE_IMAGE_PRECISION=fp32 prepares none', async () => {
    ({ model: fp32 } = await pulled('sd-fp32', 'fp32'));
    expect(fp32.files.int8_report).toBeUndefined();
    expect(fp32.files.vae_decoder_fp32).toBeDefined();
  });

  it('loads the int8 graphs, says so, prices them, and makes the fp32 image within the bound', async () => {
    const [withInt8, withFp32] = [await pixels('sd-int8'), await pixels('sd-fp32')];
    expect(lines.join('\n')).toMatch(/sd-int8: text encoder int8 weights \(.*\), UNet fp32 \(.*\), VAE decoder int8 \([\d.]+ dB PSNR\)/);
    expect(lines.join('\n')).toMatch(/sd-fp32: UNet and VAE decoder in fp32 \(no int8 graphs prepared; `lserve pull sd-fp32` prepares them\)/);
    // Each graph has its own bound; the image the kept graphs make together is reported at pull (imagePsnr) when the UNet is kept.
    // 25 dB: what small differences of every pixel give; a broken graph's image is noise (< 15 dB).
    const similarity = psnr(withFp32, withInt8);
    expect(similarity).toBeGreaterThanOrEqual(25);
    expect(similarity).toBeLessThan(Infinity);
    // The estimate counts the int8 graphs' bytes, not the fp32 ones'.
    let saved = 0;
    for (const role of ['text_encoder', 'vae_decoder']) saved += (await graphBytes(int8.files[`${role}_fp32`]!)) - (await graphBytes(int8.files[`${role}_int8`]!));
    expect(saved).toBeGreaterThan(0);
    expect(imageLoader.estimateMemory!(fp32) - imageLoader.estimateMemory!(int8)).toBe(saved);
  });

  it('adds 8-bit activations to the convolutions that bear them, and loads the graph the report describes', async () => {
    const { model, said } = await preparedWith('sd-layers', { unet: UNET_TOLERANCE, psnr: 15 });
    const report = (await readInt8Report(model))!;
    expect(report.unet).toMatchObject({ accepted: true, int8: 'MatMul', added: { op: 'Conv', of: 35 } });
    expect(report.unet.psnr!).toBeGreaterThanOrEqual(15);
    const { layers } = report.unet.added!;
    expect(layers).toBeGreaterThan(0);
    expect(layers).toBeLessThan(35);
    // That many convolutions read 8-bit activations (QLinearConv), the rest fp32.
    const convs = onnx.ModelProto.decode(await readFile(model.files.unet_int8!)).graph!.node!.filter((n) => n.opType === 'Conv');
    expect(convs).toHaveLength(35);
    expect(convs.filter((n) => n.input![0]!.endsWith('::dequantized'))).toHaveLength(layers);
    expect(said).toMatch(new RegExp(`UNet int8 products and ${layers} of 35 convolutions with 8-bit activations \\(noise prediction within [\\d.]+ %, its image [\\d.]+ dB PSNR\\)`));
    expect(report.imagePsnr).toBeGreaterThan(0);
    await pixels('sd-layers');
    expect(lines.join('\n')).toMatch(new RegExp(`sd-layers: .*UNet int8 products and ${layers} of 35 convolutions`));
  });

  it('runs a UNet with 8-bit activations everywhere where the bounds allow it', async () => {
    const { model, said } = await preparedWith('sd-unet8', { unet: 1, psnr: 0 });
    expect(said).toMatch(/UNet int8 \(noise prediction within [\d.]+ %, its image [\d.]+ dB PSNR\)/);
    expect((await readInt8Report(model))!.unet).toMatchObject({ accepted: true, int8: 'Conv and MatMul' });
    const image = await pixels('sd-unet8');
    expect(lines.join('\n')).toMatch(/sd-unet8: .*UNet int8 \(noise prediction within [\d.]+ %, its image [\d.]+ dB PSNR\)/);
    expect(psnr(await pixels('sd-fp32'), image)).toBeLessThan(Infinity);
  });

  it('removes every graph no plan holds for, and loads fp32 saying why', async () => {
    const { model, said } = await preparedWith('sd-none', { unet: 0, psnr: 1000 });
    expect(said).toMatch(/text encoder fp32 \(weights in int8: the UNet's noise prediction from its states is [\d.]+ % off fp32's, more than 0 %\), UNet fp32 \(Conv and MatMul in int8: .*; Conv in int8: .*; MatMul in int8: .*; weights in int8: .*\), VAE decoder fp32 \(.*under 1000 dB\)/);
    for (const role of ['text_encoder', 'unet', 'vae_decoder']) expect(model.files[`${role}_int8`]).toBeUndefined();
    expect(await readdir(path.join(engine.store.modelDir('sd-none'), 'int8'))).toEqual(['report.json']);
    expect(await pixels('sd-none')).toEqual(await pixels('sd-fp32'));
    expect(lines.join('\n')).toMatch(/sd-none: text encoder fp32 \(.*\), UNet fp32 \(.*\), VAE decoder fp32 \(.*\)/);
  });
});
