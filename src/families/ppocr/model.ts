import { readFile, stat } from 'node:fs/promises';
import type { LoadedModel, Loader, LoadOptions } from '../../core/loader.js';
import type { InstalledModel } from '../../core/store.js';
import { ServerError } from '../../core/errors.js';
import { OnnxSession } from '../../runtimes/onnx/session.js';

/**
 * The PP-OCR family on ONNX Runtime: a text detector (DB), an optional 0°/180°
 * line classifier and a CTC recogniser, plus the recogniser's character
 * dictionary. Every PP-OCR version (v4 mobile, v5 mobile/server) has this
 * shape; the files come from the catalog roles `det`, `rec`, `cls` (optional)
 * and `dict`. Sessions are created once per loaded model and reused.
 */
export interface OcrModel extends LoadedModel {
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

async function load(installed: InstalledModel, options: LoadOptions): Promise<OcrModel> {
  const { det: detPath, rec: recPath, cls: clsPath, dict: dictPath } = installed.files;
  if (!detPath || !recPath || !dictPath) {
    throw new ServerError(`OCR model '${installed.id}' needs 'det', 'rec' and 'dict' files; it has ${Object.keys(installed.files).join(', ')}`, {
      code: 'model_incomplete',
    });
  }
  const sessionOptions = { threads: options.threads };
  const dictText = await readFile(dictPath, 'utf8');
  const { det, rec, cls } = await OnnxSession.createAll({ det: detPath, rec: recPath, cls: clsPath }, sessionOptions);
  const lastDim = rec.outputShape().at(-1);
  const charset = buildCharset(parseDictionary(dictText), typeof lastDim === 'number' ? lastDim : undefined, recPath);
  const sizes = await Promise.all([detPath, recPath, clsPath].filter((p): p is string => !!p).map((p) => stat(p).then((s) => s.size)));
  // ORT keeps the weights plus working buffers: roughly twice the file size.
  const memoryBytes = sizes.reduce((a, b) => a + b, 0) * 2;
  return {
    det,
    rec,
    cls,
    charset,
    memoryBytes,
    async dispose() {
      await Promise.all([det.release(), rec.release(), cls?.release()]);
    },
  };
}

export const ocrLoader: Loader<OcrModel> = { load };
