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
 * by running the front over every code (a few hundred ms), and that session
 * goes; a frame asks a second one for its row 0: the front with the codes
 * a constant, which ONNX Runtime folds, so it holds none of the tables
 * (the process ≈ 170 MB smaller at 0.6B).
 */

const { onnx } = onnxProto;
const ROWS = 'predictor_rows';

export class PredictorFront {
  private constructor(
    /** The front with constant codes: the talker state in, every row out. */
    private readonly session: ort.InferenceSession,
    private readonly io: PredictorBinding,
    private readonly hiddenWidth: number,
    /** Per group 1 … groups − 1's input (codes of group g − 1): [vocab, width] rows. */
    readonly tables: Float32Array[],
    /** Floats in a row. */
    readonly width: number,
  ) {}

  static async open(weights: PredictorWeights, opsets: OnnxTypes.IOperatorSetIdProto[], groups: number, vocab: number, options: ort.InferenceSession.SessionOptions): Promise<PredictorFront> {
    const domains = new Map(opsets.map((o) => [o.domain ?? '', o]));
    domains.set('com.microsoft', { domain: 'com.microsoft', version: 1 });
    /** The front as a session; `constantCodes` names the codes input to make a constant zero (it is then no input). */
    const session = (constantCodes?: string) => {
      const e = new Emitter('front/');
      for (const t of weights.front.initializers) e.constant(t);
      if (constantCodes) e.constant({ name: constantCodes, dataType: onnx.TensorProto.DataType.INT64, dims: [1, groups], rawData: new Uint8Array(8 * groups) });
      e.nodes.push(...weights.front.nodes);
      const rows = weights.projection ? e.linear(weights.front.output, weights.projection) : weights.front.output;
      e.nodes.push({ opType: 'Identity', input: [rows], output: [ROWS], name: 'front/rows' });
      const input = weights.inputs.filter((i) => i.name !== constantCodes);
      const graph: OnnxTypes.IGraphProto = { name: 'code_predictor_front', node: e.nodes, initializer: e.initializers, input, output: [tensorInfo(ROWS, onnx.TensorProto.DataType.FLOAT, [1, groups, 'width'])] };
      return ort.InferenceSession.create(onnx.ModelProto.encode({ irVersion: 8, producerName: 'lserve', opsetImport: [...domains.values()], graph }).finish(), options);
    };
    const reader = await session();
    let io: PredictorBinding;
    let hiddenWidth: number;
    let tables: Float32Array[];
    try {
      io = bindPredictor(graphValues(reader.inputMetadata), [{ name: 'logits', type: 'float32', shape: [1, groups - 1, vocab] }], { groups });
      const found = graphValues(reader.inputMetadata).find((v) => v.name === io.hidden)?.shape[1];
      if (typeof found !== 'number') throw new Error("the code predictor's talker state has no fixed width");
      hiddenWidth = found;
      tables = await readTables(reader, io, hiddenWidth, groups, vocab);
    } finally {
      await reader.release();
    }
    const rows = await session(io.codes);
    return new PredictorFront(rows, io, hiddenWidth, tables, tables[0]!.length / vocab);
  }

  /** Row 0 of a frame: the talker state as the predictor's transformer reads it. */
  async stateRow(hidden: Float32Array): Promise<Float32Array> {
    const feeds = { [this.io.hidden]: new ort.Tensor(this.io.types.hidden, toFloatType(hidden, this.io.types.hidden), [1, this.hiddenWidth]) };
    const out = (await this.session.run(feeds))[ROWS]!;
    return readFloats(out.type, out.data).slice(0, this.width);
  }

  release(): Promise<void> {
    return this.session.release();
  }
}

/** One run per code, every group at once: row g + 1 is code c's row in group g's table. */
async function readTables(session: ort.InferenceSession, io: PredictorBinding, hiddenWidth: number, groups: number, vocab: number): Promise<Float32Array[]> {
  const codes = new BigInt64Array(groups);
  const feeds = { [io.hidden]: new ort.Tensor(io.types.hidden, toFloatType(new Float32Array(hiddenWidth), io.types.hidden), [1, hiddenWidth]), [io.codes]: new ort.Tensor('int64', codes, [1, groups]) };
  const tables: Float32Array[] = [];
  for (let c = 0; c < vocab; c++) {
    codes.fill(BigInt(c));
    const out = (await session.run(feeds))[ROWS]!;
    const all = readFloats(out.type, out.data);
    const width = all.length / groups;
    if (c === 0) for (let g = 1; g < groups; g++) tables.push(new Float32Array(vocab * width));
    for (let g = 1; g < groups; g++) tables[g - 1]!.set(all.subarray(g * width, (g + 1) * width), c * width);
  }
  return tables;
}
