import { decodeImage, DEFAULT_MAX_PIXELS } from '../../image/decode.js';
import type { Point, RgbImage } from '../../image/types.js';
import type { Engine } from '../engine.js';
import type { LoadedModel } from '../loader.js';
import type { InstalledModel } from '../store.js';

/**
 * OCR as a task: image bytes in, text lines with confidences and boxes out.
 * The model (an OcrModel: families/ppocr's PP-OCR pipeline) reads the
 * decoded image into lines in reading order; the task joins them into the
 * page's text. HTTP and CLI both call `ocr()`; neither knows the pipeline.
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

/** What a loaded OCR model (kind `ocr`) offers the task. */
export interface OcrModel extends LoadedModel {
  /** The text lines of a decoded image in reading order; `model` is the installed model as resolved for this request (its catalog defaults tune the pipeline). */
  read(image: RgbImage, model: InstalledModel, signal?: AbortSignal): Promise<OcrRowLine[]>;
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

/** The OCR model a request that names none goes to (core/model-choice.ts; PP-OCRv4 is bundled, so there is always one). */
export function defaultOcrModel(engine: Engine): Promise<string> {
  return engine.defaultModel('ocr');
}

export async function ocr(engine: Engine, request: OcrRequest, signal?: AbortSignal): Promise<OcrResult> {
  const started = performance.now();
  const model = request.model ?? (await defaultOcrModel(engine));
  // Resolve first so an unknown model is reported before the image is even decoded.
  await engine.resolve(model, ['ocr']);
  const image = await decodeImage(request.image, { maxPixels: request.maxPixels ?? DEFAULT_MAX_PIXELS, param: request.param ?? 'image' });
  signal?.throwIfAborted();
  const lines = await engine.withModel<OcrModel, OcrRowLine[]>(
    model,
    ['ocr'],
    async (loaded, installed) => {
      const read = await loaded.read(image, installed, signal);
      engine.report({ type: 'ocr', model: installed.id, pages: 1 });
      return read;
    },
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

/** A recognised line and the reading-order row it belongs to (rows are joined with '\n' in `text`). */
export interface OcrRowLine extends OcrLine {
  row: number;
}

function pageText(lines: readonly OcrRowLine[]): string {
  const rows: string[][] = [];
  let last = -1;
  for (const line of lines) {
    if (line.row !== last) rows.push([]);
    rows[rows.length - 1]!.push(line.text);
    last = line.row;
  }
  return rows.map((r) => r.join(' ')).join('\n');
}
