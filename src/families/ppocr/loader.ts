import { readFile, stat } from 'node:fs/promises';
import type { Loader, LoadOptions } from '../../core/loader.js';
import type { InstalledModel } from '../../core/store.js';
import { ServerError } from '../../core/errors.js';
import type { OcrModel } from '../../core/tasks/ocr.js';
import { OnnxSession } from '../../runtimes/onnx/session.js';
import { buildCharset, parseDictionary, type PpOcrSessions } from './model.js';
import { ocrOptions } from './options.js';
import { runPipeline } from './ocr-pipeline.js';

/** The `onnx:ocr` loader: a PP-OCR model's sessions, reading pages through ocr-pipeline.ts. */

export interface PpOcrModel extends PpOcrSessions, OcrModel {}

async function load(installed: InstalledModel, options: LoadOptions): Promise<PpOcrModel> {
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
  const model: PpOcrModel = {
    det,
    rec,
    cls,
    charset,
    memoryBytes,
    // The pipeline's settings come from the catalog entry of the model as resolved for this request.
    read: (image, resolved, signal) => runPipeline(model, image, ocrOptions(resolved.entry.defaults, resolved.id), signal),
    async dispose() {
      await Promise.all([det.release(), rec.release(), cls?.release()]);
    },
  };
  return model;
}

export const ocrLoader: Loader<PpOcrModel> = { load };
