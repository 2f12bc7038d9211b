import { randomInt } from 'node:crypto';
import { decodeRgba, resizeRgba, type OutputFormat, type RgbaImage } from '../../image/rgba.js';
import type { ModelKind } from '../catalog.js';
import type { Engine } from '../engine.js';
import { InvalidRequestError, UnsupportedError } from '../errors.js';
import type { Lease } from '../manager.js';
import type { InstalledModel } from '../store.js';
import { alphaMask, binarizeMask, maskedPixels, repaintMask } from '../../image/mask.js';
import {
  checkSteps,
  fitSize,
  IMAGE_QUALITIES,
  isValidSize,
  LATENT_DECODER_QUALITIES,
  MAX_GUIDANCE_SCALE,
  MAX_IMAGES,
  MAX_PARTIAL_IMAGES,
  MAX_PROMPT_CHARS,
  modelSettings,
  parseImageSize,
  type ImageQuality,
} from './image/options.js';
import {
  isImagePipeline,
  isLatentDecoderModel,
  type GeneratedImage,
  type ImagePipeline,
  type ImagePlan,
  type ImageProgress,
  type LatentDecoderModel,
  type PartialImage,
} from './image/image-pipeline.js';
import { rgbaToPlanar, rgbaToRgb } from '../../image/pixels.js';

/**
 * Image generation as a task: text to image, image to image (`init` with a
 * strength) and inpainting (`edit` with a mask), over a loaded
 * image pipeline (an ImagePipeline: families/stable-diffusion). The task
 * checks the request against the model and decodes every input image before
 * anything runs; the pipeline generates the `n` images (seeds seed, seed+1,
 * …), checking the request's signal and reporting progress between steps, so
 * a client that disconnects stops its generation at the next step. Generations queue per model (503 when the line is full). HTTP
 * (/v1/images/*) and `lserve imagine` both call `generateImages`.
 */

const KINDS: readonly ModelKind[] = ['image'];
/** Preferred default when several image models are installed. */
export { MAX_PROMPT_CHARS } from './image/options.js';
/** Largest input image (img2img, edits) before it is resized to a working size. */
export const MAX_INPUT_PIXELS = 16_000_000;

export interface ImageRequest {
  /** Model id or alias; defaults to the installed image model. */
  model?: string;
  prompt: string;
  /** What to steer away from: used only when guidance runs (guidanceScale > 1), accepted and unused otherwise, as in diffusers. */
  negativePrompt?: string;
  /** Images to make, 1–4. */
  n?: number;
  /** `WxH`, or 'auto'/undefined for the model's default (img2img and edits: the input's size when valid). */
  size?: string;
  steps?: number;
  /** Classifier-free guidance scale; guidance runs when > 1. */
  guidanceScale?: number;
  /** Seed of the first image; the others use seed+1, …. Random when absent. */
  seed?: number;
  outputFormat?: OutputFormat;
  /** JPEG/WebP quality, 0–100. */
  outputCompression?: number;
  /** img2img: the starting image and how much of it to repaint (0 keeps it, 1 ignores it). */
  init?: { image: Uint8Array; strength: number; param?: string };
  /**
   * Inpainting: the image and a mask of the same size (with an alpha channel, transparent = repaint; without one,
   * white = repaint; binarised at 50%); without a mask, the image's own transparency. A mask that marks nothing is a 400.
   */
  edit?: { image: Uint8Array; mask?: Uint8Array; param?: string; maskParam?: string };
  /** A latent decoder model (TAESD-class) to decode with instead of the model's own VAE. */
  vae?: string;
  /**
   * OpenAI's quality: 'low' and 'medium' decode with the installed latent
   * decoder (TAESD) when the request names no `vae`; the others, and these
   * when none is installed, with the model's own VAE.
   */
  quality?: ImageQuality;
  /** Partial images per image, 0–3, for GenerateOptions.onPartialImage (decoded with a latent decoder: none without one). */
  partialImages?: number;
  keepAliveMs?: number;
}

export type { GeneratedImage, ImageProgress, PartialImage } from './image/image-pipeline.js';
export type { ImageQuality } from './image/options.js';

/** How a request's images are decoded, decided before it waits its turn. */
export interface ImageDecoding {
  /** What decodes the images: 'vae' (the model's own) or the latent decoder's id. */
  decoder: string;
  /**
   * What asked for a latent decoder when none is installed, and went
   * without: a low or medium `quality` (decoded by the model's VAE instead),
   * partial images (none are made).
   */
  missing: Array<'quality' | 'partial_images'>;
}

