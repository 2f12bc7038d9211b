import type { GeneratedImage, ImageJob, ImagePlan } from '../../core/tasks/image/image-pipeline.js';
import { composite, latentMask, pasteWeight } from '../../image/mask.js';
import { planarToRgb } from '../../image/pixels.js';
import { encodeRgb } from '../../image/rgba.js';
import type { ClipTokenizer } from './clip-tokenizer.js';
import { gaussianStream, seedOf } from './noise.js';
import { ancestralStep, eulerStep, initNoiseSigma, parseSchedulerConfig, partialSchedule, predictedOriginal, scaleInput, schedule, type Schedule, type SchedulerConfig } from './scheduler.js';

/**
 * Stable Diffusion's sampling: text to image, image to image and inpainting
 * over the model's graphs (diffusion-pipeline.ts implements DiffusionGraphs
 * over ONNX Runtime). Euler or ancestral Euler steps on the export's discrete schedule
 * (scheduler.ts), classifier-free guidance, and inpainting as diffusers'
 * StableDiffusionInpaintPipeline does it for a 4-channel UNet: the mask on
 * the latent grid, the kept latents replaced after every step by the
 * original's latents noised to the σ reached, the decoded result pasted over
 * the original outside the mask.
 */

/** Static facts about the model, from its catalog defaults and its graphs. */
export interface DiffusionInfo {
  /** Latent channels (4 for SD 1.x/2.x). */
  latentChannels: number;
  /** The VAE's latent scale (0.18215 for SD 1.x/2.x): the UNet works on latent · scale. */
  scalingFactor: number;
  /** Pixels per latent cell. */
  vaeFactor: number;
  /** Whether a VAE encoder is present (img2img, edits). */
  canEncode: boolean;
}

/** Text states kept in the UNet's worker for the steps of one generation. */
export interface TextStates {
  /** Batch rows: 1, or 2 with classifier-free guidance (unconditional first). */
  readonly batch: number;
  /** Positions per row (77). */
  readonly length: number;
  release(): Promise<void>;
}

/** What the sampling loop needs from the model's graphs. */
export interface DiffusionGraphs {
  readonly info: DiffusionInfo;
  readonly tokenizer: ClipTokenizer;
  /** The export's scheduler_config.json as read; undefined when it ships none. */
  readonly schedulerConfig: unknown;
  encodeText(rows: readonly Int32Array[]): Promise<TextStates>;
  predict(sample: Float32Array, dims: readonly number[], timestep: number, states: TextStates): Promise<Float32Array>;
  decode(latents: Float32Array, height: number, width: number, signal?: AbortSignal): Promise<Float32Array>;
  encode(pixels: Float32Array, height: number, width: number): Promise<Float32Array>;
}

const schedulers = new WeakMap<DiffusionGraphs, SchedulerConfig>();

function schedulerOf(pipeline: DiffusionGraphs): SchedulerConfig {
  let config = schedulers.get(pipeline);
  if (!config) schedulers.set(pipeline, (config = parseSchedulerConfig(pipeline.schedulerConfig)));
  return config;
}

/**
 * The steps (1-based) after which an image's partial images are shown: up
 * to `count`, evenly spaced, each before the last step (whose result is
 * the image itself), so a 1-step image has none and `steps` steps at most
 * steps − 1.
 */
export function previewSteps(count: number, steps: number): number[] {
  const n = Math.max(0, Math.min(count, steps - 1));
  return Array.from({ length: n }, (_, j) => Math.round(((j + 1) * steps) / (n + 1)));
}

/**
 * Generates a plan's images: the prompt encoded once, then for each image
 * (seeds seed, seed+1, …) the sampling loop one UNet step at a time, the
 * signal checked and progress reported between steps; decoded by the job's
 * latent decoder or the model's own VAE, composited over the original for
 * edits, and encoded. Partial images (job.previews) are the latent
 * decoder's picture of the UNet's prediction of the finished latents (x̂₀)
 * at their steps, finished the same way.
 */
export async function generate(pipeline: DiffusionGraphs, job: ImageJob): Promise<{ images: GeneratedImage[]; revisedPrompt?: string }> {
  const { plan, signal, onProgress, decoder: tiny, previews } = job;
  const config = schedulerOf(pipeline);
  const { info, tokenizer } = pipeline;
  const guided = plan.guidance > 1;
  const prompt = tokenizer.encode(job.prompt);
  const rows = guided ? [tokenizer.encode(job.negativePrompt ?? '').ids, prompt.ids] : [prompt.ids];
  const states = await pipeline.encodeText(rows);
  const images: GeneratedImage[] = [];
  const h = plan.height / info.vaeFactor;
  const w = plan.width / info.vaeFactor;
  let progress = { image: 0, step: 0, steps: 0 };
  try {
    const initLatents = plan.init ?? plan.edit ? await encodeImage(pipeline, (plan.init ?? plan.edit)!.pixels, plan) : undefined;
    // Pixels [3, H, W] in [-1, 1] to the image's file.
    const finish = async (planar: Float32Array, seed: number): Promise<GeneratedImage> => {
      let rgb = planarToRgb(planar, plan.width, plan.height);
      // Outside the mask the original's pixels, exactly; a narrow feather just inside its edge.
      if (plan.edit) rgb = composite(plan.edit.original, rgb, pasteWeight(plan.edit.mask, plan.width, plan.height));
      return { data: await encodeRgb(rgb, plan.width, plan.height, plan.format, plan.quality), format: plan.format, width: plan.width, height: plan.height, seed };
    };
    for (let i = 0; i < plan.n; i++) {
      const seed = seedOf(plan.seed, i);
      const sched = plan.init ? partialSchedule(config, plan.steps, plan.init.strength) : schedule(config, plan.steps);
      progress = { image: i, step: 0, steps: sched.timesteps.length };
      onProgress?.({ image: i, images: plan.n, step: 0, steps: sched.timesteps.length });
      let shown = 0;
      const preview = previews && {
        steps: new Set(previewSteps(previews.count, sched.timesteps.length)),
        show: async (x0: Float32Array) => previews.onPreview({ image: i, index: shown++, data: await finish(await previews.decoder.decode(x0, h, w), seed) }),
      };
      const latents = await sample(pipeline, config, states, sched, plan, seed, h, w, initLatents, signal, (step) => {
        progress.step = step;
        onProgress?.({ image: i, images: plan.n, step, steps: sched.timesteps.length });
      }, preview);
      signal?.throwIfAborted();
      const planar = tiny ? await tiny.decode(latents, h, w) : await pipeline.decode(scaled(latents, 1 / info.scalingFactor), h, w, signal);
      images.push(await finish(planar, seed));
    }
  } catch (error) {
    if (signal?.aborted) job.log(`image generation stopped (client gone) at step ${progress.step}/${progress.steps} of image ${progress.image + 1}/${plan.n}`);
    throw error;
  } finally {
    await states.release().catch(() => undefined);
  }
  return { images, revisedPrompt: prompt.truncated ? prompt.kept : undefined };
}

