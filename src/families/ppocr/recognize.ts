import type { PpOcrSessions } from './model.js';
import type { RgbImage } from '../../image/types.js';
import { ctcGreedyDecode, type Decoded } from './ctc.js';
import { packLines, type LineCrop } from './lines.js';
import type { OcrOptions } from './options.js';

/** Widest recogniser input; longer lines are squeezed rather than making one huge tensor. */
const MAX_WIDTH = 3200;

/**
 * Recognises every line of an image in a few batched runs. Lines are sorted
 * by aspect ratio so each batch pads to a similar width (PaddleOCR's
 * strategy); batches are capped by total width (`rec_batch_width`, see
 * options.ts for why), then decoded with greedy CTC; results return in input
 * order.
 */
export async function recognize(model: PpOcrSessions, image: RgbImage, crops: readonly LineCrop[], options: OcrOptions, signal?: AbortSignal): Promise<Decoded[]> {
  const results: Decoded[] = new Array(crops.length);
  const order = crops.map((_, i) => i).sort((a, b) => crops[a]!.ratio - crops[b]!.ratio);
  const height = options.rec_height;
  for (let start = 0; start < order.length; ) {
    signal?.throwIfAborted();
    // Sorted by ratio, so the batch's widest line is its last: grow while the width budget allows.
    let end = start + 1;
    const widthOf = (count: number) => Math.min(MAX_WIDTH, Math.ceil(height * Math.max(options.rec_min_width / height, crops[order[start + count - 1]!]!.ratio)));
    while (end < order.length && end - start < options.rec_batch && (end - start + 1) * widthOf(end - start + 1) <= options.rec_batch_width) end++;
    const indices = order.slice(start, end);
    const batch = indices.map((i) => crops[i]!);
    const batchWidth = widthOf(batch.length);
    start = end;
    const { tensor, widths } = await packLines(image, batch, height, batchWidth);
    const out = await model.rec.run(tensor, [batch.length, 3, height, batchWidth]);
    const [, steps = 0, classes = 0] = out.dims;
    if (classes !== model.charset.length) {
      throw new Error(`recogniser output has ${classes} classes but the dictionary gives ${model.charset.length}`);
    }
    indices.forEach((lineIndex, n) => {
      // Steps past the line's own width only see padding; one extra step absorbs rounding.
      const used = Math.min(steps, Math.ceil((steps * widths[n]!) / batchWidth) + 1);
      results[lineIndex] = ctcGreedyDecode(out.data, n * steps * classes, used, classes, model.charset);
    });
  }
  return results;
}
