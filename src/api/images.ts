import { z } from 'zod';
import { IMAGE_QUALITIES, MAX_GUIDANCE_SCALE, MAX_IMAGE_SIDE, MAX_IMAGES, MAX_PARTIAL_IMAGES, MAX_PROMPT_CHARS, MAX_STEPS } from '../core/tasks/image/options.js';
import { OUTPUT_FORMATS } from '../image/rgba.js';
import type { ImageRequest } from '../core/tasks/image.js';
import { keepAliveField } from './common.js';

/**
 * The images endpoints. OpenAI's fields (`prompt`, `model`, `n`, `size`,
 * `quality`, `response_format`, `output_format`, `output_compression`,
 * `partial_images`, `user`; API reference as of 2026-11) plus the
 * Stable Diffusion ones clients of local servers send (`seed`, `steps`,
 * `guidance_scale`, `negative_prompt`, `strength`, and `vae` to decode with a
 * tiny latent decoder). Unknown fields are a 400 naming them. Multipart
 * fields arrive as text; the route turns the numeric ones into numbers
 * before these schemas see them. `null` is read as absent (some clients send
 * every field).
 */

/**
 * The bounds every images request is held to whatever the model (DESIGN.md
 * §3: fields that multiply work or memory), checked here, before a model is
 * even resolved; each is a 400 whose message states the limit. The model's
 * own ranges (SD-Turbo: sides 64–768, steps 1–4) are checked next, still
 * before it loads. Input images (img2img, edits) are held to MAX_INPUT_PIXELS
 * (src/core/tasks/image.ts) on their header, before they are decoded: 413.
 */
export { MAX_GUIDANCE_SCALE, MAX_IMAGE_SIDE, MAX_IMAGES, MAX_PARTIAL_IMAGES, MAX_PROMPT_CHARS, MAX_STEPS };

/** `WxH` with each side at most MAX_IMAGE_SIDE, or `auto`; the model's range is checked later. The form itself is the task's (code invalid_size). */
const sizeField = z
  .string()
  .min(1)
  .superRefine((value, ctx) => {
    const match = /^\s*(\d+)x(\d+)\s*$/.exec(value);
    if (match && (Number(match[1]) > MAX_IMAGE_SIDE || Number(match[2]) > MAX_IMAGE_SIDE)) {
      ctx.addIssue({ code: 'custom', message: `each side must be at most ${MAX_IMAGE_SIDE} pixels; got '${value}'`, params: { code: 'invalid_size' }, input: value });
    }
  });

const common = {
  prompt: z.string().max(MAX_PROMPT_CHARS, `must be at most ${MAX_PROMPT_CHARS} characters`),
  model: z.string().min(1).nullish(),
  n: z.int().min(1).max(MAX_IMAGES, `must be at most ${MAX_IMAGES}`).nullish(),
  /** `WxH` in multiples of 64 within the model's range, or `auto`. */
  size: sizeField.nullish(),
  response_format: z.enum(['url', 'b64_json']).nullish(),
  output_format: z.enum(OUTPUT_FORMATS).nullish(),
  /** JPEG/WebP quality (OpenAI's name), 0–100. */
  output_compression: z.int().min(0).max(100).nullish(),
  seed: z.int().min(0).max(0xffffffff).nullish(),
  steps: z.int().min(1).max(MAX_STEPS, `must be at most ${MAX_STEPS}`).nullish(),
  guidance_scale: z.number().min(0).max(MAX_GUIDANCE_SCALE, `must be at most ${MAX_GUIDANCE_SCALE}`).nullish(),
  negative_prompt: z.string().max(MAX_PROMPT_CHARS, `must be at most ${MAX_PROMPT_CHARS} characters`).nullish(),
  /** A latent decoder model (e.g. taesd) to decode with instead of the model's own VAE. */
  vae: z.string().min(1).nullish(),
  /** OpenAI's quality: low and medium decode with TAESD where it is installed (and no `vae` is named), the others with the model's VAE. */
  quality: z.enum(IMAGE_QUALITIES, { error: `must be one of ${IMAGE_QUALITIES.join(', ')}` }).nullish(),
  /** With `stream: true`: partial images per image (previews decoded with TAESD), 0–3; without a stream it changes nothing, as at OpenAI. */
  partial_images: z.int().min(0, `must be from 0 to ${MAX_PARTIAL_IMAGES}`).max(MAX_PARTIAL_IMAGES, `must be from 0 to ${MAX_PARTIAL_IMAGES}`).nullish(),
  /** OpenAI's end-user id: accepted, not used. */
  user: z.string().nullish(),
  /**
   * true: answer an SSE stream of progress events (`image_generation.progress`
   * / `image_edit.progress`, step by step) and one `….completed` event per
   * image, instead of one JSON answer (see ImageStreamEvent).
   */
  stream: z.boolean().nullish(),
  keep_alive: keepAliveField,
};

