import ort from 'onnxruntime-node';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { readFloats, toFloatType } from '../../../runtimes/onnx/float-io.js';
import { Emitter, tensorInfo } from '../prepared/emitter.js';
import type { PredictorWeights } from '../prepared/predictor-weights.js';
import { bindPredictor, graphValues, type PredictorBinding } from '../code-predictor.js';

/**
 * The code predictor's input rows for its llama.cpp transformer, computed by
 * the published graph's own embedding front (and, in the 1.7B models, its
 * projection into the predictor's width): row 0 the talker state, row r the
 * embedding of the frame's code r − 1 in its group's table. A row of a code
 * depends on that code alone, so each group's table is read once, at load,
 * by running the front over every code (a few hundred ms); a frame then
 * asks the front only for its row 0.
 */

const { onnx } = onnxProto;
const ROWS = 'predictor_rows';

export class PredictorFront {
  /** The codes input, every group's code set alike while the tables are read, zeros after. */
  private readonly codeValues: BigInt64Array;
  private readonly codes: ort.Tensor;
  /** Per group 1 … groups − 1's input (codes of group g − 1): [vocab, width] rows. */
  readonly tables: Float32Array[] = [];
  private rowWidth = 0;

  private constructor(
    private readonly session: ort.InferenceSession,
    private readonly io: PredictorBinding,
    private readonly hiddenWidth: number,
    groups: number,
  ) {
    this.codeValues = new BigInt64Array(groups);
    this.codes = new ort.Tensor('int64', this.codeValues, [1, groups]);
  }

  /** Floats in a row. */
  get width(): number {
    return this.rowWidth;
  }

  static async open(weights: PredictorWeights, opsets: OnnxTypes.IOperatorSetIdProto[], groups: number, vocab: number, options: ort.InferenceSession.SessionOptions): Promise<PredictorFront> {
    const e = new Emitter('front/');
    for (const t of weights.front.initializers) e.constant(t);
    e.nodes.push(...weights.front.nodes);
    const rows = weights.projection ? e.linear(weights.front.output, weights.projection) : weights.front.output;
    e.nodes.push({ opType: 'Identity', input: [rows], output: [ROWS], name: 'front/rows' });
    const graph: OnnxTypes.IGraphProto = { name: 'code_predictor_front', node: e.nodes, initializer: e.initializers, input: weights.inputs, output: [tensorInfo(ROWS, onnx.TensorProto.DataType.FLOAT, [1, groups, 'width'])] };
    const domains = new Map(opsets.map((o) => [o.domain ?? '', o]));
    domains.set('com.microsoft', { domain: 'com.microsoft', version: 1 });
    const model = onnx.ModelProto.encode({ irVersion: 8, producerName: 'lserve', opsetImport: [...domains.values()], graph }).finish();
    const session = await ort.InferenceSession.create(model, options);
    try {
      const io = bindPredictor(graphValues(session.inputMetadata), [{ name: 'logits', type: 'float32', shape: [1, groups - 1, vocab] }], { groups });
      const hiddenWidth = graphValues(session.inputMetadata).find((v) => v.name === io.hidden)?.shape[1];
      if (typeof hiddenWidth !== 'number') throw new Error("the code predictor's talker state has no fixed width");
      const front = new PredictorFront(session, io, hiddenWidth, groups);
      await front.readTables(vocab);
      return front;
    } catch (error) {
      await session.release();
      throw error;
    }
  }

  /** One run per code, every group at once: row g + 1 is code c's row in group g's table. */
  private async readTables(vocab: number): Promise<void> {
    const groups = this.codeValues.length;
    const zero = new Float32Array(this.hiddenWidth);
    for (let c = 0; c < vocab; c++) {
      this.codeValues.fill(BigInt(c));
      const all = await this.rows(zero);
      if (c === 0) {
        this.rowWidth = all.length / groups;
        for (let g = 1; g < groups; g++) this.tables.push(new Float32Array(vocab * this.rowWidth));
      }
      const width = this.rowWidth;
      for (let g = 1; g < groups; g++) this.tables[g - 1]!.set(all.subarray(g * width, (g + 1) * width), c * width);
    }
    this.codeValues.fill(0n);
  }

  /** All rows for the codes tensor's current values. */
  private async rows(hidden: Float32Array): Promise<Float32Array> {
    const feeds = { [this.io.hidden]: new ort.Tensor(this.io.types.hidden, toFloatType(hidden, this.io.types.hidden), [1, this.hiddenWidth]), [this.io.codes]: this.codes };
    const out = (await this.session.run(feeds))[ROWS]!;
    return readFloats(out.type, out.data);
  }

  /** Row 0 of a frame: the talker state as the predictor's transformer reads it. */
  async stateRow(hidden: Float32Array): Promise<Float32Array> {
    return (await this.rows(hidden)).slice(0, this.width);
  }

  release(): Promise<void> {
    return this.session.release();
  }
}
