import { cp, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinyDiffusersSdTurboModel, UNET_DATA } from '../fixtures/onnx/sd-turbo/diffusers.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { runCli } from '../helpers/cli.js';

/**
 * A user's own Stable Diffusion export in the layout `optimum-cli export
 * onnx` writes (model_index.json, text_encoder/ unet/ vae_decoder/
 * vae_encoder/ with model.onnx each, the UNet's weights in
 * unet/model.onnx_data, scheduler/, tokenizer/) registered with one
 * `lserve pull ./dir --kind image`, as a user runs it (the built CLI): it
 * makes the same image as the catalog-layout export of the same weights,
 * and each missing or malformed piece is refused at pull, by name.
 */

interface ListedRow {
  id: string;
  size_bytes: number;
  files: Record<string, string>;
}

let dir: string;
let home: string;
let optimum: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-diffusers-'));
  home = path.join(dir, 'home');
  optimum = await tinyDiffusersSdTurboModel();
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const cli = (args: string[]) => runCli(['--home', home, ...args], { timeoutMs: 120_000 });

/** A copy of the optimum-layout export to alter. */
async function copy(name: string): Promise<string> {
  const target = path.join(dir, name);
  await cp(optimum, target, { recursive: true });
  return target;
}

async function listed(id: string): Promise<ListedRow | undefined> {
  const result = await cli(['list', '--json']);
  return (JSON.parse(result.stdout) as ListedRow[]).find((r) => r.id === id);
}

async function rgb(file: string): Promise<Buffer> {
  return (await sharp(file).removeAlpha().raw().toBuffer()) as Buffer;
}