export interface ImageResult {
  model: string;
  created: number;
  images: GeneratedImage[];
  /** The prompt as the model read it, when it was too long and cut (CLIP's 77 positions). */
  revisedPrompt?: string;
  decoding: ImageDecoding;
}

export interface GenerateOptions {
  signal?: AbortSignal;
  onProgress?: (progress: ImageProgress) => void;
  /** Called once the decoders are chosen, before the request waits its turn (nothing has run yet). */
  onDecoding?: (decoding: ImageDecoding) => void;
  /** Receives the request's partial images; none are made without it. */
  onPartialImage?: (partial: PartialImage) => void;
}

/** The latent decoder preferred when several are installed: the catalog's TAESD. */
const PREFERRED_LATENT_DECODER = 'taesd';

/** Words for what went without a latent decoder (ImageDecoding.missing), for a log line or a stream's notice. */
export function missingDecoderMessage(missing: ImageDecoding['missing'], quality?: ImageQuality): string {
  const what = missing.map((m) => (m === 'quality' ? `'quality: ${quality ?? 'low'}' is decoded with the model's full VAE` : 'no partial images are made'));
  return `No latent decoder is installed, so ${what.join(' and ')}. Run \`lserve pull ${PREFERRED_LATENT_DECODER}\` to get one (fast, less fine detail).`;
}

/** The image model a request that names none goes to (core/model-choice.ts; a latent decoder never is). */
export function defaultImageModel(engine: Engine): Promise<string> {
  return engine.defaultModel('image');
}

export async function generateImages(engine: Engine, request: ImageRequest, options: GenerateOptions = {}): Promise<ImageResult> {
  const { signal } = options;
  const name = request.model ?? (await defaultImageModel(engine));
  const installed = await engine.resolve(name, KINDS);
  if (isLatentDecoderModel(installed)) {
    throw new InvalidRequestError(`Model '${installed.id}' is a latent decoder used with image models ('vae'), not a model that generates images.`, { param: 'model', code: 'wrong_model_kind' });
  }
  const previews = options.onPartialImage ? (request.partialImages ?? 0) : 0;
  const choice = await chooseDecoders(engine, installed, request, previews > 0);
  const plan = await planRequest(installed, request);
  signal?.throwIfAborted();
  options.onDecoding?.(choice.decoding);

  const lease = await engine.acquire<ImagePipeline>(name, KINDS, { keepAliveMs: request.keepAliveMs });
  let vaeLease: Lease<LatentDecoderModel> | undefined;
  try {
    const pipeline = lease.model;
    if (!isImagePipeline(pipeline)) throw new InvalidRequestError(`Model '${installed.id}' cannot generate images.`, { param: 'model', code: 'wrong_model_kind' });
    if ((plan.init || plan.edit) && !pipeline.canEncode) {
      throw new UnsupportedError(`Model '${installed.id}' has no VAE encoder: it cannot start from an image (img2img, edits).`, { param: 'image' });
    }
    if (choice.latent !== undefined) vaeLease = await engine.acquire<LatentDecoderModel>(choice.latent, KINDS, { keepAliveMs: request.keepAliveMs });
    const latent = vaeLease?.model;
    return await pipeline.queue.run(async () => {
      const created = Math.floor(Date.now() / 1000);
      // Denoising steps as the sampler reports them (img2img runs fewer than `steps`), per image.
      const stepsDone: number[] = [];
      const { images, revisedPrompt } = await pipeline.generate({
        plan,
        prompt: request.prompt,
        negativePrompt: request.negativePrompt,
        decoder: choice.final ? latent : undefined,
        previews: latent && previews > 0 ? { count: previews, decoder: latent, onPreview: options.onPartialImage! } : undefined,
        signal,
        onProgress: (progress) => {
          stepsDone[progress.image] = Math.max(stepsDone[progress.image] ?? 0, progress.step);
          options.onProgress?.(progress);
        },
        log: engine.options.log,
      });
      engine.report({ type: 'images', model: installed.id, images: images.length, steps: stepsDone.reduce((sum, n) => sum + (n ?? 0), 0) });
      return { model: installed.id, created, images, revisedPrompt, decoding: choice.decoding };
    }, signal);
  } catch (error) {
    engine.reportRejection(installed.id, error);
    throw error;
  } finally {
    vaeLease?.release();
    lease.release();
  }
}

/**
 * The latent decoder a request loads, if any, and whether it decodes the
 * images themselves or only previews them: the request's `vae`; else, for
 * a low or medium `quality` or for partial images, the installed one.
 */
