import type { Metadata, Sharp } from 'sharp';

/**
 * sharp (libvips), imported on first use, not at server start (it takes
 * ~250 ms to load). Its operation cache (up to 50 MB by default) is off:
 * every request brings a new image, and a server left running would keep
 * that memory for inputs it never sees again.
 */
let sharpModule: Promise<typeof import('sharp').default> | undefined;
export function loadSharp(): Promise<typeof import('sharp').default> {
  sharpModule ??= import('sharp').then(({ default: sharp }) => {
    sharp.cache(false);
    return sharp;
  });
  return sharpModule;
}
import { InvalidMediaError, PayloadTooLargeError } from '../core/errors.js';
import { decodeBmp, isBmp } from './bmp.js';
import type { RgbImage } from './types.js';

/**
 * Turns any supported image file into upright 8-bit RGB pixels: EXIF
 * orientation applied, the first frame of animations, alpha composited onto
 * white (documents are dark ink on light paper; a transparent background
 * would otherwise turn black), greyscale and 16-bit expanded to 8-bit RGB.
 * Every way an input can be bad becomes a typed error: 400 invalid_image
 * (never quoting the bytes), 413 for too many pixels.
 */

/** Formats accepted from clients. SVG is deliberately absent: it can reference external files. */
export const IMAGE_FORMATS = ['png', 'jpeg', 'webp', 'tiff', 'gif', 'bmp'] as const;
export type ImageFormat = (typeof IMAGE_FORMATS)[number];

/** Default decoded-size limit: 50 megapixels (an A4 page at 600 dpi is 35 MP). */
export const DEFAULT_MAX_PIXELS = 50_000_000;

export interface DecodeOptions {
  maxPixels?: number;
  /** Refuse animations (more than one frame) instead of taking the first frame. */
  still?: boolean;
  /** Request field named in errors. */
  param?: string;
}

export interface DecodedImage extends RgbImage {
  format: ImageFormat;
}

export async function decodeImage(input: Uint8Array, options: DecodeOptions = {}): Promise<DecodedImage> {
  const maxPixels = options.maxPixels ?? DEFAULT_MAX_PIXELS;
  const param = options.param ?? 'image';
  if (input.length === 0) throw new InvalidMediaError('image', 'The image is empty (0 bytes).', { param });
  const tooLarge = (w: number, h: number) =>
    new PayloadTooLargeError(`Image is ${w}x${h} (${((w * h) / 1e6).toFixed(1)} MP); the limit is ${(maxPixels / 1e6).toFixed(1)} MP.`, {
      param,
      code: 'image_too_large',
    });

  const sharp = await loadSharp();
  let pipeline: Sharp;
  let format: ImageFormat;
  if (isBmp(input)) {
    let bmp;
    try {
      bmp = decodeBmp(input, maxPixels, tooLarge);
    } catch (error) {
      // The BMP reader knows no field name: the error gets this one.
      throw error instanceof InvalidMediaError && error.param === null ? new InvalidMediaError('image', error.message, { param }) : error;
    }
    pipeline = sharp(bmp.data, { raw: { width: bmp.width, height: bmp.height, channels: 4 } });
    format = 'bmp';
  } else {
    // `failOn: 'truncated'` rejects cut-off files but tolerates the harmless warnings real cameras produce.
    // The header is read without sharp's pixel limit, so that an image over it is a 413 that says its size.
    let meta: Metadata;
    try {
      meta = await sharp(input, { failOn: 'truncated', limitInputPixels: false, pages: 1 }).metadata();
    } catch (error) {
      throw mapSharpError(error, param, maxPixels);
    }
    const found = meta.format === 'heif' ? undefined : (IMAGE_FORMATS as readonly string[]).includes(meta.format) ? (meta.format as ImageFormat) : undefined;
    if (!found) {
      throw new InvalidMediaError('image', `Unsupported image format '${meta.format}'; use one of ${IMAGE_FORMATS.join(', ')}.`, { param });
    }
    format = found;
    if (options.still && (meta.pages ?? 1) > 1) {
      throw new InvalidMediaError('image', `The image is animated (${meta.pages} frames); send a still image.`, { param });
    }
    const width = meta.width ?? 0;
    const height = meta.pageHeight ?? meta.height ?? 0;
    if (width <= 0 || height <= 0) throw new InvalidMediaError('image', `The image has no pixels (${width}x${height}).`, { param });
    // Checked on the header, before decoding: a small file can declare a huge canvas.
    if (width * height > maxPixels) throw tooLarge(width, height);
    // And libvips holds the decode itself to the same limit, should a file's pixels not be what its header said.
    pipeline = sharp(input, { failOn: 'truncated', limitInputPixels: sharpPixelLimit(maxPixels), pages: 1 });
  }

  try {
    const { data, info } = await pipeline
      .rotate()
      .flatten({ background: '#ffffff' })
      .toColourspace('srgb')
      .removeAlpha()
      .raw({ depth: 'uchar' })
      .toBuffer({ resolveWithObject: true });
    if (info.channels !== 3) throw new InvalidMediaError('image', `Decoded image has ${info.channels} channels; expected RGB.`, { param });
    return { data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), width: info.width, height: info.height, format };
  } catch (error) {
    throw mapSharpError(error, param, maxPixels);
  }
}

/** sharp's `limitInputPixels` for a limit: a whole number of pixels. */
export function sharpPixelLimit(maxPixels: number): number {
  return Math.max(1, Math.floor(maxPixels));
}

/** libvips' refusal of an image over `limitInputPixels`. */
export function isPixelLimitError(message: string): boolean {
  return /exceeds pixel limit/i.test(message);
}

function mapSharpError(error: unknown, param: string, maxPixels: number): Error {
  if (error instanceof InvalidMediaError || error instanceof PayloadTooLargeError) return error;
  const message = error instanceof Error ? error.message : String(error);
  if (isPixelLimitError(message)) {
    return new PayloadTooLargeError(`The image has more pixels than the limit of ${(maxPixels / 1e6).toFixed(1)} MP.`, { param, code: 'image_too_large' });
  }
  if (/unsupported image format/i.test(message)) {
    return new InvalidMediaError('image', `Not an image, or an unsupported format (supported: ${IMAGE_FORMATS.join(', ')}).`, { param });
  }
  return new InvalidMediaError('image', `The image could not be decoded (truncated or corrupt): ${message.split('\n')[0]}`, { param });
}

/** Encodes RGB pixels as PNG (used for annotated copies and tests). */
export async function encodePng(image: RgbImage): Promise<Buffer> {
  const sharp = await loadSharp();
  return sharp(image.data, { raw: { width: image.width, height: image.height, channels: 3 } }).png().toBuffer();
}

/** Resizes RGB pixels to exactly `width`x`height` (used to build detector inputs). */
export async function resizeRgb(image: RgbImage, width: number, height: number): Promise<RgbImage> {
  if (width === image.width && height === image.height) return image;
  const sharp = await loadSharp();
  const { data, info } = await sharp(image.data, { raw: { width: image.width, height: image.height, channels: 3 } })
    .resize(width, height, { fit: 'fill', kernel: 'linear' })
    .raw()
    .toBuffer({ resolveWithObject: true });
  return { data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), width: info.width, height: info.height };
}