describe('lserve pull <optimum export> --kind image', () => {
  it('registers it with its external weights, converts it, and makes the same image as the catalog layout', async () => {
    const pulled = await cli(['pull', optimum, '--kind', 'image', '--id', 'sd-optimum']);
    expect(pulled.code, pulled.stderr).toBe(0);
    expect(pulled.stdout).toContain('Layout: sd-turbo');
    expect(pulled.stdout).toMatch(/ {2}unet_data {2}unet\/model\.onnx_data \([\d.]+ GB: the weights of unet\/model\.onnx\)\n/);
    for (const role of ['text_encoder', 'unet', 'vae_decoder', 'vae_encoder']) expect(pulled.stdout).toMatch(new RegExp(`${role}: fp16 → fp32`));

    const row = await listed('sd-optimum');
    expect(row?.files.unet_data).toBe(path.join(optimum, UNET_DATA));
    // The external weights count in the model's size (they are most of the UNet).
    expect(row!.size_bytes).toBeGreaterThan((await stat(path.join(optimum, UNET_DATA))).size);

    const catalog = await cli(['pull', await tinySdTurboModel(), '--kind', 'image', '--id', 'sd-catalog', '--quiet']);
    expect(catalog.code, catalog.stderr).toBe(0);
    const images: Buffer[] = [];
    for (const model of ['sd-optimum', 'sd-catalog']) {
      const out = path.join(dir, `${model}.png`);
      const made = await cli(['imagine', 'a lighthouse at dusk', '-m', model, '--size', '64x64', '--steps', '2', '--seed', '7', '-o', out]);
      expect(made.code, made.stderr).toBe(0);
      images.push(await rgb(out));
    }
    expect(images[0]!.length).toBe(64 * 64 * 3);
    expect(images[0]!.equals(images[1]!)).toBe(true);
    // The comparison can tell images apart: another seed gives another picture.
    const other = path.join(dir, 'other-seed.png');
    expect((await cli(['imagine', 'a lighthouse at dusk', '-m', 'sd-optimum', '--size', '64x64', '--steps', '2', '--seed', '8', '-o', other])).code).toBe(0);
    expect((await rgb(other)).equals(images[0]!)).toBe(false);
  });

  it('uses an fp32 export as it is: nothing converted or copied, its external weights read in place', async () => {
    const fp32 = await tinyDiffusersSdTurboModel('float32');
    const before = await readdir(fp32, { recursive: true });
    const pulled = await cli(['pull', fp32, '--kind', 'image', '--id', 'sd-fp32']);
    expect(pulled.code, pulled.stderr).toBe(0);
    for (const role of ['text_encoder', 'unet', 'vae_decoder', 'vae_encoder']) expect(pulled.stdout).toContain(`${role}: already fp32`);
    // Only the int8 graphs are written, in the model's own folder; nothing beside the export's files.
    expect(await readdir(path.join(home, 'models', 'sd-fp32'))).toEqual(['int8', 'manifest.json']);
    expect(await readdir(fp32, { recursive: true })).toEqual(before);
    const row = await listed('sd-fp32');
    expect(row?.files.unet_fp32).toBe(path.join(fp32, 'unet/model.onnx'));
    const out = path.join(dir, 'fp32.png');
    const made = await cli(['imagine', 'a lighthouse at dusk', '-m', 'sd-fp32', '--size', '64x64', '--seed', '7', '-o', out]);
    expect(made.code, made.stderr).toBe(0);
    expect((await rgb(out)).length).toBe(64 * 64 * 3);
  });

  it('registers an export without a VAE encoder: text to image works, img2img says why it cannot', async () => {
    const folder = await copy('no-vae-encoder');
    await rm(path.join(folder, 'vae_encoder'), { recursive: true });
    const pulled = await cli(['pull', folder, '--kind', 'image', '--id', 'sd-no-encoder']);
    expect(pulled.code, pulled.stderr).toBe(0);
    expect(pulled.stdout).not.toContain('vae_encoder');
    expect(Object.keys((await listed('sd-no-encoder'))!.files)).not.toContain('vae_encoder');

    const picture = path.join(dir, 'text-to-image.png');
    const made = await cli(['imagine', 'a fox', '-m', 'sd-no-encoder', '--size', '64x64', '--seed', '3', '-o', picture]);
    expect(made.code, made.stderr).toBe(0);
    const edited = await cli(['imagine', 'a fox', '-m', 'sd-no-encoder', '--init', picture, '-o', path.join(dir, 'edited.png')]);
    expect(edited.code).not.toBe(0);
    expect(edited.stderr).toContain("Model 'sd-no-encoder' has no VAE encoder: it cannot start from an image (img2img, edits).");
  });

  it("takes its defaults from its own configs: the size from unet/config.json, SD steps and guidance unless it names itself turbo", async () => {
    const manifestOf = async (id: string) => JSON.parse(await readFile(path.join(home, 'models', id, 'manifest.json'), 'utf8')) as { entry: { defaults: Record<string, unknown> } };
    // An SD 2.x-shaped export: 96-latent UNet, a four-block VAE with SD 2's scaling factor.
    const sd2 = await copy('sd2-like');
    await writeFile(path.join(sd2, 'unet/config.json'), JSON.stringify({ _class_name: 'UNet2DConditionModel', in_channels: 4, sample_size: 96 }));
    await writeFile(path.join(sd2, 'vae_decoder/config.json'), JSON.stringify({ _class_name: 'AutoencoderKL', block_out_channels: [128, 256, 512, 512], scaling_factor: 0.13025 }));
    const pulled = await cli(['pull', sd2, '--kind', 'image', '--id', 'sd2-like']);
    expect(pulled.code, pulled.stderr).toBe(0);
    expect(pulled.stdout).toContain('Defaults: 768×768 (unet/config.json), 20 steps, guidance 7.5, at most 150 steps;');
    expect((await manifestOf('sd2-like')).entry.defaults).toMatchObject({ width: 768, height: 768, max_size: 1152, steps: 20, max_steps: 150, guidance_scale: 7.5, vae_factor: 8, vae_scaling_factor: 0.13025 });
    // More steps than SD-Turbo's 4 are a request this model takes.
    const made = await cli(['imagine', 'a fox', '-m', 'sd2-like', '--size', '64x64', '--steps', '6', '--guidance', '0', '--seed', '3', '-o', path.join(dir, 'sd2.png')]);
    expect(made.code, made.stderr).toBe(0);

    // One that names itself a turbo model keeps SD-Turbo's single step without guidance.
    const turbo = await copy('named-turbo');
    const index = JSON.parse(await readFile(path.join(turbo, 'model_index.json'), 'utf8')) as Record<string, unknown>;
    await writeFile(path.join(turbo, 'model_index.json'), JSON.stringify({ ...index, _name_or_path: 'stabilityai/sd-turbo' }));
    const pulledTurbo = await cli(['pull', turbo, '--kind', 'image', '--id', 'named-turbo']);
    expect(pulledTurbo.code, pulledTurbo.stderr).toBe(0);
    expect(pulledTurbo.stdout).toContain('Defaults: 512×512 (unet/config.json), 1 step and guidance 0 (a turbo model: stabilityai/sd-turbo), at most 150 steps;');
    expect((await manifestOf('named-turbo')).entry.defaults).toMatchObject({ width: 512, height: 512, max_size: 768, steps: 1, max_steps: 150, guidance_scale: 0, vae_scaling_factor: 0.18215 });
  });

  it('sets the request defaults given with --default over those its configs state, and refuses ones that do not hold, registering nothing', async () => {
    const lcm = await copy('lcm-like');
    const pulled = await cli(['pull', lcm, '--kind', 'image', '--id', 'lcm-like', '--default', 'steps=4', '--default', 'guidance_scale=1.5', '--default', 'max_steps=8']);
    expect(pulled.code, pulled.stderr).toBe(0);
    expect(pulled.stdout).toContain('  Set by --default: steps=4, guidance_scale=1.5, max_steps=8\n');
    const manifest = JSON.parse(await readFile(path.join(home, 'models', 'lcm-like', 'manifest.json'), 'utf8')) as { entry: { defaults: Record<string, unknown> } };
    expect(manifest.entry.defaults).toMatchObject({ width: 512, height: 512, steps: 4, max_steps: 8, guidance_scale: 1.5 });
    const tooMany = await cli(['imagine', 'a fox', '-m', 'lcm-like', '--size', '64x64', '--steps', '9', '-o', path.join(dir, 'lcm.png')]);
    expect(tooMany.code).not.toBe(0);
    expect(tooMany.stderr).toContain("--steps must be an integer from 1 to 8 for model 'lcm-like'");

    const refusals: [string[], string][] = [
      [['steps=0'], '--default steps must be an integer from 1 to 1000'],
      [['width=100'], '--default width must be a multiple of 64 from 64 to 2048'],
      [['guidance_scale=lots'], '--default guidance_scale must be a number from 0 to 30'],
      [['vae_scaling_factor=1'], '--default takes key=value with a key among width, height, min_size, max_size, steps, max_steps, guidance_scale'],
      [['steps=30', 'max_steps=10'], '--default: steps 30 is above max_steps 10. The registration of bad-defaults was undone.'],
      [['width=1024'], '--default: width 1024 is outside min_size 64 to max_size 768. The registration of bad-defaults was undone.'],
    ];
    for (const [pairs, message] of refusals) {
      const refused = await cli(['pull', lcm, '--kind', 'image', '--id', 'bad-defaults', ...pairs.flatMap((p) => ['--default', p])]);
      expect(refused.code, pairs.join(' ')).toBe(2);
      expect(refused.stderr).toContain(message);
      expect(await listed('bad-defaults')).toBeUndefined();
    }
  });

  it.each([
    ['the UNet\'s external weights are missing', async (folder: string) => rm(path.join(folder, UNET_DATA)), /unet: .*unet\/model\.onnx keeps \d+ of its tensors in 'model\.onnx_data', which is missing beside it/],
    ['the UNet graph is not ONNX', async (folder: string) => writeFile(path.join(folder, 'unet/model.onnx'), 'not a graph\n'), /unet: .*unet\/model\.onnx is not a readable ONNX graph/],
    ['model_index.json is malformed', async (folder: string) => writeFile(path.join(folder, 'model_index.json'), '{"_class_name": '), /model_index\.json is not valid JSON/],
    [
      'model_index.json describes an SDXL pipeline',
      async (folder: string) => writeFile(path.join(folder, 'model_index.json'), JSON.stringify({ _class_name: 'StableDiffusionXLPipeline', text_encoder_2: ['transformers', 'CLIPTextModelWithProjection'] })),
      /model_index\.json describes StableDiffusionXLPipeline with text_encoder_2 \(a second text encoder \(Stable Diffusion XL\)\)/,
    ],
    ['the vocabulary is not JSON', async (folder: string) => writeFile(path.join(folder, 'tokenizer/vocab.json'), '<html>'), /tokenizer\/vocab\.json is not valid JSON/],
  ])('refuses the export when %s, naming the piece, and leaves it unregistered', async (what, alter, message) => {
    const id = `bad-${what.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`.slice(0, 40).replace(/-+$/, '');
    const folder = await copy(id);
    await alter(folder);
    const pulled = await cli(['pull', folder, '--kind', 'image', '--id', id]);
    expect(pulled.code).not.toBe(0);
    expect(pulled.stderr).toMatch(message);
    expect(pulled.stderr).toContain('Its registration was undone.');
    expect(await listed(id)).toBeUndefined();
  });
});