/** The scaled latents (×scalingFactor) of the plan's input image. */
async function encodeImage(pipeline: DiffusionGraphs, pixels: Float32Array, plan: ImagePlan): Promise<Float32Array> {
  const latents = await pipeline.encode(pixels.slice(), plan.height, plan.width);
  return scaled(latents, pipeline.info.scalingFactor);
}

function scaled(values: Float32Array, k: number): Float32Array {
  const out = new Float32Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = values[i]! * k;
  return out;
}

/**
 * The sampling loop for one image: initial latents from the seed's noise
 * (scaled to the schedule's init_noise_sigma; the input image plus noise at
 * the first σ for img2img), then Euler steps (ancestral ones add fresh
 * noise from the same seeded stream) with optional guidance. For edits, as
 * diffusers' inpainting at strength 1: everything starts from noise, and
 * after each step every kept latent cell (none of its pixels masked) is set
 * to the original's latents noised with the same noise to the σ just
 * reached, the clean original after the last step. At a preview's step,
 * the prediction x̂₀ (the clean original in kept cells) is shown after the
 * step's progress.
 */
async function sample(
  pipeline: DiffusionGraphs,
  config: SchedulerConfig,
  states: TextStates,
  sched: Schedule,
  plan: ImagePlan,
  seed: number,
  h: number,
  w: number,
  init: Float32Array | undefined,
  signal: AbortSignal | undefined,
  onStep: (step: number) => void,
  preview?: { steps: ReadonlySet<number>; show: (x0: Float32Array) => Promise<void> },
): Promise<Float32Array> {
  const channels = pipeline.info.latentChannels;
  const plane = h * w;
  const draw = gaussianStream(seed);
  const noise = draw(channels * plane);
  const x = new Float32Array(noise.length);
  const repaint = plan.edit ? latentMask(plan.edit.mask, plan.width, plan.height, pipeline.info.vaeFactor) : undefined;
  if (init && !plan.edit) {
    const sigma0 = sched.sigmas[0]!;
    for (let i = 0; i < x.length; i++) x[i] = init[i]! + noise[i]! * sigma0;
  } else {
    const scale = initNoiseSigma(config, sched);
    for (let i = 0; i < x.length; i++) x[i] = noise[i]! * scale;
  }
  const batch = states.batch;
  const steps = sched.timesteps.length;
  for (let s = 0; s < steps; s++) {
    signal?.throwIfAborted();
    const sigma = sched.sigmas[s]!;
    const input = scaleInput(x, sigma, new Float32Array(x.length * batch));
    if (batch === 2) input.copyWithin(x.length, 0, x.length);
    const output = await pipeline.predict(input, [batch, channels, h, w], sched.timesteps[s]!, states);
    const eps = batch === 2 ? guide(output, x.length, plan.guidance) : output;
    const x0 = preview?.steps.has(s + 1) ? predictedOriginal(x, eps, sigma, config.prediction_type) : undefined;
    if (x0 && repaint && init) for (let i = 0; i < x0.length; i++) if (repaint[i % plane] === 0) x0[i] = init[i]!;
    const next = sched.sigmas[s + 1]!;
    if (config.sampler === 'euler_ancestral') ancestralStep(x, eps, sigma, next, config.prediction_type, draw(x.length));
    else eulerStep(x, eps, sigma, next, config.prediction_type);
    if (repaint && init) {
      const level = s === steps - 1 ? 0 : next;
      for (let i = 0; i < x.length; i++) if (repaint[i % plane] === 0) x[i] = init[i]! + noise[i]! * level;
    }
    onStep(s + 1);
    if (x0) await preview!.show(x0);
  }
  return x;
}

/** ε = ε_uncond + g·(ε_cond − ε_uncond) from a batch of two predictions. */
export function guide(output: Float32Array, size: number, scale: number): Float32Array {
  const eps = new Float32Array(size);
  for (let i = 0; i < size; i++) eps[i] = output[i]! + scale * (output[size + i]! - output[i]!);
  return eps;
}
