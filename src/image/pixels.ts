import type { RgbaImage } from './rgba.js';

/**
 * Between the VAE's planar float pixels ([3, H, W], about -1 … 1) and 8-bit
 * interleaved images.
 */

/** VAE output → 8-bit RGB: (v/2 + 0.5)·255, rounded and clamped. */
export function planarToRgb(planar: Float32Array, width: number, height: number): Uint8Array {
  const plane = width * height;
  const rgb = new Uint8Array(plane * 3);
  for (let c = 0; c < 3; c++) {
    const offset = c * plane;
    for (let i = 0; i < plane; i++) {
      const v = Math.round((planar[offset + i]! * 0.5 + 0.5) * 255);
      rgb[i * 3 + c] = v < 0 ? 0 : v > 255 ? 255 : v;
    }
  }
  return rgb;
}

/** 8-bit RGBA → the VAE encoder's input: planar, v/127.5 − 1 (alpha ignored). */
export function rgbaToPlanar(image: RgbaImage): Float32Array {
  const plane = image.width * image.height;
  const planar = new Float32Array(plane * 3);
  for (let i = 0; i < plane; i++) {
    for (let c = 0; c < 3; c++) planar[c * plane + i] = image.data[i * 4 + c]! / 127.5 - 1;
  }
  return planar;
}

/** RGBA → RGB (alpha dropped). */
export function rgbaToRgb(image: RgbaImage): Uint8Array {
  const plane = image.width * image.height;
  const rgb = new Uint8Array(plane * 3);
  for (let i = 0; i < plane; i++) {
    rgb[i * 3] = image.data[i * 4]!;
    rgb[i * 3 + 1] = image.data[i * 4 + 1]!;
    rgb[i * 3 + 2] = image.data[i * 4 + 2]!;
  }
  return rgb;
}
