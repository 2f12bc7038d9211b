import type { Family } from '../../core/loader.js';

/** PaddleOCR (PP-OCR v4/v5 ONNX exports): text detection, orientation, recognition. */
export const ppocr: Family = {
  loaders: { 'onnx:ocr': () => import('./loader.js').then((m) => m.ocrLoader) },
};
