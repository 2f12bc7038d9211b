import { readFile } from 'node:fs/promises';
import path from 'node:path';
import OpenAI from 'openai';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onnx } from '../fixtures/onnx/build.js';
import { tinySdTurboFusedModel, tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * An export optimised for a GPU runtime, as the catalog's sd-turbo
 * (schmuell/sd-turbo-ort-web) is: the synthetic SD-Turbo whose UNet and VAE
 * carry com.microsoft GroupNorm, SkipGroupNorm, NhwcConv, BiasSplitGelu,
 * BiasAdd and packed MultiHeadAttention, none of which ONNX Runtime's CPU
 * provider can run as they are. Registered and prepared as `lserve pull
 * ./dir --kind image` does (engine.prepare), it is rewritten into standard
 * operators and makes the image its standard-operator twin (same weights)
 * makes, through the real server and the OpenAI client.
 */

let server: TestServer;
let client: OpenAI;
const said: string[] = [];

beforeAll(async () => {
  // The twins are compared in fp32: int8 graphs are calibrated on each export's own graphs, so they would differ by their rounding (test/unit/image-int8.test.ts covers them).
  process.env.LSERVE_IMAGE_PRECISION = 'fp32';
  server = await startTestServer();
  for (const [id, folder] of [['sd-standard', await tinySdTurboModel()], ['sd-fused', await tinySdTurboFusedModel()]] as const) {
    const { model } = await server.engine.store.registerDirectory(folder, { kind: 'image', id });
    await server.engine.prepare(model, (line) => said.push(`${id}: ${line}`));
  }
  // The fused export registered without its preparation, to see it fail.
  await server.engine.store.registerDirectory(await tinySdTurboFusedModel(), { kind: 'image', id: 'sd-fused-unprepared' });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.stop();
  delete process.env.LSERVE_IMAGE_PRECISION;
});

async function rgb(b64: string | undefined): Promise<Buffer> {
  return sharp(Buffer.from(b64!, 'base64')).removeAlpha().raw().toBuffer();
}

/** The largest difference of one channel of one pixel, and how many channels differ at all. */
function compare(a: Buffer, b: Buffer): { worst: number; differing: number } {
  let worst = 0;
  let differing = 0;
  for (let i = 0; i < a.length; i++) {
    const d = Math.abs(a[i]! - b[i]!);
    worst = Math.max(worst, d);
    if (d) differing++;
  }
  return { worst, differing };
}

/** Operator types of a graph file, by domain ('ai.onnx.Conv', 'com.microsoft.MultiHeadAttention'). */
async function operators(file: string): Promise<Set<string>> {
  const model = onnx.ModelProto.decode(await readFile(file));
  return new Set((model.graph!.node ?? []).map((n) => `${n.domain || 'ai.onnx'}.${n.opType}`));
}

describe('an export with fused GPU operators', () => {
  it('fails on the CPU as shipped, naming the operator and telling to pull again', async () => {
    const res = await fetch(`${server.url}/v1/images/generations`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sd-fused-unprepared', prompt: 'a lighthouse', size: '64x64' }),
    });
    expect(res.status).toBe(500);
    const { error } = (await res.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe('unsupported_operators');
    expect(error.message).toMatch(/^Image model 'sd-fused-unprepared' uses (com\.microsoft\.)?(NhwcConv|GroupNorm), an operator ONNX Runtime's CPU provider has no kernel for\. Run `lserve pull sd-fused-unprepared` again: /);
  });

  it('is rewritten at pull into standard operators, and the rewrite is reported', async () => {
    const model = (await server.engine.store.resolve('sd-fused'))!;
    const dir = server.engine.store.modelDir('sd-fused');
    for (const role of ['unet', 'vae_decoder', 'vae_encoder']) {
      expect(model.files[`${role}_fp32`]).toBe(path.join(dir, 'fp32', role, 'model.onnx'));
      const ops = await operators(model.files[`${role}_fp32`]!);
      for (const fused of ['GroupNorm', 'SkipGroupNorm', 'NhwcConv', 'BiasSplitGelu', 'BiasAdd']) expect(ops).not.toContain(`com.microsoft.${fused}`);
      expect(ops).toContain('ai.onnx.InstanceNormalization');
    }
    // MultiHeadAttention runs on the CPU once its packed QKV / KV are unpacked.
    expect(await operators(model.files.unet_fp32!)).toContain('com.microsoft.MultiHeadAttention');
    expect(said).toContain("sd-fused: Rewriting sd-fused's fused GPU operators (ONNX Runtime's CPU provider has no kernels for them) into standard ONNX operators:");
    const unet = said.find((l) => l.startsWith('sd-fused:   unet: com.microsoft.'));
    for (const fused of ['NhwcConv', 'GroupNorm', 'SkipGroupNorm', 'MultiHeadAttention', 'BiasSplitGelu', 'BiasAdd']) expect(unet).toMatch(new RegExp(`com\\.microsoft\\.${fused} ×\\d+`));
    expect(said).toContainEqual(expect.stringMatching(/^sd-fused: {3}vae_decoder: com\.microsoft\.NhwcConv ×\d+, com\.microsoft\.GroupNorm ×\d+$/));
    // The standard twin needs no rewriting.
    expect(said.filter((l) => l.startsWith('sd-standard:') && l.includes('Rewriting'))).toEqual([]);
  });

  it('makes the image its standard-operator twin makes', async () => {
    const images: Buffer[] = [];
    for (const model of ['sd-fused', 'sd-standard']) {
      // seed and steps are lserve's extensions of the request.
      const params = { model, prompt: 'a lighthouse at dusk', size: '64x64', response_format: 'b64_json', seed: 7, steps: 2 };
      const res = await client.images.generate(params as OpenAI.ImageGenerateParamsNonStreaming);
      images.push(await rgb(res.data![0]!.b64_json));
    }
    expect(images[0]!.length).toBe(64 * 64 * 3);
    // Identical when measured; only attention is computed another way (the CPU
    // MultiHeadAttention kernel sums in another order than MatMul/Softmax, up to
    // ~5e-5 on the UNet's output), which could move a channel by one level.
    const { worst, differing } = compare(images[0]!, images[1]!);
    expect(worst).toBeLessThanOrEqual(1);
    expect(differing).toBeLessThan(images[0]!.length / 100);
  });

  it('runs img2img (the rewritten VAE encoder) like its twin', async () => {
    const raw = Buffer.alloc(64 * 64 * 3);
    for (let i = 0; i < 64 * 64; i++) raw.set([(i % 64) * 4, Math.floor(i / 64) * 4, 120], i * 3);
    const image = (await sharp(raw, { raw: { width: 64, height: 64, channels: 3 } }).png().toBuffer()).toString('base64');
    const images: Buffer[] = [];
    for (const model of ['sd-fused', 'sd-standard']) {
      const res = await fetch(`${server.url}/v1/images/img2img`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt: 'a watercolour', image, strength: 0.5, seed: 3, response_format: 'b64_json' }),
      });
      expect(res.status, await res.clone().text()).toBe(200);
      images.push(await rgb(((await res.json()) as { data: Array<{ b64_json: string }> }).data[0]!.b64_json));
    }
    const { worst, differing } = compare(images[0]!, images[1]!);
    expect(worst).toBeLessThanOrEqual(1);
    expect(differing).toBeLessThan(images[0]!.length / 100);
  });
});
