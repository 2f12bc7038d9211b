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
  const [a, b, c, d, e, f, g, hh] = map as [number, number, number, number, number, number, number, number];
  let o = 0;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++, o += 3) {
      let r = 0;
      let gr = 0;
      let bl = 0;
      for (let j = 0; j < sy; j++) {
        const v = (y + (j + 0.5) / sy) / height;
        for (let i = 0; i < sx; i++) {
          const u = (x + (i + 0.5) / sx) / width;
          const den = g * u + hh * v + 1;
          // Source point in continuous coordinates; pixel centres sit at +0.5. Clamped to the edge.
          let px = (a * u + b * v + c) / den - 0.5;
          let py = (d * u + e * v + f) / den - 0.5;
          px = px < 0 ? 0 : px > w - 1 ? w - 1 : px;
          py = py < 0 ? 0 : py > h - 1 ? h - 1 : py;
          const x0 = px | 0;
          const y0 = py | 0;
          const x1 = x0 + 1 < w ? x0 + 1 : x0;
          const y1 = y0 + 1 < h ? y0 + 1 : y0;
          const fx = px - x0;
          const fy = py - y0;
          const w00 = (1 - fx) * (1 - fy);
          const w01 = fx * (1 - fy);
          const w10 = (1 - fx) * fy;
          const w11 = fx * fy;
          const i00 = (y0 * w + x0) * 3;
          const i01 = (y0 * w + x1) * 3;
          const i10 = (y1 * w + x0) * 3;
          const i11 = (y1 * w + x1) * 3;
          r += data[i00]! * w00 + data[i01]! * w01 + data[i10]! * w10 + data[i11]! * w11;
          gr += data[i00 + 1]! * w00 + data[i01 + 1]! * w01 + data[i10 + 1]! * w10 + data[i11 + 1]! * w11;
          bl += data[i00 + 2]! * w00 + data[i01 + 2]! * w01 + data[i10 + 2]! * w10 + data[i11 + 2]! * w11;
        }
      }
      out[o] = r / n + 0.5;
      out[o + 1] = gr / n + 0.5;
      out[o + 2] = bl / n + 0.5;
    }
  }
  return { data: out, width, height };
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
