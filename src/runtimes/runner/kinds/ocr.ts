import type { RgbImage } from '../../../image/types.js';
import type { LoadedModel } from '../../../core/loader.js';
import type { InstalledModel } from '../../../core/store.js';
import type { OcrModel, OcrRowLine } from '../../../core/tasks/ocr.js';
import { RunnerClient } from '../client.js';
import { assertModel, serve, type Served } from '../serving.js';

/** An OCR model's properties, read once after the load. */
type OcrProps = Pick<OcrModel, 'memoryBytes'>;

/** The server's OcrModel for an OCR pipeline in a runner (PP-OCR on ONNX Runtime). */
export class OcrRunnerClient extends RunnerClient<OcrModel, OcrProps> implements OcrModel {
  read(image: RgbImage, model: InstalledModel, signal?: AbortSignal): Promise<OcrRowLine[]> {
    return this.remote.call('read', image, model, signal);
  }
}

/** The runner's side: the loaded OCR pipeline's method. */
export function serveOcr(model: LoadedModel): Served {
  assertModel<OcrModel>(model, 'an OCR model', ['read']);
  return serve<OcrModel, OcrProps>({ props: { memoryBytes: model.memoryBytes }, methods: { read: model.read.bind(model) } });
}
