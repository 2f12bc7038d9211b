import type { PpOcrSessions } from './model.js';
import { resizeRgb } from '../../image/decode.js';
import type { Quad, RgbImage } from '../../image/types.js';
import { dbPostprocess } from './db.js';
import { DET_MEAN, DET_STD, type OcrOptions } from './options.js';

export interface DetectedBox {
  /** Corners TL, TR, BR, BL in original image pixels (unrounded). */
  quad: Quad;
  score: number;
}

/** Size of the detector input: scaled into [det_min_side, det_max_side], each side a multiple of 32. */
export function detectionSize(width: number, height: number, options: OcrOptions): { width: number; height: number } {
  let ratio = 1;
  const long = Math.max(width, height);
  const short = Math.min(width, height);
  if (long > options.det_max_side) ratio = options.det_max_side / long;
  // A one-line strip is upscaled only as far as its long side allows.
  if (short * ratio < options.det_min_side) ratio = Math.min(options.det_min_side / short, options.det_max_side / long);
  const round32 = (v: number) => Math.max(32, Math.round((v * ratio) / 32) * 32);
  return { width: round32(width), height: round32(height) };
}

/** Runs the text detector once over the whole image and returns text-line quads in original coordinates. */
export async function detect(model: PpOcrSessions, image: RgbImage, options: OcrOptions): Promise<DetectedBox[]> {
  const size = detectionSize(image.width, image.height, options);
  const input = await resizeRgb(image, size.width, size.height);
  const tensor = detectorTensor(input);
  const out = await model.det.run(tensor, [1, 3, size.height, size.width]);
  const mapH = out.dims[2] ?? size.height;
  const mapW = out.dims[3] ?? size.width;
  const found = await dbPostprocess(out.data, mapW, mapH, {
    threshold: options.det_thresh,
    boxThreshold: options.det_box_thresh,
    unclipRatio: options.det_unclip_ratio,
    maxCandidates: options.det_max_candidates,
    minSize: 3,
  });
  const sx = image.width / mapW;
  const sy = image.height / mapH;
  const clampX = (v: number) => Math.min(image.width, Math.max(0, v * sx));
  const clampY = (v: number) => Math.min(image.height, Math.max(0, v * sy));
  return found.map(({ quad, score }) => ({ quad: quad.map(([x, y]) => [clampX(x), clampY(y)]) as Quad, score }));
}

/** NCHW float32, channels in BGR order (the models were trained on OpenCV's BGR), ImageNet-normalised. */
function detectorTensor(image: RgbImage): Float32Array {
  const plane = image.width * image.height;
  const out = new Float32Array(plane * 3);
  const { data } = image;
  for (let c = 0; c < 3; c++) {
    const src = 2 - c; // B, G, R
    const scale = 1 / (255 * DET_STD[c]!);
    const shift = DET_MEAN[c]! / DET_STD[c]!;
    const base = c * plane;
    for (let i = 0; i < plane; i++) out[base + i] = data[i * 3 + src]! * scale - shift;
  }
  return out;
}
