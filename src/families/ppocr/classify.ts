import type { PpOcrSessions } from './model.js';
import type { RgbImage } from '../../image/types.js';
import { packLines, turn180, type LineCrop } from './lines.js';
import type { OcrOptions } from './options.js';

const BATCH = 64;

/**
 * The 0°/180° direction classifier: lines it is confident are upside down
 * are turned before recognition. Batched: one run per 64 lines.
 */
export async function classifyOrientation(model: PpOcrSessions, image: RgbImage, crops: LineCrop[], options: OcrOptions): Promise<LineCrop[]> {
  if (!model.cls || !options.use_cls || crops.length === 0) return crops;
  const out = [...crops];
  for (let start = 0; start < crops.length; start += BATCH) {
    const batch = crops.slice(start, start + BATCH);
    const { tensor } = await packLines(image, batch, options.cls_height, options.cls_width);
    const result = await model.cls.run(tensor, [batch.length, 3, options.cls_height, options.cls_width]);
    const classes = result.dims[1] ?? 2;
    batch.forEach((crop, i) => {
      const p0 = result.data[i * classes]!;
      const p180 = result.data[i * classes + 1]!;
      if (p180 > p0 && p180 >= options.cls_thresh) out[start + i] = turn180(crop);
    });
  }
  return out;
}
