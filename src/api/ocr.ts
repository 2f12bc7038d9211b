import { z } from 'zod';
import { keepAliveField } from './common.js';
import type { OcrLine, OcrResult } from '../core/tasks/ocr.js';

/**
 * POST /v1/ocr. The image comes as `image_base64` (raw base64 or a
 * `data:image/<type>;base64,` URI, the spec's form), as `image_url` (a local
 * path or http(s) URL, under the remote-input policy), or as a multipart
 * `file` upload. Exactly one source per request (checked by the route, which
 * also sees the multipart file).
 */
export const ocrRequestSchema = z.object({
  model: z.string().min(1).optional(),
  image_base64: z.string().optional(),
  image_url: z.string().min(1).optional(),
  keep_alive: keepAliveField,
});
export type OcrRequestBody = z.infer<typeof ocrRequestSchema>;

/** The response: exactly the spec's OCR response. */
export type OcrResponse = OcrResult;
export type OcrResponseLine = OcrLine;
