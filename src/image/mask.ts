import type { RgbaImage } from './rgba.js';

/**
 * Inpainting masks. A mask is a float per pixel, 1 = repaint, 0 = keep.
 * OpenAI's convention reads it from alpha (transparent = repaint); a mask
 * without alpha is read as white = repaint (the Stable Diffusion convention),
 * grey levels in between. The model repaints in latent space (one latent
 * cell covers 8x8 pixels), so the result is composited back onto the
 * original through a feathered mask that is exactly 0 wherever the mask is:
 * kept pixels come back bit for bit.
 */

/** The repaint mask of a mask image (alpha if it has any, else brightness). */
export function repaintMask(mask: RgbaImage): Float32Array {
  const plane = mask.width * mask.height;
  const out = new Float32Array(plane);
  for (let i = 0; i < plane; i++) {
    const p = i * 4;
    out[i] = mask.hasAlpha ? 1 - mask.data[p + 3]! / 255 : (0.299 * mask.data[p]! + 0.587 * mask.data[p + 1]! + 0.114 * mask.data[p + 2]!) / 255;
  }
  return out;
}

/** The repaint mask an image carries in its own alpha, or undefined when it is fully opaque. */
export function alphaMask(image: RgbaImage): Float32Array | undefined {
  if (!image.hasAlpha) return undefined;
  const mask = repaintMask(image);
  return mask.some((v) => v > 0) ? mask : undefined;
}

/** Per latent cell: the largest repaint value of its factor×factor pixels, so the repainted latents cover every masked pixel. */
export function latentMask(mask: Float32Array, width: number, height: number, factor: number): Float32Array {
  const w = width / factor;
  const h = height / factor;
  const out = new Float32Array(w * h);
  for (let y = 0; y < height; y++) {
    const row = Math.floor(y / factor) * w;
    for (let x = 0; x < width; x++) {
      const cell = row + Math.floor(x / factor);
      const v = mask[y * width + x]!;
      if (v > out[cell]!) out[cell] = v;
    }
  }
  return out;
}

/** Box blur of radius r along rows then columns (running sums; edges clamp). */
function boxBlur(values: Float32Array, width: number, height: number, r: number): Float32Array {
  const tmp = new Float32Array(values.length);
  const out = new Float32Array(values.length);
  const size = 2 * r + 1;
  for (let y = 0; y < height; y++) {
    const row = y * width;
    let sum = 0;
    for (let k = -r; k <= r; k++) sum += values[row + Math.min(width - 1, Math.max(0, k))]!;
    for (let x = 0; x < width; x++) {
      tmp[row + x] = sum / size;
      sum += values[row + Math.min(width - 1, x + r + 1)]! - values[row + Math.max(0, x - r)]!;
    }
  }
  for (let x = 0; x < width; x++) {
    let sum = 0;
    for (let k = -r; k <= r; k++) sum += tmp[Math.min(height - 1, Math.max(0, k)) * width + x]!;
    for (let y = 0; y < height; y++) {
      out[y * width + x] = sum / size;
      sum += tmp[Math.min(height - 1, y + r + 1) * width + x]! - tmp[Math.max(0, y - r) * width + x]!;
    }
  }
  return out;
}

/**
 * The blend weight of the generated pixels: the mask times its own blur (two
 * box passes ≈ a Gaussian), so the seam fades inside the repainted area and
 * every kept pixel has weight exactly 0.
 */
export function featherMask(mask: Float32Array, width: number, height: number, radius: number): Float32Array {
  if (radius < 1) return mask;
  const blurred = boxBlur(boxBlur(mask, width, height, radius), width, height, radius);
  const out = new Float32Array(mask.length);
  for (let i = 0; i < mask.length; i++) out[i] = mask[i]! === 0 ? 0 : mask[i]! * blurred[i]!;
  return out;
}

/** original·(1 − w) + generated·w per pixel (RGB); pixels with w = 0 are copied unchanged. */
export function composite(original: Uint8Array, generated: Uint8Array, weight: Float32Array): Uint8Array {
  const out = new Uint8Array(original.length);
  for (let i = 0; i < weight.length; i++) {
    const w = weight[i]!;
    for (let c = 0; c < 3; c++) {
      const p = i * 3 + c;
      out[p] = w === 0 ? original[p]! : Math.round(original[p]! * (1 - w) + generated[p]! * w);
    }
  }
  return out;
}
