/** An 8-bit, 3-channel (RGB), row-major, tightly packed image in memory. */
export interface RgbImage {
  data: Uint8Array;
  width: number;
  height: number;
}

/** A point in pixel coordinates (x right, y down). */
export type Point = [number, number];

/** Four corners of a (possibly rotated) quadrilateral: top-left, top-right, bottom-right, bottom-left. */
export type Quad = [Point, Point, Point, Point];
