import sharp from 'sharp';
import { describe, expect, it } from 'vitest';
import type { ImagePlan } from '../../src/core/tasks/image/image-pipeline.js';
import { modelSettings } from '../../src/core/tasks/image/options.js';
import type { ClipTokenizer } from '../../src/families/stable-diffusion/clip-tokenizer.js';
import { gaussianNoise } from '../../src/families/stable-diffusion/noise.js';
import { generate, type DiffusionGraphs, type TextStates } from '../../src/families/stable-diffusion/sample.js';
import { parseSchedulerConfig, schedule } from '../../src/families/stable-diffusion/scheduler.js';
import { SD_TURBO_SCHEDULER } from '../fixtures/onnx/sd-turbo/index.js';

/**
 * The inpainting loop (sample.ts) over stand-in graphs whose behaviour is
 * known exactly: a "VAE" that averages each 8x8 cell into a latent (and
 * paints it back), and a "UNet" that predicts the noise leading straight to
 * one target colour. So the result must be: every kept latent cell reset to
 * the original's latents noised to the σ reached after each step (clean
 * after the last), the masked area wholly the target colour but for the
 * narrow feather at its edge, every pixel outside the mask the original's.
 */

const TARGET = [30, 200, 60];
const F = 8;

function fakeGraphs(config: Record<string, unknown>, inputs: Float32Array[]): DiffusionGraphs {
  const table = new Map<number, number>();
  for (const steps of [1, 2, 3, 4]) {
    const s = schedule(parseSchedulerConfig(config), steps);
    s.timesteps.forEach((t, i) => table.set(t, s.sigmas[i]!));
  }
  const target = TARGET.map((v) => v / 127.5 - 1);
  return {
    info: { latentChannels: 4, scalingFactor: 1, vaeFactor: F, canEncode: true },
    tokenizer: { encode: () => ({ ids: new Int32Array(77), truncated: false }) } as unknown as ClipTokenizer,
    schedulerConfig: config,
    encodeText: async (): Promise<TextStates> => ({ batch: 1, length: 77, release: async () => {} }),
    async predict(sample, dims, timestep) {
      const sigma = table.get(timestep)!;
      const plane = dims[2]! * dims[3]!;
      const x = sample.map((v) => v * Math.sqrt(sigma * sigma + 1));
      inputs.push(x);
      // ε such that x̂₀ = x − σ·ε is the target colour (channel 3: 0).
      return x.map((v, i) => (v - (target[Math.floor(i / plane)] ?? 0)) / sigma);
    },
    async decode(latents, h, w) {
      const width = w * F;
      const height = h * F;
      const out = new Float32Array(3 * width * height);
      for (let c = 0; c < 3; c++) for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) out[c * width * height + y * width + x] = latents[c * h * w + Math.floor(y / F) * w + Math.floor(x / F)]!;
      return out;
    },
    async encode(pixels, height, width) {
      const h = height / F;
      const w = width / F;
      const out = new Float32Array(4 * h * w);
      for (let c = 0; c < 3; c++) for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) out[c * h * w + Math.floor(y / F) * w + Math.floor(x / F)]! += pixels[c * width * height + y * width + x]! / (F * F);
      return out;
    },
  };
}

/** A plan editing a size² gradient picture with a repaint square from `from` to `to` (exclusive). */
function editPlan(size: number, from: number, to: number, steps: number): ImagePlan {
  const original = new Uint8Array(size * size * 3);
  const pixels = new Float32Array(3 * size * size);
  const mask = new Float32Array(size * size);
  for (let y = 0; y < size; y++) {
    for (let x = 0; x < size; x++) {
      const i = y * size + x;
      const rgb = [40 + Math.round((x / size) * 170), 200 - Math.round((y / size) * 150), 90];
      original.set(rgb, i * 3);
      rgb.forEach((v, c) => (pixels[c * size * size + i] = v / 127.5 - 1));
      if (x >= from && x < to && y >= from && y < to) mask[i] = 1;
    }
  }
  const settings = modelSettings({ defaults: { max_size: 768 } } as never);
  return { settings, width: size, height: size, n: 1, steps, guidance: 0, seed: 77, format: 'png', quality: 90, edit: { pixels, original, mask } };
}

async function run(config: Record<string, unknown>, plan: ImagePlan): Promise<{ rgb: Buffer; inputs: Float32Array[] }> {
  const inputs: Float32Array[] = [];
  const { images } = await generate(fakeGraphs(config, inputs), { plan, prompt: 'a green field', log: () => {} });
  const rgb = await sharp(images[0]!.data).removeAlpha().raw().toBuffer();
  return { rgb, inputs };
}

describe('inpainting (4-channel UNet, as diffusers)', () => {
  it.each([
    ['Euler', SD_TURBO_SCHEDULER],
    ['Euler ancestral', { ...SD_TURBO_SCHEDULER, _class_name: 'EulerAncestralDiscreteScheduler' }],
  ])('%s: resets the kept latents to the noised original after every step, the clean original after the last', async (_, config) => {
    const size = 64;
    const steps = 4;
    const plan = editPlan(size, 20, 44, steps);
    const { inputs } = await run(config, plan);
    expect(inputs).toHaveLength(steps);
    const h = size / F;
    const plane = h * h;
    const graphs = fakeGraphs(config, []);
    const init = await graphs.encode(plan.edit!.pixels, size, size);
    const noise = gaussianNoise(plan.seed, 4 * plane);
    const sched = schedule(parseSchedulerConfig(config), steps);
    // Cells 2…5 on each axis hold masked pixels (20…43); the others are kept.
    const kept = (cell: number) => {
      const [cy, cx] = [Math.floor(cell / h), cell % h];
      return !(cy >= 2 && cy <= 5 && cx >= 2 && cx <= 5);
    };
    for (let s = 1; s < steps; s++) {
      for (let i = 0; i < inputs[s]!.length; i++) {
        if (kept(i % plane)) expect(inputs[s]![i]).toBeCloseTo(init[i]! + noise[i]! * sched.sigmas[s]!, 3);
      }
    }
    // The first step starts from noise everywhere (strength 1), at init_noise_sigma.
    inputs[0]!.forEach((v, i) => expect(v).toBeCloseTo(noise[i]! * sched.sigmas[0]!, 3));
  });

  it('fills a 24-pixel hole at 512x512 with the new content, a 3-pixel feather at its edge, and keeps every other pixel', async () => {
    const size = 512;
    const [from, to] = [244, 268];
    const plan = editPlan(size, from, to, 1);
    const { rgb } = await run(SD_TURBO_SCHEDULER, plan);
    let deepInside = 0;
    let ring = 0;
    let outsideChanged = 0;
    let insideOff = 0;
    for (let y = 0; y < size; y++) {
      for (let x = 0; x < size; x++) {
        const p = (y * size + x) * 3;
        if (!(x >= from && x < to && y >= from && y < to)) {
          if (!rgb.subarray(p, p + 3).equals(plan.edit!.original.subarray(p, p + 3))) outsideChanged++;
          continue;
        }
        const depth = Math.min(x - from, to - 1 - x, y - from, to - 1 - y) + 1;
        if (depth > 3) {
          if (TARGET.some((v, c) => Math.abs(rgb[p + c]! - v) > 1)) insideOff++;
          deepInside++;
        } else ring++;
      }
    }
    expect(outsideChanged).toBe(0);
    // 18x18 of the 24x24 hole is wholly the new content; the 3-pixel ring blends (1/4, 2/4, 3/4 new).
    expect(insideOff).toBe(0);
    expect([deepInside, ring]).toEqual([18 * 18, 24 * 24 - 18 * 18]);
  });
});
