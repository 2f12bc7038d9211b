import ort from 'onnxruntime-node';
import { floatType, readFloats, toFloatType, type FloatType } from '../../runtimes/onnx/float-io.js';
import { bindRoles, staticSize, type GraphValue } from './graph-io.js';
import { CACHED_IO } from './prepared/predictor-graph.js';

/**
 * The code predictor: given the talker state and a frame's first code, it
 * draws the frame's 15 residual codes one group after another. Two graphs
 * can do it:
 * - the published `code_predictor`: the talker state and the frame's codes
 *   in, one row of logits per residual group out (row g − 1 scores group g);
 *   it is run once per group and recomputes all 16 rows and 15 heads each
 *   time. Bound by role like the talker (graph-io.ts): int4 and fp16 exports
 *   rename the logits and take and give float16.
 * - the KV-cached graph built from its weights (prepared/predictor-graph.ts):
 *   the same inputs plus the rows to add and the cache, one head's logits
 *   out; a frame is then 2 rows, then 1 row a group.
 */

export interface PredictorBinding {
  hidden: string;
  codes: string;
  logits: string;
  types: { hidden: FloatType; logits: FloatType };
  /** Codes per residual group, when the graph declares it. */
  vocab?: number;
}

export function bindPredictor(inputs: readonly GraphValue[], outputs: readonly GraphValue[], dims: { hidden?: number; groups: number }): PredictorBinding {
  const input = bindRoles(
    inputs,
    {
      hidden: { name: 'talker_hidden', kind: 'float', shape: [1, dims.hidden] },
      codes: { name: 'codec_ids', kind: 'integer', shape: [1, dims.groups] },
    },
    'code_predictor',
  );
  const { logits } = bindRoles(outputs, { logits: { name: 'logits', kind: 'float', shape: [1, undefined, undefined] } }, 'code_predictor');
  return {
    hidden: input.hidden.name,
    codes: input.codes.name,
    logits: logits.name,
    types: {
      hidden: floatType(input.hidden.type, `the code predictor's ${input.hidden.name}`),
      logits: floatType(logits.type, `the code predictor's ${logits.name}`),
    },
    vocab: staticSize(logits, 2),
  };
}

/** A session's inputs or outputs as graph-io.ts binds them (non-tensor values left out). */
export function graphValues(metadata: readonly ort.InferenceSession.ValueMetadata[]): GraphValue[] {
  return metadata.flatMap((m) => (m.isTensor ? [{ name: m.name, type: m.type, shape: m.shape }] : []));
}

export interface FramePredictor {
  readonly vocab: number;
  /**
   * Fills the codes array it was made with (codes[1 …]) from the talker state and codes[0], drawing each group's
   * code from its logits with `draw`; false when `aborted` stopped it midway.
   */
  frame(hidden: Float32Array, draw: (logits: Float32Array) => number, aborted: () => boolean): Promise<boolean>;
  release(): Promise<void>;
}

abstract class Predictor implements FramePredictor {
  protected readonly io: PredictorBinding;
  protected readonly codesTensor: ort.Tensor;
  readonly vocab: number;

  constructor(
    protected readonly session: ort.InferenceSession,
    protected readonly width: number,
    protected readonly codes: BigInt64Array,
  ) {
    const groups = codes.length;
    // The cached graph's own inputs (start, end, the cache) follow the published two.
    this.io = bindPredictor(graphValues(session.inputMetadata).slice(0, 2), graphValues(session.outputMetadata).slice(0, 1), { hidden: width, groups });
    this.codesTensor = new ort.Tensor('int64', codes, [1, groups]);
    this.vocab = this.io.vocab ?? 2048;
  }

  protected hiddenTensor(hidden: Float32Array): ort.Tensor {
    return new ort.Tensor(this.io.types.hidden, toFloatType(hidden, this.io.types.hidden), [1, this.width]);
  }

  abstract frame(hidden: Float32Array, draw: (logits: Float32Array) => number, aborted: () => boolean): Promise<boolean>;

  release(): Promise<void> {
    return this.session.release();
  }
}

/** The published graph, run once per group. */
export class PublishedPredictor extends Predictor {
  async frame(hidden: Float32Array, draw: (logits: Float32Array) => number, aborted: () => boolean): Promise<boolean> {
    const { io, codes } = this;
    const feeds = { [io.hidden]: this.hiddenTensor(hidden), [io.codes]: this.codesTensor };
    for (let g = 1; g < codes.length; g++) {
      // A frame is 15 calls: an abort need not wait for the whole frame.
      if (aborted()) return false;
      const out = (await this.session.run(feeds))[io.logits]!;
      codes[g] = BigInt(draw(readFloats(out.type, out.data, (g - 1) * this.vocab, g * this.vocab)));
    }
    return true;
  }
}

/** The KV-cached graph: rows [0, 2) first, then the row of each new code, with the cache of the rows before. */
export class CachedPredictor extends Predictor {
  private readonly bounds: ort.Tensor[];
  private readonly empty: Record<string, ort.Tensor>;
  private readonly layers: number;

  constructor(session: ort.InferenceSession, width: number, codes: BigInt64Array) {
    super(session, width, codes);
    this.bounds = Array.from({ length: codes.length + 1 }, (_, i) => new ort.Tensor('int64', BigInt64Array.of(BigInt(i)), [1]));
    const pastKeys = session.inputMetadata.filter((m) => m.isTensor && m.name.startsWith(CACHED_IO.past(0, 'key').replace(/0$/, '')));
    const shape = pastKeys[0]?.isTensor ? pastKeys[0].shape.map((d) => (typeof d === 'number' ? d : 0)) : [];
    if (shape.length !== 4) throw new Error('the prepared code predictor has no cache inputs');
    this.layers = pastKeys.length;
    this.empty = {};
    for (let layer = 0; layer < this.layers; layer++) {
      for (const part of ['key', 'value'] as const) this.empty[CACHED_IO.past(layer, part)] = new ort.Tensor('float32', new Float32Array(0), shape);
    }
  }

  async frame(hidden: Float32Array, draw: (logits: Float32Array) => number, aborted: () => boolean): Promise<boolean> {
    const { io, codes } = this;
    const feeds: Record<string, ort.Tensor> = { [io.hidden]: this.hiddenTensor(hidden), [io.codes]: this.codesTensor, ...this.empty };
    for (let g = 1; g < codes.length; g++) {
      if (aborted()) return false;
      feeds[CACHED_IO.start] = this.bounds[g === 1 ? 0 : g]!;
      feeds[CACHED_IO.end] = this.bounds[g + 1]!;
      const out = await this.session.run(feeds);
      const logits = out[CACHED_IO.logits]!;
      codes[g] = BigInt(draw(readFloats(logits.type, logits.data)));
      for (let layer = 0; layer < this.layers; layer++) {
        for (const part of ['key', 'value'] as const) feeds[CACHED_IO.past(layer, part)] = out[CACHED_IO.present(layer, part)]!;
      }
    }
    return true;
  }
}

/** The predictor of an opened graph: the KV-cached one or the published one, filling `codes`. */
export function framePredictor(session: ort.InferenceSession, cached: boolean, width: number, codes: BigInt64Array): FramePredictor {
  return cached ? new CachedPredictor(session, width, codes) : new PublishedPredictor(session, width, codes);
}
