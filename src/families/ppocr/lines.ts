import type { Point, Quad, RgbImage } from '../../image/types.js';
import { warpQuad } from '../../image/warp.js';
import { quadSize } from './geometry.js';
import { yielder } from './yielder.js';

/**
 * Text-line crops for the classifier and recogniser: each detected quad is
 * rectified straight into the model's input height (one warp, no
 * intermediate crop), width from its aspect ratio, and packed into an NCHW
 * batch padded on the right with 0 (mid-grey after normalisation), as
 * PaddleOCR pads.
 */

export interface LineCrop {
  /** The corners sampled, in reading direction (turned for vertical and upside-down lines). */
  sample: Quad;
  /** Width / height of the line in reading direction. */
  ratio: number;
}

/**
 * Starts a crop: lines at least 1.5x taller than wide are read as turned 90°
 * (PaddleOCR's rule). `pad` grows the quad on every side by that fraction of
 * the line height: DB boxes hug the ink, and the recogniser, trained on looser
 * crops, drops the spaces between words of a tightly cropped line.
 */
export function lineCrop(box: Quad, pad = 0): LineCrop {
  const quad = pad > 0 ? padQuad(box, pad) : box;
  const { width, height } = quadSize(quad);
  if (height >= 1.5 * width && width > 0) {
    // Rotate the reading direction 90° counter-clockwise: the right edge becomes the top.
    return { sample: [quad[1], quad[2], quad[3], quad[0]], ratio: height / width };
  }
  return { sample: quad, ratio: height > 0 ? width / height : 1 };
}

export function turn180(crop: LineCrop): LineCrop {
  const [a, b, c, d] = crop.sample;
  return { sample: [c, d, a, b], ratio: crop.ratio };
}

/** Packs lines into one [n, 3, height, batchWidth] tensor; `widths[i]` is line i's unpadded width. */
export async function packLines(image: RgbImage, crops: readonly LineCrop[], height: number, batchWidth: number): Promise<{ tensor: Float32Array; widths: number[] }> {
  const plane = height * batchWidth;
  const tensor = new Float32Array(crops.length * 3 * plane);
  const widths: number[] = [];
  const pause = yielder();
  for (const [n, crop] of crops.entries()) {
    await pause();
    const width = Math.max(1, Math.min(batchWidth, Math.ceil(height * crop.ratio)));
    widths.push(width);
    const line = warpQuad(image, crop.sample, width, height);
    const base = n * 3 * plane;
    for (let y = 0; y < height; y++) {
      for (let x = 0; x < width; x++) {
        const s = (y * width + x) * 3;
        const o = y * batchWidth + x;
        // BGR order; (v / 255 - 0.5) / 0.5.
        tensor[base + o] = line.data[s + 2]! / 127.5 - 1;
        tensor[base + plane + o] = line.data[s + 1]! / 127.5 - 1;
        tensor[base + 2 * plane + o] = line.data[s]! / 127.5 - 1;
      }
    }
  }
  return { tensor, widths };
}

/** Grows a quad outwards by `fraction` of its shorter side along both of its axes. */
export function padQuad(quad: Quad, fraction: number): Quad {
  const [tl, tr, br, bl] = quad;
  const { width, height } = quadSize(quad);
  const d = Math.min(width, height) * fraction;
  const unit = (a: Point, b: Point): Point => {
    const len = Math.hypot(b[0] - a[0], b[1] - a[1]) || 1;
    return [(b[0] - a[0]) / len, (b[1] - a[1]) / len];
  };
  const u = unit(tl, tr); // along the top edge
  const v = unit(tl, bl); // down the left edge
  const move = (p: Point, su: number, sv: number): Point => [p[0] + (u[0] * su + v[0] * sv) * d, p[1] + (u[1] * su + v[1] * sv) * d];
  return [move(tl, -1, -1), move(tr, 1, -1), move(br, 1, 1), move(bl, -1, 1)];
}
