import { Router, type Request, type Response } from 'express';
import multer from 'multer';
import {
  IMAGE_DECODER_HEADER,
  imageEditSchema,
  imageGenerationSchema,
  imageToImageSchema,
  NUMERIC_FIELDS,
  toImageRequest,
  type ImageData,
  type ImagesResponse,
  type ImageStreamEvent,
} from '../../api/images.js';
import { parseKnownFields } from '../../api/validate.js';
import { InvalidRequestError, UnsupportedError } from '../../core/errors.js';
import { generateImages, missingDecoderMessage, type GeneratedImage, type ImageDecoding, type ImageRequest, type ImageResult } from '../../core/tasks/image.js';
import { parseByteSize, parseDuration } from '../../core/units.js';
import { sendCachedFile } from '../cached-file.js';
import { requestSignal, type ServerContext } from '../context.js';
import { decodeBase64Payload, readRemoteInput } from '../remote-input.js';
import { openAIError, toLserveError } from '../errors.js';
import { SseWriter } from '../sse.js';

/**
 * The images API: POST /v1/images/generations (JSON), /v1/images/edits
 * (multipart `image` or `image[]` + `mask`, or JSON), /v1/images/img2img
 * (multipart or JSON `image` + `strength`), and GET /v1/images/cache/:filename
 * for the files `response_format: url` answers point at.
 *
 * With `stream: true` the answer is SSE (ImageStreamEvent): a progress event
 * per denoising step, partial images when asked for, then one `completed`
 * event per image. The stream opens with the first step, so whatever fails
 * before (validation, a missing model, a full queue) is still an ordinary
 * JSON error with its status.
 *
 * Every answer names what decoded its images (IMAGE_DECODER_HEADER). A
 * `quality` of low or medium with no latent decoder installed is decoded by
 * the model's VAE: the header says `vae`, and the log says why, once.
 *
 * Generated files live in the server's file store (`images/` under
 * `--files-dir`, default `<LSERVE_HOME>/cache`, or under an `--files s3://`
 * prefix) for LSERVE_IMAGE_CACHE_TTL (default 1h) and at most
 * LSERVE_IMAGE_CACHE_MAX bytes (default 1GiB, oldest removed first); the
 * cache route serves only names the store wrote there.
 */

export const IMAGE_CACHE_TTL_MS = 60 * 60_000;
export const IMAGE_CACHE_MAX_BYTES = 1024 ** 3;
const CACHE_TYPES = { png: 'image/png', jpg: 'image/jpeg', webp: 'image/webp' } as const;
const EXTENSIONS = { png: 'png', jpeg: 'jpg', webp: 'webp' } as const;

