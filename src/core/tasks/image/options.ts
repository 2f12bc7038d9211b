import { InvalidRequestError } from '../../errors.js';
import type { CatalogEntry } from '../../catalog.js';

/**
 * What an image model allows, from its catalog defaults: the default and
 * extreme sizes (each side a multiple of 64), default and most steps, the
 * default guidance scale. Requests are checked against these before any
 * work starts; every violation is a 400 that names the valid range.
 */

export const SIZE_STEP = 64;

/*
 * Request bounds that hold whatever the model (the request schemas in
 * src/api/images.ts check them before any model is resolved or loaded; the
 * model's own, narrower ranges are checked next, still before it loads).
 */

/** Most images per request (`n`, OpenAI's field). */
export const MAX_IMAGES = 4;
/** Most denoising steps a request may ask for: the training schedule's 1000 timesteps (a model's `max_steps` is lower: SD-Turbo 4). */
export const MAX_STEPS = 1000;
/** Longest side of `size` any model is asked for, in pixels (a model's `max_size` is lower: SD-Turbo 768). */
export const MAX_IMAGE_SIDE = 2048;
/** Longest `prompt` and `negative_prompt`, in characters (CLIP reads the first 75 tokens anyway). */
export const MAX_PROMPT_CHARS = 32_000;
/** Highest `guidance_scale`. */
export const MAX_GUIDANCE_SCALE = 30;
/** Most partial images per image of a streamed request (`partial_images`, OpenAI's bound): each costs a latent decode. */
export const MAX_PARTIAL_IMAGES = 3;

/**
 * OpenAI's `quality` values: gpt-image's low, medium, high, auto and
 * dall-e-3's standard, hd. low and medium decode with a latent decoder
 * (TAESD) where one is installed; the others with the model's own VAE.
 */
export const IMAGE_QUALITIES = ['low', 'medium', 'high', 'auto', 'standard', 'hd'] as const;
export type ImageQuality = (typeof IMAGE_QUALITIES)[number];
/** The qualities a latent decoder serves: OpenAI's cheaper tiers, where speed matters more than fine detail. */
export const LATENT_DECODER_QUALITIES: ReadonlySet<ImageQuality> = new Set(['low', 'medium']);

export interface ImageModelSettings {
  width: number;
  height: number;
  minSide: number;
  maxSide: number;
  steps: number;
  maxSteps: number;
  guidanceScale: number;
}

export function modelSettings(entry: CatalogEntry): ImageModelSettings {
  const d = entry.defaults;
  const num = (key: string, fallback: number) => (typeof d[key] === 'number' ? (d[key] as number) : fallback);
  return {
    width: num('width', 512),
    height: num('height', 512),
    minSide: num('min_size', SIZE_STEP),
    maxSide: num('max_size', 768),
    steps: num('steps', 1),
    maxSteps: num('max_steps', 50),
    guidanceScale: num('guidance_scale', 0),
  };
}

export function sizeRange(settings: ImageModelSettings): string {
  return `each side a multiple of ${SIZE_STEP} from ${settings.minSide} to ${settings.maxSide}`;
}

/** `WxH` (or 'auto' / absent for the model's default) → a size the model takes, else a 400 listing the range. */
export function parseImageSize(size: string | undefined, settings: ImageModelSettings, model: string): { width: number; height: number } | undefined {
  if (size === undefined || size === 'auto') return undefined;
  const match = /^(\d{1,5})x(\d{1,5})$/.exec(size.trim());
  const width = match ? Number(match[1]) : NaN;
  const height = match ? Number(match[2]) : NaN;
  const ok = (v: number) => Number.isInteger(v) && v % SIZE_STEP === 0 && v >= settings.minSide && v <= settings.maxSide;
  if (!ok(width) || !ok(height)) {
    throw new InvalidRequestError(`'size' must be WIDTHxHEIGHT with ${sizeRange(settings)} for model '${model}' (e.g. ${settings.width}x${settings.height}); got '${size}'.`, {
      param: 'size',
      code: 'invalid_size',
    });
  }
  return { width, height };
}

/** Whether an image's own size is one the model takes as is. */
export function isValidSize(width: number, height: number, settings: ImageModelSettings): boolean {
  const ok = (v: number) => v % SIZE_STEP === 0 && v >= settings.minSide && v <= settings.maxSide;
  return ok(width) && ok(height);
}

/**
 * The size to work at for an input image of another size: its aspect ratio
 * kept, the longer side at the model's default (within range), both sides
 * rounded to multiples of 64.
 */
export function fitSize(width: number, height: number, settings: ImageModelSettings): { width: number; height: number } {
  const target = Math.min(settings.maxSide, Math.max(settings.width, settings.height));
  const scale = target / Math.max(width, height);
  const round = (v: number) => Math.min(settings.maxSide, Math.max(settings.minSide, Math.round((v * scale) / SIZE_STEP) * SIZE_STEP));
  return { width: round(width), height: round(height) };
}

/** Steps a model allows; a value outside is a 400 that says the range. */
export function checkSteps(steps: number, max: number, model: string): void {
  if (!Number.isInteger(steps) || steps < 1 || steps > max) {
    throw new InvalidRequestError(`'steps' must be an integer from 1 to ${max} for model '${model}'; got ${steps}.`, { param: 'steps', code: 'invalid_value' });
  }
}