/** POST /v1/images/generations (JSON). */
export const imageGenerationSchema = z.object(common);
export type ImageGenerationBody = z.infer<typeof imageGenerationSchema>;

/**
 * POST /v1/images/edits: multipart `image` (or `image[]`) and `mask` files,
 * or JSON with `image` / `mask` as base64, data URIs, paths or URLs.
 */
export const imageEditSchema = z.object({
  ...common,
  image: z.string().min(1).nullish(),
  mask: z.string().min(1).nullish(),
});
export type ImageEditBody = z.infer<typeof imageEditSchema>;

/**
 * POST /v1/images/img2img: multipart `image` file or JSON `image`, and
 * `strength` 0–1 (how much to repaint; default 0.5). 0 returns the image
 * (through the VAE); above 0, round(steps·strength) steps run, at least one,
 * starting at the noise level the strength names (partialSchedule in
 * src/families/stable-diffusion/scheduler.ts), so no strength schedules more than `steps`.
 */
export const imageToImageSchema = z.object({
  ...common,
  image: z.string().min(1).nullish(),
  strength: z.number().min(0, 'must be from 0 to 1').max(1, 'must be from 0 to 1').nullish(),
});
export type ImageToImageBody = z.infer<typeof imageToImageSchema>;

/** The fields multipart forms carry as text that the schemas take as numbers. */
export const NUMERIC_FIELDS = ['n', 'output_compression', 'seed', 'steps', 'guidance_scale', 'strength', 'partial_images'] as const;

export interface ImageData {
  url?: string;
  b64_json?: string;
  revised_prompt?: string;
}

/**
 * The events of an images request with `stream: true` (SSE, `event:` naming
 * the type): OpenAI's `image_generation.completed` / `image_edit.completed`
 * (generations / edits and img2img), one per image, with `b64_json` (or
 * `url` when `response_format: "url"` is asked for) and its `seed`,
 * preceded by lserve's `….progress` events and, with `partial_images`,
 * OpenAI's `….partial_image` events (always `b64_json`; lserve adds the
 * `image` they preview). `….notice` (lserve's, once, first) says what the
 * stream goes without (partial images, when no latent decoder is
 * installed); `error` ends a stream that fails after it began.
 */
export type ImageStreamEvent =
  | { type: 'image_generation.progress' | 'image_edit.progress'; image: number; images: number; step: number; steps: number }
  | ({ type: 'image_generation.completed' | 'image_edit.completed'; image: number; seed: number } & ImageEventFields & ImageData)
  | ({ type: 'image_generation.partial_image' | 'image_edit.partial_image'; image: number; partial_image_index: number; b64_json: string } & ImageEventFields)
  | { type: 'image_generation.notice' | 'image_edit.notice'; code: 'partial_images_unavailable'; message: string }
  | { type: 'error'; error: { message: string; type: string; param: string | null; code: string | null } };

/** The fields OpenAI's image events share. */
export interface ImageEventFields {
  created_at: number;
  size: string;
  output_format: string;
  /** The request's `quality` (`auto` when it gave none). */
  quality: string;
  /** Always `opaque`: these models paint no transparency. */
  background: 'opaque';
}

/** The response header naming what decoded an answer's images: `vae` (the model's own) or a latent decoder's id (e.g. `taesd`). */
export const IMAGE_DECODER_HEADER = 'lserve-image-decoder';

/** The response of every images endpoint (OpenAI's shape). */
export interface ImagesResponse {
  created: number;
  data: ImageData[];
}

/** The image task's request for a checked body's common fields (an edit's or img2img's input image is the route's to read and add). */
export function toImageRequest(body: ImageGenerationBody): ImageRequest {
  const opt = <T>(v: T | null | undefined): T | undefined => (v === null ? undefined : v);
  return {
    model: opt(body.model),
    prompt: body.prompt,
    negativePrompt: opt(body.negative_prompt),
    n: opt(body.n),
    size: opt(body.size),
    steps: opt(body.steps),
    guidanceScale: opt(body.guidance_scale),
    seed: opt(body.seed),
    outputFormat: opt(body.output_format),
    outputCompression: opt(body.output_compression),
    vae: opt(body.vae),
    quality: opt(body.quality),
    partialImages: opt(body.partial_images),
    keepAliveMs: body.keep_alive,
  };
}
