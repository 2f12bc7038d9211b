import type { Point, Quad, RgbImage } from './types.js';

/**
 * Perspective rectification: samples the pixels inside a quadrilateral of
 * `image` into an upright `width`x`height` rectangle in one pass (bilinear,
 * with supersampling when shrinking, so a tall text line scaled down to the
 * recogniser's height keeps its strokes instead of aliasing). The quad's
 * corners map to the rectangle's corners: TL, TR, BR, BL.
 */
export function warpQuad(image: RgbImage, quad: Quad, width: number, height: number): RgbImage {
  const out = new Uint8Array(width * height * 3);
  const map = unitSquareToQuad(quad);
  const srcW = Math.max(dist(quad[0], quad[1]), dist(quad[3], quad[2]));
  const srcH = Math.max(dist(quad[0], quad[3]), dist(quad[1], quad[2]));
  // Samples per output pixel along each axis: ~1 per source pixel covered, at most 4.
  const sx = Math.min(4, Math.max(1, Math.round(srcW / width)));
  const sy = Math.min(4, Math.max(1, Math.round(srcH / height)));
  const n = sx * sy;
  const { data, width: w, height: h } = image;
  const acc = [0, 0, 0];
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      acc[0] = acc[1] = acc[2] = 0;
      for (let j = 0; j < sy; j++) {
        const v = (y + (j + 0.5) / sy) / height;
        for (let i = 0; i < sx; i++) {
          const u = (x + (i + 0.5) / sx) / width;
          const den = map[6]! * u + map[7]! * v + 1;
          // Source point in continuous coordinates; pixel centres sit at +0.5.
          const px = (map[0]! * u + map[1]! * v + map[2]!) / den - 0.5;
          const py = (map[3]! * u + map[4]! * v + map[5]!) / den - 0.5;
          sampleBilinear(data, w, h, px, py, acc);
        }
      }
      const o = (y * width + x) * 3;
      out[o] = acc[0]! / n + 0.5;
      out[o + 1] = acc[1]! / n + 0.5;
      out[o + 2] = acc[2]! / n + 0.5;
    }
  }
  return { data: out, width, height };
}

/** Adds the bilinear sample at (x, y), clamped to the image edge, into `acc`. */
function sampleBilinear(data: Uint8Array, w: number, h: number, x: number, y: number, acc: number[]): void {
  const cx = x < 0 ? 0 : x > w - 1 ? w - 1 : x;
  const cy = y < 0 ? 0 : y > h - 1 ? h - 1 : y;
  const x0 = Math.floor(cx);
  const y0 = Math.floor(cy);
  const x1 = x0 + 1 < w ? x0 + 1 : x0;
  const y1 = y0 + 1 < h ? y0 + 1 : y0;
  const fx = cx - x0;
  const fy = cy - y0;
  const a = (y0 * w + x0) * 3;
  const b = (y0 * w + x1) * 3;
  const c = (y1 * w + x0) * 3;
  const d = (y1 * w + x1) * 3;
  for (let k = 0; k < 3; k++) {
    const top = data[a + k]! + (data[b + k]! - data[a + k]!) * fx;
    const bottom = data[c + k]! + (data[d + k]! - data[c + k]!) * fx;
    acc[k]! += top + (bottom - top) * fy;
  }
}

/**
 * The projective map from the unit square ((0,0),(1,0),(1,1),(0,1)) onto
 * `quad` (Heckbert's closed form), as [a,b,c,d,e,f,g,h] with
 * x = (a·u + b·v + c) / (g·u + h·v + 1), y = (d·u + e·v + f) / (g·u + h·v + 1).
 */
export function unitSquareToQuad(quad: Quad): number[] {
  const [[x0, y0], [x1, y1], [x2, y2], [x3, y3]] = quad;
  const sx = x0 - x1 + x2 - x3;
  const sy = y0 - y1 + y2 - y3;
  if (Math.abs(sx) < 1e-9 && Math.abs(sy) < 1e-9) {
    // A parallelogram: the map is affine.
    return [x1 - x0, x3 - x0, x0, y1 - y0, y3 - y0, y0, 0, 0];
  }
  const dx1 = x1 - x2;
  const dx2 = x3 - x2;
  const dy1 = y1 - y2;
  const dy2 = y3 - y2;
  const den = dx1 * dy2 - dx2 * dy1;
  const g = den === 0 ? 0 : (sx * dy2 - dx2 * sy) / den;
  const h = den === 0 ? 0 : (dx1 * sy - sx * dy1) / den;
  return [x1 - x0 + g * x1, x3 - x0 + h * x3, x0, y1 - y0 + g * y1, y3 - y0 + h * y3, y0, g, h];
}

export function dist(a: Point, b: Point): number {
  return Math.hypot(a[0] - b[0], a[1] - b[1]);
}
