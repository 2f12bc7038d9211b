import type { EmbedDecoder } from '../../../runtimes/llama/embed-decoder.js';
import type { FramePredictor } from '../code-predictor.js';
import type { FrameTalker, TalkerStep } from '../talker.js';
import type { PredictorFront } from './predictor-front.js';

/**
 * The talker and the code predictor on llama.cpp: the GGUF files converted
 * at pull (convert.ts), decoded from input embeddings through lserve's
 * binding (runtimes/llama/embed-decoder.ts). Same contracts as the ONNX
 * graphs (talker.ts, code-predictor.ts), so the frame loop does not know
 * which runs.
 */

export class LlamaTalker implements FrameTalker {
  constructor(private readonly decoder: EmbedDecoder) {}

  get capacity(): number {
    return this.decoder.contextSize;
  }

  async step(embeds: Float32Array, count: number, past: number): Promise<TalkerStep> {
    if (this.decoder.length !== past) await this.decoder.truncate(past);
    const { hidden, logits } = await this.decoder.decode(embeds, count, past);
    return { hidden, logits };
  }

  release(): Promise<void> {
    return this.decoder.dispose();
  }
}

/**
 * The predictor's 16 rows a frame: row 0 (the talker state through the
 * published front), row r the embedding of code r − 1; the first decode
 * takes rows 0 and 1, each later one a row, and row r is scored by head
 * r − 1: the model's own output for row 1, the decoder's extra head r − 1
 * after it.
 */
export class LlamaPredictor implements FramePredictor {
  readonly vocab: number;
  private readonly rows: Float32Array;

  constructor(
    private readonly decoder: EmbedDecoder,
    private readonly front: PredictorFront,
    private readonly codes: BigInt64Array,
  ) {
    this.vocab = decoder.vocab;
    this.rows = new Float32Array(2 * front.width);
  }

  async frame(hidden: Float32Array, draw: (logits: Float32Array) => number, aborted: () => boolean): Promise<boolean> {
    const { codes, decoder, front, rows } = this;
    const width = front.width;
    const row = (r: number) => {
      const code = Number(codes[r - 1]);
      return front.tables[r - 1]!.subarray(code * width, (code + 1) * width);
    };
    rows.set(await front.stateRow(hidden), 0);
    rows.set(row(1), width);
    await decoder.truncate(0);
    // The pool polls between a frame's steps and sleeps after its last (the codec decoder may run next).
    const last = codes.length - 1;
    let out = await decoder.decode(rows, 2, 0, undefined, -1, last > 1);
    for (let g = 1; g < codes.length; g++) {
      if (g > 1) {
        if (aborted()) return false;
        out = await decoder.decode(row(g), 1, g, undefined, g - 1, g < last);
      }
      codes[g] = BigInt(draw(out.logits));
    }
    return true;
  }

  async release(): Promise<void> {
    await Promise.all([this.decoder.dispose(), this.front.release()]);
  }
}
