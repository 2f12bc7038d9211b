import type { RgbaImage } from './rgba.js';

/**
 * Inpainting masks. A mask is a value per pixel, 1 = repaint, 0 = keep, read
 * from a mask image as the reference pipelines do: with an alpha channel
 * (OpenAI's convention) transparency is repaint, 1 − alpha/255; without one
 * (diffusers' convention) luminance is, white = repaint (PIL's "L": 0.299 R
 * + 0.587 G + 0.114 B). Then binarised as diffusers' mask processor does:
 * ≥ 0.5 repaints, below keeps. The model repaints in latent space (one latent
 * cell covers 8x8 pixels: a cell is repainted when any of its pixels is), and
 * the decoded result is pasted over the original through the mask with a
 * narrow feather just inside its edge: pixels outside the mask come back bit
 * for bit.
 */

/**
 * Pixels of ramp just inside the mask's edge over which generated pixels
 * blend into the original (k/(f+1) of the new one at k pixels in): about
 * 1/192 of the shorter side, at least 1 (64x64: 1, 512x512: 3, 768x768: 4);
 * deeper in, only the new.
 */
export function edgeFeather(width: number, height: number): number {
  return Math.max(1, Math.round(Math.min(width, height) / 192));
}

/** The repaint value of each pixel of a mask image (alpha if it has an alpha channel, else luminance), 0–1. */
export function repaintMask(mask: RgbaImage): Float32Array {
  const plane = mask.width * mask.height;
  const out = new Float32Array(plane);
  for (let i = 0; i < plane; i++) {
    const p = i * 4;
    out[i] = mask.hasAlpha ? 1 - mask.data[p + 3]! / 255 : (0.299 * mask.data[p]! + 0.587 * mask.data[p + 1]! + 0.114 * mask.data[p + 2]!) / 255;
  }
  return out;
}

/** 1 where a repaint value is at least 0.5, else 0 (diffusers' binarize). */
export function binarizeMask(values: Float32Array): Float32Array {
  return values.map((v) => (v >= 0.5 ? 1 : 0));
}

/** Pixels a (binary) mask repaints. */
export function maskedPixels(mask: Float32Array): number {
  let n = 0;
  for (let i = 0; i < mask.length; i++) if (mask[i]! > 0) n++;
  return n;
}

/** The binary repaint mask an image carries in its own alpha (transparent = repaint), or undefined when nothing in it is transparent enough to repaint. */
export function alphaMask(image: RgbaImage): Float32Array | undefined {
  if (!image.hasAlpha) return undefined;
  const mask = binarizeMask(repaintMask(image));
  return maskedPixels(mask) > 0 ? mask : undefined;
}

/**
 * Per latent cell: the largest repaint value of its factor×factor pixels, so
 * the repainted latents cover every masked pixel (diffusers samples one pixel
 * per cell, nearest, which leaves up to 7 masked pixels on the original's
 * latents along the edge).
 */
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

/**
 * The weight of the generated pixels when pasting them over the original: 0
 * wherever the (binary) mask keeps, so those pixels come back exactly; inside
 * the mask min(1, d/(feather+1)) for a pixel at distance d (Euclidean, in
 * pixels) from the nearest kept one, so the seam blends over `feather`
 * pixels just inside the edge and everything deeper is the new content.
 */
export function pasteWeight(mask: Float32Array, width: number, height: number, feather = edgeFeather(width, height)): Float32Array {
  const out = new Float32Array(mask.length);
  const r = Math.max(0, Math.floor(feather));
  const reach = (r + 1) * (r + 1);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = y * width + x;
      if (mask[i]! === 0) continue;
      let nearest = reach;
      for (let dy = -r; dy <= r; dy++) {
        const yy = y + dy;
        if (yy < 0 || yy >= height) continue;
        for (let dx = -r; dx <= r; dx++) {
          const xx = x + dx;
          if (xx < 0 || xx >= width || mask[yy * width + xx]! !== 0) continue;
          const d = dx * dx + dy * dy;
          if (d < nearest) nearest = d;
        }
      }
      out[i] = Math.min(1, Math.sqrt(nearest) / (r + 1));
    }
  }
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
