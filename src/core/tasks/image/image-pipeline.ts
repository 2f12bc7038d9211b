import type { OutputFormat } from '../../../image/rgba.js';
import type { LoadedModel } from '../../loader.js';
import type { ImageModelSettings } from './options.js';
import type { JobQueue } from '../../job-queue.js';

/**
 * The contract between the image task (core/tasks/image.ts) and an image
 * family (families/stable-diffusion implements it): a checked request (the
 * plan), the pipeline that turns it into images, and the latent decoders
 * (TAESD-class) a request may name as its `vae`.
 */

export { DECODER_WEIGHTS_ROLE, isLatentDecoderModel, LATENT_DECODER_ROLE } from '../../model-choice.js';

/** A request checked against the model, every input image decoded: nothing left that can be a 4xx. */
export interface ImagePlan {
  settings: ImageModelSettings;
  width: number;
  height: number;
  n: number;
  steps: number;
  guidance: number;
  seed: number;
  format: OutputFormat;
  quality: number;
  init?: { pixels: Float32Array; strength: number };
  /** Inpainting: the image (planar and 8-bit RGB) and its binary repaint mask (1 = repaint) at the working size. */
  edit?: { pixels: Float32Array; original: Uint8Array; mask: Float32Array };
}

export interface GeneratedImage {
  data: Buffer;
  format: OutputFormat;
  width: number;
  height: number;
  seed: number;
}

export interface ImageProgress {
  /** 0-based index of the image being made, of `images`. */
  image: number;
  images: number;
  /** Steps done for this image, of `steps` (a decode follows the last). */
  step: number;
  steps: number;
}

/** A stand-alone decoder used in place of a pipeline's own: latents as the UNet leaves them → pixels [3, H, W] in [-1, 1]. */
export interface LatentDecoderModel extends LoadedModel {
  decode(scaledLatents: Float32Array, height: number, width: number): Promise<Float32Array>;
}

/** A preview of an image while it is made (OpenAI's partial image). */
export interface PartialImage {
  /** 0-based index of the image it previews. */
  image: number;
  /** 0-based index among that image's previews. */
  index: number;
  data: GeneratedImage;
}

export interface ImageJob {
  plan: ImagePlan;
  prompt: string;
  negativePrompt?: string;
  /** The latent decoder that decodes the images instead of the model's own VAE (the request's `vae`, or its `quality`'s). */
  decoder?: LatentDecoderModel;
  /**
   * Partial images: up to `count` per image (at most one per step before the
   * last), at evenly spaced steps, decoded by `decoder` from the sampler's
   * prediction of the finished latents at that step.
   */
  previews?: { count: number; decoder: LatentDecoderModel; onPreview: (preview: PartialImage) => void };
  signal?: AbortSignal;
  onProgress?: (progress: ImageProgress) => void;
  log: (message: string) => void;
}

/** What a loaded image model (kind `image`, not a latent decoder) offers the task. */
export interface ImagePipeline extends LoadedModel {
  /** Whether it can start from an image (img2img, edits): a VAE encoder. */
  readonly canEncode: boolean;
  /** Generations run one at a time per model, with a bounded line (503 beyond it). */
  readonly queue: JobQueue;
  generate(job: ImageJob): Promise<{ images: GeneratedImage[]; revisedPrompt?: string }>;
}

export function isImagePipeline(model: LoadedModel): model is ImagePipeline {
  return typeof (model as Partial<ImagePipeline>).generate === 'function';
}
