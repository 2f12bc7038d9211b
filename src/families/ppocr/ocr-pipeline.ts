import type { OcrLine, OcrRowLine } from '../../core/tasks/ocr.js';
import type { RgbImage } from '../../image/types.js';
import { classifyOrientation } from './classify.js';
import { detect } from './detect.js';
import { lineCrop } from './lines.js';
import type { PpOcrSessions } from './model.js';
import type { OcrOptions } from './options.js';
import { readingRows } from './order.js';
import { recognize } from './recognize.js';

/**
 * PP-OCR's pipeline: detect once per image → rectify each line → optional
 * 0°/180° classifier → batched CTC recognition → reading order.
 */

/** The pipeline over one decoded image with a loaded model. */
export async function runPipeline(model: PpOcrSessions, image: RgbImage, options: OcrOptions, signal?: AbortSignal): Promise<OcrRowLine[]> {
  const boxes = await detect(model, image, options);
  signal?.throwIfAborted();
  if (boxes.length === 0) return [];
  const rows = readingRows(boxes);
  const ordered = rows.flatMap((row, r) => row.map((box) => ({ ...box, row: r })));
  await yieldToEventLoop();
  const crops = await classifyOrientation(model, image, ordered.map((b) => lineCrop(b.quad, options.rec_pad)), options);
  signal?.throwIfAborted();
  await yieldToEventLoop();
  const decoded = await recognize(model, image, crops, options, signal);
  const lines: OcrRowLine[] = [];
  ordered.forEach((box, i) => {
    const { text, score } = decoded[i]!;
    const trimmed = text.trim();
    if (!trimmed || score < options.rec_min_score) return;
    lines.push({ text: trimmed, score: round4(score), box: box.quad.map(([x, y]) => [Math.round(x), Math.round(y)]) as OcrLine['box'], row: box.row });
  });
  return lines;
}

function round4(v: number): number {
  return Math.round(v * 1e4) / 1e4;
}

/** Lets queued I/O run between CPU-heavy stages of a large page. */
function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
