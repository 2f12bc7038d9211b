import { InvalidMediaError, PayloadTooLargeError } from '../core/errors.js';
import { decodeBmp, isBmp } from './bmp.js';
import { DEFAULT_MAX_PIXELS, IMAGE_FORMATS, isPixelLimitError, loadSharp, sharpPixelLimit } from './decode.js';

/**
 * Decoding that keeps transparency (decode.ts flattens it onto white, which
 * is right for OCR): image edits read their mask from alpha, and an image
 * with transparent parts is its own mask. And encoding generated pixels as
 * PNG, JPEG or WebP. Bad input is a typed error (400 invalid_image, 413) as in decode.ts.
 */


export interface RgbaImage {
  /** 8-bit RGBA, row-major, tightly packed (alpha 255 when the file has none). */
  data: Uint8Array;
  width: number;
  height: number;
  /** Whether the file carries an alpha channel. */
  hasAlpha: boolean;
}

export async function decodeRgba(input: Uint8Array, options: { maxPixels?: number; param?: string } = {}): Promise<RgbaImage> {
  const maxPixels = options.maxPixels ?? DEFAULT_MAX_PIXELS;
  const param = options.param ?? 'image';
  if (input.length === 0) throw new InvalidMediaError('image', `'${param}' is empty (0 bytes).`, { param });
  const tooLarge = (w: number, h: number) =>
    new PayloadTooLargeError(`'${param}' is ${w}x${h} (${((w * h) / 1e6).toFixed(1)} MP); the limit is ${(maxPixels / 1e6).toFixed(1)} MP.`, { param, code: 'image_too_large' });
  const sharp = await loadSharp();
  if (isBmp(input)) {
    let bmp;
    try {
      bmp = decodeBmp(input, maxPixels, tooLarge);
    } catch (error) {
      throw error instanceof InvalidMediaError && error.param === null ? new InvalidMediaError('image', `'${param}': ${error.message}`, { param }) : error;
    }
    let hasAlpha = false;
    for (let i = 3; i < bmp.data.length && !hasAlpha; i += 4) hasAlpha = bmp.data[i] !== 255;
    return { data: bmp.data, width: bmp.width, height: bmp.height, hasAlpha };
  }
  try {
    // The header is read without sharp's pixel limit (so that an image over it is a 413 that says its size), the pixels with it.
    const meta = await sharp(input, { failOn: 'truncated', limitInputPixels: false, pages: 1 }).metadata();
    if (meta.format === 'heif' || !(IMAGE_FORMATS as readonly string[]).includes(meta.format)) {
      throw new InvalidMediaError('image', `'${param}': unsupported image format '${meta.format}'; use one of ${IMAGE_FORMATS.join(', ')}.`, { param });
    }
    const width = meta.width ?? 0;
    const height = meta.pageHeight ?? meta.height ?? 0;
    if (width <= 0 || height <= 0) throw new InvalidMediaError('image', `'${param}' has no pixels (${width}x${height}).`, { param });
    if (width * height > maxPixels) throw tooLarge(width, height);
    const pipeline = sharp(input, { failOn: 'truncated', limitInputPixels: sharpPixelLimit(maxPixels), pages: 1 }).rotate().toColourspace('srgb').ensureAlpha();
    const { data, info } = await pipeline.raw({ depth: 'uchar' }).toBuffer({ resolveWithObject: true });
    return { data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), width: info.width, height: info.height, hasAlpha: meta.hasAlpha === true };
  } catch (error) {
    if (error instanceof InvalidMediaError || error instanceof PayloadTooLargeError) throw error;
    const message = error instanceof Error ? error.message.split('\n')[0]! : String(error);
    if (isPixelLimitError(message)) {
      throw new PayloadTooLargeError(`'${param}' has more pixels than the limit of ${(maxPixels / 1e6).toFixed(1)} MP.`, { param, code: 'image_too_large' });
    }
    if (/unsupported image format/i.test(message)) {
      throw new InvalidMediaError('image', `'${param}' is not an image, or an unsupported format (supported: ${IMAGE_FORMATS.join(', ')}).`, { param });
    }
    throw new InvalidMediaError('image', `'${param}' could not be decoded (truncated or corrupt): ${message}`, { param });
  }
}

/** Resizes RGBA pixels to exactly `width`x`height` (stretching; callers keep the aspect where they must). */
export async function resizeRgba(image: RgbaImage, width: number, height: number): Promise<RgbaImage> {
  if (image.width === width && image.height === height) return image;
  const sharp = await loadSharp();
  const { data, info } = await sharp(image.data, { raw: { width: image.width, height: image.height, channels: 4 } })
    .resize(width, height, { fit: 'fill', kernel: 'lanczos3' })
    .raw()
    .toBuffer({ resolveWithObject: true });
  return { data: new Uint8Array(data.buffer, data.byteOffset, data.byteLength), width: info.width, height: info.height, hasAlpha: image.hasAlpha };
}

export const OUTPUT_FORMATS = ['png', 'jpeg', 'webp'] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

export const OUTPUT_TYPES: Readonly<Record<OutputFormat, string>> = { png: 'image/png', jpeg: 'image/jpeg', webp: 'image/webp' };

/** Encodes RGB pixels; `quality` (0–100) applies to JPEG and WebP. Output is deterministic for given pixels. */
export async function encodeRgb(rgb: Uint8Array, width: number, height: number, format: OutputFormat, quality = 90): Promise<Buffer> {
  const sharp = await loadSharp();
  const image = sharp(rgb, { raw: { width, height, channels: 3 } });
  if (format === 'jpeg') return image.jpeg({ quality, mozjpeg: false }).toBuffer();
  if (format === 'webp') return image.webp({ quality }).toBuffer();
  return image.png({ compressionLevel: 6 }).toBuffer();
}
