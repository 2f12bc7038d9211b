import type { Point, Quad } from '../../image/types.js';
import { yielder } from './yielder.js';
import { insideConvexQuad, minAreaRect, orderCorners, rectCorners, unclipRect } from './geometry.js';

/**
 * DB (Differentiable Binarization) post-processing, as PaddleOCR's
 * DBPostProcess does it: threshold the probability map, take each connected
 * text region, fit a minimum-area rectangle, score it by the mean
 * probability inside, drop weak or tiny ones, grow it back (unclip) and fit
 * again. Boxes come out in probability-map pixel coordinates.
 */

export interface DbOptions {
  /** Pixels with probability above this are text. */
  threshold: number;
  /** Regions whose mean probability is below this are dropped. */
  boxThreshold: number;
  unclipRatio: number;
  maxCandidates: number;
  /** Regions whose short side is below this (map pixels) are dropped. */
  minSize: number;
}

export interface ScoredQuad {
  quad: Quad;
  score: number;
}

export async function dbPostprocess(prob: Float32Array, width: number, height: number, options: DbOptions): Promise<ScoredQuad[]> {
  const labels = new Int32Array(width * height);
  const stack = new Int32Array(width * height);
  const results: ScoredQuad[] = [];
  let label = 0;
  const pause = yielder();
  for (let start = 0; start < prob.length && label < options.maxCandidates; start++) {
    if (labels[start] !== 0 || !(prob[start]! > options.threshold)) continue;
    await pause();
    label++;
    const count = floodFill(prob, labels, stack, width, height, start, label, options.threshold);
    const found = regionBox(prob, stack, count, width, height, options);
    if (found) results.push(found);
  }
  return results;
}

/** 8-connected flood fill from `start`; the region's pixel indices end up in stack[0..count). */
function floodFill(prob: Float32Array, labels: Int32Array, stack: Int32Array, width: number, height: number, start: number, label: number, threshold: number): number {
  let head = 0;
  let tail = 0;
  stack[tail++] = start;
  labels[start] = label;
  while (head < tail) {
    const i = stack[head++]!;
    const x = i % width;
    const y = (i - x) / width;
    for (let dy = -1; dy <= 1; dy++) {
      const ny = y + dy;
      if (ny < 0 || ny >= height) continue;
      for (let dx = -1; dx <= 1; dx++) {
        const nx = x + dx;
        if (nx < 0 || nx >= width) continue;
        const j = ny * width + nx;
        if (labels[j] === 0 && prob[j]! > threshold) {
          labels[j] = label;
          stack[tail++] = j;
        }
      }
    }
  }
  return tail;
}

function regionBox(prob: Float32Array, pixels: Int32Array, count: number, width: number, height: number, options: DbOptions): ScoredQuad | undefined {
  // The hull of a region is the hull of each row's leftmost and rightmost pixel.
  const rows = new Map<number, [number, number]>();
  for (let k = 0; k < count; k++) {
    const i = pixels[k]!;
    const x = i % width;
    const y = (i - x) / width;
    const row = rows.get(y);
    if (!row) rows.set(y, [x, x]);
    else {
      if (x < row[0]) row[0] = x;
      if (x > row[1]) row[1] = x;
    }
  }
  const points: Point[] = [];
  for (const [y, [x0, x1]] of rows) {
    points.push([x0, y]);
    if (x1 !== x0) points.push([x1, y]);
  }
  const rect = minAreaRect(points);
  if (Math.min(rect.width, rect.height) < options.minSize) return undefined;
  const quad = orderCorners(rectCorners(rect));
  const score = meanInside(prob, width, height, quad);
  if (score < options.boxThreshold) return undefined;
  const grown = unclipRect(rect, options.unclipRatio);
  if (Math.min(grown.width, grown.height) < options.minSize + 2) return undefined;
  return { quad: orderCorners(rectCorners(grown)), score };
}

/** Mean probability over the pixels whose centres fall inside `quad` (PaddleOCR's "fast" box score). */
export function meanInside(prob: Float32Array, width: number, height: number, quad: Quad): number {
  const xs = quad.map((p) => p[0]);
  const ys = quad.map((p) => p[1]);
  const x0 = Math.max(0, Math.floor(Math.min(...xs)));
  const x1 = Math.min(width - 1, Math.ceil(Math.max(...xs)));
  const y0 = Math.max(0, Math.floor(Math.min(...ys)));
  const y1 = Math.min(height - 1, Math.ceil(Math.max(...ys)));
  let sum = 0;
  let n = 0;
  for (let y = y0; y <= y1; y++) {
    for (let x = x0; x <= x1; x++) {
      if (!insideConvexQuad(quad, x, y)) continue;
      sum += prob[y * width + x]!;
      n++;
    }
  }
  return n > 0 ? sum / n : 0;
}