export function imagesRouter(ctx: ServerContext): Router {
  const router = Router();
  const cache = ctx.files.open('images', {
    ttlMs: process.env.LSERVE_IMAGE_CACHE_TTL ? parseDuration(process.env.LSERVE_IMAGE_CACHE_TTL) : IMAGE_CACHE_TTL_MS,
    maxBytes: process.env.LSERVE_IMAGE_CACHE_MAX ? parseByteSize(process.env.LSERVE_IMAGE_CACHE_MAX) : IMAGE_CACHE_MAX_BYTES,
    types: CACHE_TYPES,
  });
  const limits = { fileSize: ctx.options.maxUploadBytes, files: 17 };
  const upload = multer({ storage: multer.memoryStorage(), limits });
  const files = upload.fields([
    { name: 'image', maxCount: 16 },
    { name: 'image[]', maxCount: 16 },
    { name: 'mask', maxCount: 1 },
  ]);

  /** Logged once per server: low/medium quality asked for with no latent decoder installed. */
  let toldNoDecoder = false;
  const noteDecoding = (decoding: ImageDecoding, request: ImageRequest) => {
    if (!decoding.missing.includes('quality') || toldNoDecoder) return;
    toldNoDecoder = true;
    ctx.options.log(missingDecoderMessage(['quality'], request.quality));
  };

  /** The task's result, or undefined when the client left (or the server is stopping): nobody is there to answer. */
  const generate = (request: ImageRequest, signal: AbortSignal) =>
    generateImages(ctx.engine, request, { signal, onDecoding: (d) => noteDecoding(d, request) }).catch((error: unknown) => {
      if (signal.aborted) return undefined;
      throw error;
    });

  const itemOf = async (req: Request, image: GeneratedImage, result: ImageResult, format: 'url' | 'b64_json'): Promise<ImageData> => {
    const item: ImageData = {};
    if (format === 'b64_json') item.b64_json = image.data.toString('base64');
    else item.url = `${req.protocol}://${req.get('host')}/v1/images/cache/${(await cache.put(image.data, EXTENSIONS[image.format])).name}`;
    if (result.revisedPrompt !== undefined) item.revised_prompt = result.revisedPrompt;
    return item;
  };

  const answer = async (req: Request, res: Response, result: ImageResult | undefined, format: 'url' | 'b64_json') => {
    if (!result) return;
    const data: ImagesResponse['data'] = [];
    for (const image of result.images) data.push(await itemOf(req, image, result, format));
    const body: ImagesResponse = { created: result.created, data };
    res.setHeader(IMAGE_DECODER_HEADER, result.decoding.decoder);
    res.json(body);
  };

  /** Runs a request and answers it: one JSON body, or with `stream: true` progress and completed events (SSE). */
  const respond = async (
    req: Request,
    res: Response,
    request: ImageRequest,
    signal: AbortSignal,
    body: { stream?: boolean | null; response_format?: 'url' | 'b64_json' | null },
    kind: 'image_generation' | 'image_edit',
  ) => {
    if (!body.stream) {
      await answer(req, res, await generate(request, signal), body.response_format ?? 'url');
      return;
    }
    let sse: SseWriter | undefined;
    let decoding: ImageDecoding | undefined;
    const send = (event: ImageStreamEvent) => {
      if (!sse) {
        if (decoding) res.setHeader(IMAGE_DECODER_HEADER, decoding.decoder);
        sse = new SseWriter(res);
        if (decoding?.missing.includes('partial_images')) {
          sse.event(`${kind}.notice`, { type: `${kind}.notice`, code: 'partial_images_unavailable', message: missingDecoderMessage(['partial_images']) } satisfies ImageStreamEvent);
        }
      }
      sse.event(event.type, event);
    };
    const fields = (image: GeneratedImage) => ({ size: `${image.width}x${image.height}`, output_format: image.format, quality: request.quality ?? 'auto', background: 'opaque' as const });
    let result: ImageResult;
    try {
      result = await generateImages(ctx.engine, request, {
        signal,
        onDecoding: (d) => {
          decoding = d;
          noteDecoding(d, request);
        },
        onProgress: (p) => send({ type: `${kind}.progress`, image: p.image, images: p.images, step: p.step, steps: p.steps }),
        onPartialImage: (p) =>
          send({ type: `${kind}.partial_image`, image: p.image, partial_image_index: p.index, b64_json: p.data.data.toString('base64'), created_at: Math.floor(Date.now() / 1000), ...fields(p.data) }),
      });
    } catch (error) {
      if (signal.aborted) return void sse?.end();
      // Nothing sent yet: an ordinary JSON error with its status.
      if (!sse) throw error;
      const failure = toLserveError(error);
      if (failure.status >= 500) ctx.options.log(`image stream failed after it began: ${(failure.cause as Error)?.stack ?? failure.stack}`);
      send({ type: 'error', error: openAIError(failure).error });
      return void sse.end();
    }
    // OpenAI's image streams carry base64; `response_format: "url"` asks for cache URLs instead.
    const format = body.response_format ?? 'b64_json';
    for (const [index, image] of result.images.entries()) {
      const item = await itemOf(req, image, result, format);
      send({ type: `${kind}.completed`, image: index, created_at: result.created, ...fields(image), seed: image.seed, ...item });
    }
    sse?.end();
  };

  router.post('/v1/images/generations', async (req, res) => {
    const signal = requestSignal(req, res, ctx.shutdown);
    const body = parseKnownFields(imageGenerationSchema, req.body);
    await respond(req, res, toImageRequest(body), signal, body, 'image_generation');
  });

  router.post('/v1/images/edits', files, async (req, res) => {
    const signal = requestSignal(req, res, ctx.shutdown);
    const body = parseKnownFields(imageEditSchema, formFields(req));
    const image = await inputImage(req, body.image, 'image', ctx, signal);
    if (!image) throw new InvalidRequestError("An 'image' to edit is required (a multipart file, or base64 / a data URI in JSON).", { param: 'image', code: 'missing_required_parameter' });
    const mask = await inputImage(req, body.mask, 'mask', ctx, signal);
    await respond(req, res, { ...toImageRequest(body), edit: { image: image.bytes, param: image.param, mask: mask?.bytes, maskParam: mask?.param } }, signal, body, 'image_edit');
  });

  router.post('/v1/images/img2img', files, async (req, res) => {
    const signal = requestSignal(req, res, ctx.shutdown);
    const body = parseKnownFields(imageToImageSchema, formFields(req));
    const image = await inputImage(req, body.image, 'image', ctx, signal);
    if (!image) throw new InvalidRequestError("An 'image' to start from is required (a multipart file, or base64 / a data URI in JSON).", { param: 'image', code: 'missing_required_parameter' });
    if (fileList(req, 'mask').length) throw new UnsupportedError("img2img takes no 'mask'; use /v1/images/edits to repaint part of an image.", { param: 'mask' });
    await respond(req, res, { ...toImageRequest(body), init: { image: image.bytes, param: image.param, strength: body.strength ?? 0.5 } }, signal, body, 'image_edit');
  });

  router.get('/v1/images/cache/:filename', async (req, res) => {
    await sendCachedFile(req, res, cache, req.params.filename, 'image');
  });

  return router;
}

