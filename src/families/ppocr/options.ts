import { z } from 'zod';
import { ServerError } from '../../core/errors.js';

/**
 * Pipeline settings, read from a catalog entry's `defaults` so each model
 * carries the values it was tuned with. Everything has PaddleOCR's default.
 */
const schema = z.object({
  /** Detection input: the longer side is scaled down to at most this (pixels); boxes are mapped back. */
  det_max_side: z.int().min(32).default(960),
  /** Detection input: tiny images are scaled up so the shorter side is at least this. */
  det_min_side: z.int().min(32).default(64),
  det_thresh: z.number().min(0).max(1).default(0.3),
  det_box_thresh: z.number().min(0).max(1).default(0.6),
  det_unclip_ratio: z.number().positive().default(1.5),
  det_max_candidates: z.int().positive().default(1000),
  /** Recogniser input height; PP-OCRv3+ recognisers use 48. */
  rec_height: z.int().positive().default(48),
  /** Narrowest recogniser input (PaddleOCR's 320 for height 48). */
  rec_min_width: z.int().positive().default(320),
  /**
   * Margin added around each line crop before recognition, as a fraction of the
   * line height (see lines.ts). Measured with PP-OCRv4 on the benchmark's
   * rendered pages (CER): unclip 1.5 with pad 0 → 9.5% (lost spaces), 0.15 →
   * 0.18%, 0.3 → 0.01%, 0.4 → 0.03%; unclip 2.0 with pad 0.2 → 0.03%, 0.25 →
   * 0.01% (the catalog's setting: the looser unclip also makes the returned
   * boxes enclose the ink).
   */
  rec_pad: z.number().min(0).max(1).default(0.3),
  /** Most lines per recogniser run; lines are sorted by aspect ratio first, so padding stays small. */
  rec_batch: z.int().positive().default(16),
  /**
   * Most total input width (lines x padded width, pixels) per recogniser run.
   * On CPU, batching does not make ORT cheaper per line, it makes it dearer
   * once the activations outgrow the cache (PP-OCRv4, 1 thread, ms per line:
   * 1x384 37, 4x384 44, 8x384 66; 2x640 71, 4x640 106, 6x640 125). On an
   * 8-line page, recognition took 0.53-0.59 s one line per run, 0.52-0.61 s
   * with this budget (2 long or 4 short lines per run) and 0.78-1.02 s with
   * 2560. A GPU build would raise it.
   */
  rec_batch_width: z.int().positive().default(1536),
  /** Lines recognised with a lower confidence are dropped (PaddleOCR's drop_score). */
  rec_min_score: z.number().min(0).max(1).default(0.5),
  /** Classifier input size and the confidence needed to turn a line by 180°. */
  cls_height: z.int().positive().default(48),
  cls_width: z.int().positive().default(192),
  cls_thresh: z.number().min(0).max(1).default(0.9),
  use_cls: z.boolean().default(true),
});

export type OcrOptions = z.output<typeof schema>;

export function ocrOptions(defaults: Record<string, unknown>, modelId: string): OcrOptions {
  const known = Object.fromEntries(Object.entries(defaults).filter(([k]) => k in schema.shape));
  const parsed = schema.safeParse(known);
  if (!parsed.success) throw new ServerError(`models.json: invalid OCR defaults for '${modelId}': ${z.prettifyError(parsed.error)}`, { code: 'invalid_catalog' });
  return parsed.data;
}

/** Detection normalisation (ImageNet mean/std, applied in BGR order as PaddleOCR's cv2 pipeline does). */
export const DET_MEAN = [0.485, 0.456, 0.406] as const;
export const DET_STD = [0.229, 0.224, 0.225] as const;
