import type { OcrModel } from '../../families/ppocr/model.js';
import { decodeImage, DEFAULT_MAX_PIXELS } from '../../image/decode.js';
import type { Point, RgbImage } from '../../image/types.js';
import type { Engine } from '../engine.js';
import { classifyOrientation } from '../../families/ppocr/classify.js';
import { detect } from '../../families/ppocr/detect.js';
import { lineCrop } from '../../families/ppocr/lines.js';
import { ocrOptions, type OcrOptions } from '../../families/ppocr/options.js';
import { readingRows } from '../../families/ppocr/order.js';
import { recognize } from '../../families/ppocr/recognize.js';

/**
 * OCR as a task: image bytes in, text lines with confidences and boxes out.
 * PP-OCR's pipeline: detect once per image → rectify each line → optional
 * 0°/180° classifier → batched CTC recognition → reading order. HTTP and CLI
 * both call `ocr()`; neither knows the pipeline.
 */

export interface OcrLine {
  text: string;
  /** Mean probability of the recognised characters, 0–1. */
  score: number;
  /** Corners clockwise from top-left, integer pixels of the original (EXIF-rotated) image. */
  box: [Point, Point, Point, Point];
}

export interface OcrResult {
  /** Rows of the page top to bottom joined with '\n'; boxes within one row joined with ' '. */
  text: string;
  lines: OcrLine[];
  image_width: number;
  image_height: number;
  elapsed_ms: number;
}

export interface OcrRequest {
  /** Model id or alias; defaults to the best installed OCR model. */
  model?: string;
  image: Uint8Array;
  maxPixels?: number;
  /** Request field named in image errors. */
  param?: string;
  /** How long the model stays loaded after this request (ms; negative = forever). */
  keepAliveMs?: number;
}

/** Preferred OCR models, best first: the first installed one is the default. */
export const OCR_MODEL_PREFERENCE = ['ppocr-v5-server', 'ppocr-v5-mobile', 'ppocr-v4-mobile'] as const;

export async function defaultOcrModel(engine: Engine): Promise<string> {
  for (const id of OCR_MODEL_PREFERENCE) {
    if (await engine.store.resolve(id)) return id;
  }
  return OCR_MODEL_PREFERENCE[OCR_MODEL_PREFERENCE.length - 1];
}

export async function ocr(engine: Engine, request: OcrRequest, signal?: AbortSignal): Promise<OcrResult> {
  const started = performance.now();
  const model = request.model ?? (await defaultOcrModel(engine));
  // Resolve first so an unknown model is reported before the image is even decoded.
  await engine.resolve(model, ['ocr']);
  const image = await decodeImage(request.image, { maxPixels: request.maxPixels ?? DEFAULT_MAX_PIXELS, param: request.param ?? 'image' });
  signal?.throwIfAborted();
  const lines = await engine.withModel<OcrModel, RowLine[]>(model, ['ocr'], (loaded, installed) =>
    runPipeline(loaded, image, ocrOptions(installed.entry.defaults, installed.id), signal),
    { keepAliveMs: request.keepAliveMs },
  );
  return {
    text: pageText(lines),
    lines: lines.map(({ text, score, box }) => ({ text, score, box })),
    image_width: image.width,
    image_height: image.height,
    elapsed_ms: Math.round(performance.now() - started),
  };
}

interface RowLine extends OcrLine {
  row: number;
}

/** The pipeline over one decoded image with a loaded model. */
export async function runPipeline(model: OcrModel, image: RgbImage, options: OcrOptions, signal?: AbortSignal): Promise<RowLine[]> {
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
  const lines: RowLine[] = [];
  ordered.forEach((box, i) => {
    const { text, score } = decoded[i]!;
    const trimmed = text.trim();
    if (!trimmed || score < options.rec_min_score) return;
    lines.push({ text: trimmed, score: round4(score), box: box.quad.map(([x, y]) => [Math.round(x), Math.round(y)]) as OcrLine['box'], row: box.row });
  });
  return lines;
}

function pageText(lines: readonly RowLine[]): string {
  const rows: string[][] = [];
  let last = -1;
  for (const line of lines) {
    if (line.row !== last) rows.push([]);
    rows[rows.length - 1]!.push(line.text);
    last = line.row;
  }
  return rows.map((r) => r.join(' ')).join('\n');
}

function round4(v: number): number {
  return Math.round(v * 1e4) / 1e4;
}

/** Lets queued I/O run between CPU-heavy stages of a large page. */
function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
