import type { Point, RgbImage } from './types.js';

/**
 * Draws closed polygon outlines onto a copy of an image, for people to check
 * what a detector found (`lserve ocr --boxes`). Thickness scales with the
 * image so boxes stay visible on large scans.
 */
export function drawPolygons(image: RgbImage, polygons: readonly (readonly Point[])[], color: [number, number, number] = [230, 30, 30]): RgbImage {
  const out: RgbImage = { data: new Uint8Array(image.data), width: image.width, height: image.height };
  const radius = Math.max(1, Math.round(Math.max(image.width, image.height) / 800));
  for (const polygon of polygons) {
    for (let i = 0; i < polygon.length; i++) {
      const a = polygon[i]!;
      const b = polygon[(i + 1) % polygon.length]!;
      drawLine(out, a, b, radius, color);
    }
  }
  return out;
}

function drawLine(image: RgbImage, a: Point, b: Point, radius: number, color: [number, number, number]): void {
  const steps = Math.max(1, Math.ceil(Math.hypot(b[0] - a[0], b[1] - a[1])));
  for (let s = 0; s <= steps; s++) {
    const x = Math.round(a[0] + ((b[0] - a[0]) * s) / steps);
    const y = Math.round(a[1] + ((b[1] - a[1]) * s) / steps);
    for (let dy = -radius + 1; dy < radius; dy++) {
      for (let dx = -radius + 1; dx < radius; dx++) setPixel(image, x + dx, y + dy, color);
    }
  }
}

function setPixel(image: RgbImage, x: number, y: number, color: [number, number, number]): void {
  if (x < 0 || y < 0 || x >= image.width || y >= image.height) return;
  const o = (y * image.width + x) * 3;
  image.data[o] = color[0];
  image.data[o + 1] = color[1];
  image.data[o + 2] = color[2];
}