async function chooseDecoders(engine: Engine, installed: InstalledModel, request: ImageRequest, previews: boolean): Promise<{ latent?: string; final: boolean; decoding: ImageDecoding }> {
  const { quality, partialImages } = request;
  if (quality !== undefined && !IMAGE_QUALITIES.includes(quality)) {
    throw new InvalidRequestError(`'quality' must be one of ${IMAGE_QUALITIES.join(', ')}; got '${quality}'.`, { param: 'quality', code: 'invalid_value' });
  }
  if (partialImages !== undefined && !(Number.isInteger(partialImages) && partialImages >= 0 && partialImages <= MAX_PARTIAL_IMAGES)) {
    throw new InvalidRequestError(`'partial_images' must be an integer from 0 to ${MAX_PARTIAL_IMAGES}; got ${partialImages}.`, { param: 'partial_images', code: 'invalid_value' });
  }
  if (request.vae !== undefined) {
    const vae = await engine.resolve(request.vae, KINDS, 'vae');
    if (!isLatentDecoderModel(vae)) throw new InvalidRequestError(`'vae' must name a latent decoder model (e.g. taesd); '${vae.id}' is an image model.`, { param: 'vae', code: 'wrong_model_kind' });
    return { latent: vae.id, final: true, decoding: { decoder: vae.id, missing: [] } };
  }
  const tiny = quality !== undefined && LATENT_DECODER_QUALITIES.has(quality);
  const found = tiny || previews ? await installedLatentDecoder(engine, installed) : undefined;
  if (found) return { latent: found.id, final: tiny, decoding: { decoder: tiny ? found.id : 'vae', missing: [] } };
  const missing: ImageDecoding['missing'] = [];
  if (tiny) missing.push('quality');
  if (previews) missing.push('partial_images');
  return { final: false, decoding: { decoder: 'vae', missing } };
}

/**
 * The installed latent decoder for a model's latents (as many latent
 * channels): the catalog's TAESD when installed, else the latest installed.
 */
async function installedLatentDecoder(engine: Engine, model: InstalledModel): Promise<InstalledModel | undefined> {
  const channels = (m: InstalledModel) => Number(m.entry.defaults.latent_channels ?? 4);
  const decoders = (await engine.store.list()).filter((m) => isLatentDecoderModel(m) && channels(m) === channels(model));
  return decoders.find((m) => m.id === PREFERRED_LATENT_DECODER) ?? decoders.sort((a, b) => (b.installedAt ?? '').localeCompare(a.installedAt ?? ''))[0];
}

