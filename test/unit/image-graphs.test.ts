import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { convertToFp32 } from '../../src/runtimes/onnx/fp32.js';
import { readSafetensors, taesdDecoderGraph } from '../../src/families/stable-diffusion/taesd.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { safetensors, syntheticTaesdModel } from '../fixtures/onnx/sd-turbo/taesd.js';

/**
 * Graphs lserve writes itself: the fp16 → fp32 conversion done at pull time
 * (same outputs as the fp16 graph, fp32 everywhere, weights in a data file)
 * and the TAESD decoder built from its safetensors weights (both layouts).
 */

let dir: string;
let model: string;
const options = { graphOptimizationLevel: 'all' as const, logSeverityLevel: 3 as const, intraOpNumThreads: 1 };

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-image-graphs-'));
  model = await tinySdTurboModel();
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('fp16 → fp32 conversion', () => {
  it('widens every fp16 tensor and type of the UNet; the fp32 graph computes what the fp16 one does', async () => {
    const target = path.join(dir, 'unet', 'model.onnx');
    const result = await convertToFp32(path.join(model, 'unet', 'model.onnx'), target);
    expect(result.graph).toBe(target);
    expect(result.converted).toBeGreaterThan(50);
    expect((await stat(`${target}.data`)).size).toBeGreaterThan(0);
    const fp16 = await ort.InferenceSession.create(path.join(model, 'unet', 'model.onnx'), options);
    const fp32 = await ort.InferenceSession.create(target, options);
    expect(fp32.inputMetadata.map((m) => (m.isTensor ? m.type : ''))).toEqual(['float32', 'int64', 'float32']);
    const feeds = () => ({
      sample: new ort.Tensor('float32', Float32Array.from({ length: 4 * 8 * 8 }, (_, i) => Math.sin(i)), [1, 4, 8, 8]),
      timestep: new ort.Tensor('int64', new BigInt64Array([499n]), [1]),
      encoder_hidden_states: new ort.Tensor('float32', Float32Array.from({ length: 77 * 32 }, (_, i) => Math.cos(i) * 0.5), [1, 77, 32]),
    });
    const a = (await fp16.run(feeds())).out_sample!.data as Float32Array;
    const b = (await fp32.run(feeds())).out_sample!.data as Float32Array;
    let worst = 0;
    let scale = 0;
    for (let i = 0; i < a.length; i++) {
      worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
      scale = Math.max(scale, Math.abs(b[i]!));
    }
    // fp16 arithmetic against fp32: a few parts in a thousand of the output's range.
    expect(worst / scale).toBeLessThan(0.02);
    await Promise.all([fp16.release(), fp32.release()]);
  });

  it("turns the VAE encoder's fp16 inputs and outputs into fp32, and leaves an fp32 graph alone", async () => {
    const target = path.join(dir, 'vae_encoder', 'model.onnx');
    await convertToFp32(path.join(model, 'vae_encoder', 'model.onnx'), target);
    const session = await ort.InferenceSession.create(target, options);
    expect([session.inputMetadata[0], session.outputMetadata[0]].map((m) => (m!.isTensor ? m!.type : ''))).toEqual(['float32', 'float32']);
    await session.release();
    const again = await convertToFp32(target, path.join(dir, 'again', 'model.onnx'));
    expect(again).toEqual({ graph: target, converted: 0, bytes: 0 });
  });
});

describe('TAESD decoder graph', () => {
  it("decodes latents [1, 4, h, w] to [1, 3, 8h, 8w] from diffusers' layout and the original one alike", async () => {
    const tensors = await readSafetensors(path.join(await syntheticTaesdModel(), 'diffusion_pytorch_model.safetensors'));
    // The original layout: decoder weights only, named by index with the clamp at 0.
    const original: Array<[string, number[], Float32Array]> = [];
    for (const [name, t] of tensors) {
      const m = /^decoder\.layers\.(\d+)\.(.*)$/.exec(name);
      if (m) original.push([`${Number(m[1]) + 1}.${m[2]}`, t.shape, t.data]);
    }
    const originalFile = path.join(dir, 'taesd_decoder.safetensors');
    await writeFile(originalFile, safetensors(original));
    const outputs: Float32Array[] = [];
    for (const graph of [taesdDecoderGraph(tensors), taesdDecoderGraph(await readSafetensors(originalFile))]) {
      const session = await ort.InferenceSession.create(graph, options);
      const latents = new ort.Tensor('float32', Float32Array.from({ length: 4 * 4 * 6 }, (_, i) => Math.sin(i * 0.7) * 2), [1, 4, 4, 6]);
      const out = (await session.run({ latent_sample: latents })).sample!;
      expect(out.dims).toEqual([1, 3, 32, 48]);
      outputs.push(out.data as Float32Array);
      await session.release();
    }
    expect(outputs[0]).toEqual(outputs[1]);
    expect(outputs[0]!.some((v) => v !== outputs[0]![0])).toBe(true);
  });

  it('reads fp16 safetensors as float32, and refuses files without TAESD decoder weights', async () => {
    const half = path.join(dir, 'half.safetensors');
    const header = JSON.stringify({ 'decoder.layers.0.bias': { dtype: 'F16', shape: [2], data_offsets: [0, 4] } });
    const bytes = Buffer.alloc(8 + header.length + 4);
    bytes.writeBigUInt64LE(BigInt(header.length), 0);
    bytes.write(header, 8);
    bytes.writeUInt16LE(0x3c00, 8 + header.length);
    bytes.writeUInt16LE(0xc000, 8 + header.length + 2);
    await writeFile(half, bytes);
    expect([...(await readSafetensors(half)).get('decoder.layers.0.bias')!.data]).toEqual([1, -2]);
    const file = path.join(dir, 'empty.safetensors');
    await writeFile(file, safetensors([['encoder.layers.0.weight', [1], new Float32Array([1])]]));
    await expect(readSafetensors(file).then(taesdDecoderGraph)).rejects.toThrow(/no TAESD decoder weights/);
  });
});
