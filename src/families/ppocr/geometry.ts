import type { Point, Quad } from '../../image/types.js';

/**
 * Plane geometry for text detection, written out because there is no OpenCV
 * here: convex hull, minimum-area rectangle (OpenCV's minAreaRect), the
 * corner ordering PaddleOCR's get_mini_boxes uses, and DB's unclip.
 */

export interface RotatedRect {
  center: Point;
  /** Side lengths along `axis` and along its normal. */
  width: number;
  height: number;
  /** Unit vector of the `width` side. */
  axis: Point;
}

/** Convex hull (Andrew's monotone chain), counter-clockwise in y-down coordinates, no collinear points. */
export function convexHull(points: readonly Point[]): Point[] {
  const pts = [...points].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  if (pts.length <= 2) return pts;
  const cross = (o: Point, a: Point, b: Point) => (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]);
  const lower: Point[] = [];
  for (const p of pts) {
    while (lower.length >= 2 && cross(lower[lower.length - 2]!, lower[lower.length - 1]!, p) <= 0) lower.pop();
    lower.push(p);
  }
  const upper: Point[] = [];
  for (let i = pts.length - 1; i >= 0; i--) {
    const p = pts[i]!;
    while (upper.length >= 2 && cross(upper[upper.length - 2]!, upper[upper.length - 1]!, p) <= 0) upper.pop();
    upper.push(p);
  }
  upper.pop();
  lower.pop();
  return lower.concat(upper);
}

/** The minimum-area enclosing rectangle of a point set (rotating calipers over hull edges). */
export function minAreaRect(points: readonly Point[]): RotatedRect {
  const hull = convexHull(points);
  if (hull.length === 0) return { center: [0, 0], width: 0, height: 0, axis: [1, 0] };
  if (hull.length === 1) return { center: hull[0]!, width: 0, height: 0, axis: [1, 0] };
  let best: RotatedRect | undefined;
  let bestArea = Infinity;
  for (let i = 0; i < hull.length; i++) {
    const a = hull[i]!;
    const b = hull[(i + 1) % hull.length]!;
    const len = Math.hypot(b[0] - a[0], b[1] - a[1]);
    if (len === 0) continue;
    const ux = (b[0] - a[0]) / len;
    const uy = (b[1] - a[1]) / len;
    let minU = Infinity;
    let maxU = -Infinity;
    let minV = Infinity;
    let maxV = -Infinity;
    for (const p of hull) {
      const u = p[0] * ux + p[1] * uy;
      const v = -p[0] * uy + p[1] * ux;
      if (u < minU) minU = u;
      if (u > maxU) maxU = u;
      if (v < minV) minV = v;
      if (v > maxV) maxV = v;
    }
    const area = (maxU - minU) * (maxV - minV);
    if (area < bestArea - 1e-9) {
      bestArea = area;
      const cu = (minU + maxU) / 2;
      const cv = (minV + maxV) / 2;
      best = { center: [cu * ux - cv * uy, cu * uy + cv * ux], width: maxU - minU, height: maxV - minV, axis: [ux, uy] };
    }
  }
  return best!;
}

/** The four corners of a rotated rectangle, in no particular order. */
export function rectCorners(rect: RotatedRect): Point[] {
  const [cx, cy] = rect.center;
  const [ux, uy] = rect.axis;
  const hw = rect.width / 2;
  const hh = rect.height / 2;
  return [
    [cx - ux * hw + uy * hh, cy - uy * hw - ux * hh],
    [cx + ux * hw + uy * hh, cy + uy * hw - ux * hh],
    [cx + ux * hw - uy * hh, cy + uy * hw + ux * hh],
    [cx - ux * hw - uy * hh, cy - uy * hw + ux * hh],
  ];
}

/**
 * Orders four corners clockwise from the top-left, as PaddleOCR does: the two
 * leftmost points give top-left and bottom-left (by y), the two rightmost give
 * top-right and bottom-right.
 */
export function orderCorners(points: readonly Point[]): Quad {
  const p = [...points].sort((a, b) => a[0] - b[0]);
  const [l0, l1, r0, r1] = p as [Point, Point, Point, Point];
  const [tl, bl] = l0[1] <= l1[1] ? [l0, l1] : [l1, l0];
  const [tr, br] = r0[1] <= r1[1] ? [r0, r1] : [r1, r0];
  return [tl, tr, br, bl];
}

/**
 * DB's unclip: the detector is trained on text regions shrunk by
 * D = A·(1 − r²)/L, so a found region is grown back by D' = A·ratio/L (area A,
 * perimeter L). For a rectangle the grown polygon's minimum-area rectangle is
 * the rectangle with each side pushed out by D'.
 */
export function unclipRect(rect: RotatedRect, ratio: number): RotatedRect {
  const area = rect.width * rect.height;
  const perimeter = 2 * (rect.width + rect.height);
  const d = perimeter > 0 ? (area * ratio) / perimeter : 0;
  return { ...rect, width: rect.width + 2 * d, height: rect.height + 2 * d };
}

/** Whether (x, y) lies inside (or on) a convex quadrilateral given in order. */
export function insideConvexQuad(quad: readonly Point[], x: number, y: number): boolean {
  let sign = 0;
  for (let i = 0; i < 4; i++) {
    const a = quad[i]!;
    const b = quad[(i + 1) % 4]!;
    const c = (b[0] - a[0]) * (y - a[1]) - (b[1] - a[1]) * (x - a[0]);
    if (c === 0) continue;
    const s = c > 0 ? 1 : -1;
    if (sign === 0) sign = s;
    else if (s !== sign) return false;
  }
  return true;
}

export function quadSize(quad: Quad): { width: number; height: number } {
  const d = (a: Point, b: Point) => Math.hypot(a[0] - b[0], a[1] - b[1]);
  return { width: Math.max(d(quad[0], quad[1]), d(quad[3], quad[2])), height: Math.max(d(quad[0], quad[3]), d(quad[1], quad[2])) };
}