async function planRequest(installed: InstalledModel, request: ImageRequest): Promise<ImagePlan> {
  const settings = modelSettings(installed.entry);
  const id = installed.id;
  if (!request.prompt.trim()) throw new InvalidRequestError("'prompt' is empty: describe the image to make.", { param: 'prompt', code: 'missing_required_parameter' });
  if (request.prompt.length > MAX_PROMPT_CHARS) throw new InvalidRequestError(`'prompt' has ${request.prompt.length} characters; at most ${MAX_PROMPT_CHARS} are accepted.`, { param: 'prompt', code: 'invalid_value' });
  if (request.negativePrompt !== undefined && request.negativePrompt.length > MAX_PROMPT_CHARS) {
    throw new InvalidRequestError(`'negative_prompt' has ${request.negativePrompt.length} characters; at most ${MAX_PROMPT_CHARS} are accepted.`, { param: 'negative_prompt', code: 'invalid_value' });
  }
  const n = request.n ?? 1;
  if (!Number.isInteger(n) || n < 1 || n > MAX_IMAGES) throw new InvalidRequestError(`'n' must be an integer from 1 to ${MAX_IMAGES}; got ${n}.`, { param: 'n', code: 'invalid_value' });
  const steps = request.steps ?? settings.steps;
  checkSteps(steps, settings.maxSteps, id);
  const guidance = request.guidanceScale ?? settings.guidanceScale;
  if (!(guidance >= 0 && guidance <= MAX_GUIDANCE_SCALE)) throw new InvalidRequestError(`'guidance_scale' must be from 0 to ${MAX_GUIDANCE_SCALE}; got ${guidance}.`, { param: 'guidance_scale', code: 'invalid_value' });
  // 'negative_prompt' is accepted whatever the guidance; as in diffusers, it is used only when guidance runs (> 1).
  const seed = request.seed ?? randomInt(0, 2 ** 31);
  if (!Number.isSafeInteger(seed) || seed < 0 || seed > 0xffffffff) throw new InvalidRequestError(`'seed' must be an integer from 0 to 4294967295; got ${seed}.`, { param: 'seed', code: 'invalid_value' });
  const quality = request.outputCompression ?? 90;
  if (!Number.isInteger(quality) || quality < 0 || quality > 100) throw new InvalidRequestError(`'output_compression' must be an integer from 0 to 100; got ${quality}.`, { param: 'output_compression', code: 'invalid_value' });
  const requested = parseImageSize(request.size, settings, id);
  const plan: ImagePlan = { settings, width: requested?.width ?? settings.width, height: requested?.height ?? settings.height, n, steps, guidance, seed, format: request.outputFormat ?? 'png', quality };

  const source = request.init ?? request.edit;
  if (source) {
    const param = source.param ?? 'image';
    let image = await decodeRgba(source.image, { param, maxPixels: MAX_INPUT_PIXELS });
    let mask: Float32Array | undefined;
    if (request.edit) {
      const maskParam = request.edit.maskParam ?? 'mask';
      if (request.edit.mask) {
        const maskImage = await decodeRgba(request.edit.mask, { param: maskParam, maxPixels: MAX_INPUT_PIXELS });
        if (maskImage.width !== image.width || maskImage.height !== image.height) {
          throw new InvalidRequestError(`'${maskParam}' is ${maskImage.width}x${maskImage.height} but '${param}' is ${image.width}x${image.height}: they must be the same size (a mask is not resized).`, {
            param: maskParam,
            code: 'mask_size_mismatch',
          });
        }
        mask = binarizeMask(repaintMask(maskImage));
        if (maskedPixels(mask) === 0) throw emptyMask(maskParam, maskImage.hasAlpha);
      } else {
        mask = alphaMask(image);
        if (!mask) throw new InvalidRequestError(`A '${maskParam}' is required: '${param}' has no transparent pixels to repaint.`, { param: maskParam, code: 'missing_required_parameter' });
      }
    }
    // The working size: the one asked for, else the image's own when the model takes it, else a fit of it.
    const size = requested ?? (isValidSize(image.width, image.height, settings) ? { width: image.width, height: image.height } : fitSize(image.width, image.height, settings));
    plan.width = size.width;
    plan.height = size.height;
    if (mask && (image.width !== size.width || image.height !== size.height)) {
      // Resized with the image to the working size, then binarised again (as diffusers' mask processor does).
      mask = binarizeMask(await resizeMask(mask, image, size));
      if (maskedPixels(mask) === 0) {
        throw new InvalidRequestError(`The area to edit vanishes when '${param}' is resized to ${size.width}x${size.height}: mark a larger area, or send the image at that size.`, {
          param: request.edit?.mask ? (request.edit.maskParam ?? 'mask') : param,
          code: 'empty_mask',
        });
      }
    }
    image = await resizeRgba(image, size.width, size.height);
    const pixels = rgbaToPlanar(image);
    if (request.init) {
      const strength = request.init.strength;
      if (!(strength >= 0 && strength <= 1)) throw new InvalidRequestError(`'strength' must be from 0 to 1; got ${strength}.`, { param: 'strength', code: 'invalid_value' });
      plan.init = { pixels, strength };
    } else {
      plan.edit = { pixels, original: rgbaToRgb(image), mask: mask! };
    }
  }
  return plan;
}

/** The 400 for a mask that marks nothing to edit, saying which convention it was read by. */
function emptyMask(param: string, hasAlpha: boolean): InvalidRequestError {
  const message = hasAlpha
    ? `'${param}' has nothing to edit: it has an alpha channel, so its transparent pixels (alpha below 128) mark the area to edit (OpenAI's convention), and none is. A black-and-white mask (white = edit) must have no alpha channel.`
    : `'${param}' has nothing to edit: it has no alpha channel, so its white pixels (luminance at least 50%) mark the area to edit, and none is (it is all dark).`;
  return new InvalidRequestError(message, { param, code: 'empty_mask' });
}

/** Resizes a repaint mask with its image (as a grey image through the same resampler). */
async function resizeMask(mask: Float32Array, image: RgbaImage, size: { width: number; height: number }): Promise<Float32Array> {
  const grey = new Uint8Array(mask.length * 4);
  for (let i = 0; i < mask.length; i++) {
    const v = Math.round(mask[i]! * 255);
    grey[i * 4] = grey[i * 4 + 1] = grey[i * 4 + 2] = v;
    grey[i * 4 + 3] = 255;
  }
  const resized = await resizeRgba({ data: grey, width: image.width, height: image.height, hasAlpha: false }, size.width, size.height);
  return Float32Array.from({ length: size.width * size.height }, (_, i) => resized.data[i * 4]! / 255);
}