/** The request's fields: JSON as is; multipart text fields with the numeric ones as numbers and `stream` as a boolean. */
function formFields(req: Request): unknown {
  if (!req.is('multipart/form-data')) return req.body;
  const fields: Record<string, unknown> = { ...(req.body as Record<string, unknown>) };
  for (const key of NUMERIC_FIELDS) {
    const value = fields[key];
    if (typeof value === 'string' && value.trim() !== '' && Number.isFinite(Number(value))) fields[key] = Number(value);
  }
  if (fields.stream === 'false') fields.stream = false;
  else if (fields.stream === 'true') fields.stream = true;
  return fields;
}

function fileList(req: Request, field: string): Express.Multer.File[] {
  const all = req.files as Record<string, Express.Multer.File[]> | undefined;
  return [...(all?.[field] ?? []), ...(all?.[`${field}[]`] ?? [])];
}

/**
 * An input image from a multipart file (`image` or `image[]`, `mask`) or a
 * JSON field (base64, a data URI, or under the remote-input policy a path
 * or URL). One image per request: these models repaint one picture.
 */
async function inputImage(req: Request, field: string | null | undefined, name: 'image' | 'mask', ctx: ServerContext, signal: AbortSignal): Promise<{ bytes: Uint8Array; param: string } | undefined> {
  const uploads = fileList(req, name);
  if (uploads.length > 1) throw new UnsupportedError(`One '${name}' per request: several input images are not supported by these models.`, { param: name });
  if (uploads.length && field != null) throw new InvalidRequestError(`Give '${name}' once: as a file or as a field, not both.`, { param: name, code: 'invalid_value' });
  if (uploads.length) return { bytes: uploads[0]!.buffer, param: name };
  if (field == null) return undefined;
  if (/^(data:|https?:\/\/|file:\/\/|\/)/i.test(field)) {
    return { bytes: await readRemoteInput(field, ctx.inputs, name, signal), param: name };
  }
  return { bytes: decodeBase64Payload(field, name, 'image/'), param: name };
}
