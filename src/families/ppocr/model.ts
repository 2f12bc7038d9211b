import { ServerError } from '../../core/errors.js';
import type { OnnxSession } from '../../runtimes/onnx/session.js';

/**
 * The PP-OCR family on ONNX Runtime: a text detector (DB), an optional 0°/180°
 * line classifier and a CTC recogniser, plus the recogniser's character
 * dictionary. Every PP-OCR version (v4 mobile, v5 mobile/server) has this
 * shape; the files come from the catalog roles `det`, `rec`, `cls` (optional)
 * and `dict`. Sessions are created once per loaded model and reused.
 */
export interface PpOcrSessions {
  readonly det: OnnxSession;
  readonly rec: OnnxSession;
  readonly cls?: OnnxSession;
  /**
   * Recogniser class index → text: index 0 is the CTC blank (''), then the
   * dictionary lines in order, then ' ' when the model has a space class.
   */
  readonly charset: readonly string[];
}

/** Parses a PP-OCR dictionary: one symbol per line, a trailing newline is not a symbol. */
export function parseDictionary(text: string): string[] {
  const lines = text.replace(/^\uFEFF/, '').split(/\r?\n/);
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/**
 * Builds the class table, checking it against the recogniser's output width
 * when the model declares one. PP-OCR recognisers have `dict + 2` classes
 * (blank + dictionary + space) when trained with `use_space_char`, which every
 * released model is; `dict + 1` means no space class.
 */
export function buildCharset(dictionary: readonly string[], classes: number | undefined, file: string): string[] {
  const charset = ['', ...dictionary];
  if (classes === undefined || classes === dictionary.length + 2) return [...charset, ' '];
  if (classes === dictionary.length + 1) return charset;
  throw new ServerError(
    `OCR model '${file}' has ${classes} output classes but its dictionary has ${dictionary.length} symbols (expected ${dictionary.length + 2}): wrong dictionary for this model?`,
    { code: 'model_mismatch' },
  );
}
