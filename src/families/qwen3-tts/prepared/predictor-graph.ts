import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { Emitter, int, ints, tensorInfo } from './emitter.js';
import type { Linear, PredictorWeights } from './predictor-weights.js';

/**
 * The KV-cached code predictor, built from the published graph's weights
 * (predictor-weights.ts). The published graph runs all 16 rows through every
 * layer and all 15 heads on each of its 15 calls a frame; this one takes the
 * rows [start, end) of the same input sequence (row 0 the talker state, row
 * r the embedding of code r − 1: the first call of a frame takes rows 0 and
 * 1, each later call one row), the keys and values of the rows before, and
 * scores only row end − 1 with the head of its group (head end − 2). Its
 * inputs are the published ones (talker state, the frame's codes so far)
 * plus `start`, `end` and the cache; the embedding front is the published
 * graph's own, so the rows are bit for bit what it computes. Layers are
 * Qwen3's (RMSNorm, q/k norms, RoPE over the row index, grouped-query
 * attention, SwiGLU); the head is chosen by an If chain, whose branches hold
 * one head each, since ONNX Runtime computes every output of a graph
 * whatever the caller fetches.
 */

const { onnx } = onnxProto;
const DataType = onnx.TensorProto.DataType;
const AttrType = onnx.AttributeProto.AttributeType;

export interface PredictorDims {
  heads: number;
  kvHeads: number;
  headDim: number;
  ropeTheta: number;
  eps: number;
}

/** Names of the cached graph's own inputs and outputs. */
export const CACHED_IO = {
  start: 'start',
  end: 'end',
  logits: 'logits',
  past: (layer: number, part: 'key' | 'value') => `past_${part}.${layer}`,
  present: (layer: number, part: 'key' | 'value') => `present_${part}.${layer}`,
} as const;

/**
 * The cached predictor's model. `accuracyLevel` overrides MatMulNBits'
 * accuracy_level (4: int8 activations); undefined keeps the export's.
 */
export function buildCachedPredictor(weights: PredictorWeights, dims: PredictorDims, opsets: OnnxTypes.IOperatorSetIdProto[], accuracyLevel?: number): Uint8Array {
  const e = new Emitter('kv/', accuracyLevel);
  const { heads, kvHeads, headDim: hd, eps } = dims;
  const rep = heads / kvHeads;
  for (const t of weights.front.initializers) e.constant(t);
  e.nodes.push(...weights.front.nodes);

  const axis1 = e.i64([1]);
  let x = e.op('Slice', [weights.front.output, CACHED_IO.start, CACHED_IO.end, axis1]); // [1, S, width]
  if (weights.projection) x = e.linear(x, weights.projection);

  // RoPE over the row index: cos and sin [S, hd] of rows [start, end).
  const half = hd / 2;
  const inverse = Float32Array.from({ length: half }, (_, i) => 1 / dims.ropeTheta ** ((2 * i) / hd));
  const start = e.op('Squeeze', [CACHED_IO.start]);
  const end = e.op('Squeeze', [CACHED_IO.end]);
  const rows = e.op('Cast', [e.op('Range', [start, end, e.i64([1], [])])], [int('to', DataType.FLOAT)]);
  const freqs = e.op('Mul', [e.op('Unsqueeze', [rows, axis1]), e.f32(inverse, [1, half])]); // [S, half]
  const angles = e.op('Concat', [freqs, freqs], [int('axis', -1)]);
  const cos = e.op('Cos', [angles]);
  const sin = e.op('Sin', [angles]);
  const rotate = (t: string) => {
    const x1 = e.op('Slice', [t, e.i64([0]), e.i64([half]), e.i64([-1])]);
    const x2 = e.op('Slice', [t, e.i64([half]), e.i64([hd]), e.i64([-1])]);
    const turned = e.op('Concat', [e.op('Neg', [x2]), x1], [int('axis', -1)]);
    return e.op('Add', [e.op('Mul', [t, cos]), e.op('Mul', [turned, sin])]);
  };
  // Causal mask [S, total]: row start + i sees keys 0 … start + i.
  const keys = e.op('Unsqueeze', [e.op('Range', [e.i64([0], []), end, e.i64([1], [])]), e.i64([0])]);
  const queries = e.op('Unsqueeze', [e.op('Range', [start, end, e.i64([1], [])]), axis1]);
  const mask = e.op('Where', [e.op('Greater', [keys, queries]), e.f32([-1e9], []), e.f32([0], [])]);
  const scale = e.f32([1 / Math.sqrt(hd)], []);

  const inputs = [...weights.inputs, tensorInfo(CACHED_IO.start, DataType.INT64, [1]), tensorInfo(CACHED_IO.end, DataType.INT64, [1])];
  const outputs: OnnxTypes.IValueInfoProto[] = [];
  weights.layers.forEach((layer, i) => {
    const past = { key: CACHED_IO.past(i, 'key'), value: CACHED_IO.past(i, 'value') };
    inputs.push(tensorInfo(past.key, DataType.FLOAT, [1, kvHeads, 'past', hd]), tensorInfo(past.value, DataType.FLOAT, [1, kvHeads, 'past', hd]));
    const h = e.rmsNorm(x, layer.inputNorm, eps);
    // Query heads grouped by the key/value head they read: [1, kv, rep, S, hd].
    const q = rotate(e.rmsNorm(e.op('Transpose', [e.op('Reshape', [e.linear(h, layer.q), e.i64([1, 0, kvHeads, rep, hd])])], [ints('perm', [0, 2, 3, 1, 4])]), layer.qNorm, eps));
    const splitKv = (t: string) => e.op('Transpose', [e.op('Reshape', [t, e.i64([1, 0, kvHeads, hd])])], [ints('perm', [0, 2, 1, 3])]); // [1, kv, S, hd]
    const k = e.op('Concat', [past.key, rotate(e.rmsNorm(splitKv(e.linear(h, layer.k)), layer.kNorm, eps))], [int('axis', 2)]);
    const v = e.op('Concat', [past.value, splitKv(e.linear(h, layer.v))], [int('axis', 2)]);
    e.nodes.push({ opType: 'Identity', input: [k], output: [CACHED_IO.present(i, 'key')], name: `kv/present_key.${i}` });
    e.nodes.push({ opType: 'Identity', input: [v], output: [CACHED_IO.present(i, 'value')], name: `kv/present_value.${i}` });
    outputs.push(tensorInfo(CACHED_IO.present(i, 'key'), DataType.FLOAT, [1, kvHeads, 'total', hd]), tensorInfo(CACHED_IO.present(i, 'value'), DataType.FLOAT, [1, kvHeads, 'total', hd]));
    const axis2 = e.i64([2]);
    const keysT = e.op('Unsqueeze', [e.op('Transpose', [k], [ints('perm', [0, 1, 3, 2])]), axis2]); // [1, kv, 1, hd, T]
    const scores = e.op('Add', [e.op('Mul', [e.op('MatMul', [q, keysT]), scale]), mask]); // [1, kv, rep, S, T]
    const context = e.op('MatMul', [e.op('Softmax', [scores], [int('axis', -1)]), e.op('Unsqueeze', [v, axis2])]); // [1, kv, rep, S, hd]
    const merged = e.op('Reshape', [e.op('Transpose', [context], [ints('perm', [0, 3, 1, 2, 4])]), e.i64([1, 0, heads * hd])]);
    x = e.op('Add', [x, e.linear(merged, layer.o)]);
    const m = e.rmsNorm(x, layer.postNorm, eps);
    const gate = e.linear(m, layer.gate);
    const gated = e.op('Mul', [e.op('Mul', [gate, e.op('Sigmoid', [gate])]), e.linear(m, layer.up)]);
    x = e.op('Add', [x, e.linear(gated, layer.down)]);
  });
  const last = e.op('Slice', [x, e.i64([-1]), e.i64([2 ** 62]), axis1]); // [1, 1, d]
  const hidden = e.rmsNorm(last, weights.norm, eps);
  const head = e.op('Sub', [CACHED_IO.end, e.i64([2])]);
  e.nodes.push(headChain(e, hidden, head, weights.heads, 0, CACHED_IO.logits));
  outputs.unshift(tensorInfo(CACHED_IO.logits, DataType.FLOAT, [1, 1, outputSize(weights.heads[0]!)]));

  const graph: OnnxTypes.IGraphProto = { name: 'code_predictor_cached', node: e.nodes, initializer: e.initializers, input: inputs, output: outputs };
  const domains = new Map(opsets.map((o) => [o.domain ?? '', o]));
  domains.set('com.microsoft', { domain: 'com.microsoft', version: 1 });
  return onnx.ModelProto.encode({ irVersion: 8, producerName: 'lserve', opsetImport: [...domains.values()], graph }).finish();
}

/** N of a linear layer: the weight's columns, or MatMulNBits' attribute. */
function outputSize(linear: Linear): number | string {
  if (linear.op === 'MatMul') return Number(linear.weight.dims?.at(-1) ?? 'vocab');
  const n = linear.attributes.find((a) => a.name === 'N');
  return n ? Number(n.i) : 'vocab';
}

/** If head == from then head `from` else (the chain from from + 1); the last head needs no test. */
function headChain(parent: Emitter, hidden: string, head: string, linears: Linear[], from: number, output: string): OnnxTypes.INodeProto {
  const branch = (name: string, build: (e: Emitter) => string): OnnxTypes.IGraphProto => {
    const e = new Emitter('kv/', parent.accuracyLevel);
    const out = build(e);
    return { name, node: e.nodes, initializer: e.initializers, output: [{ name: out, type: { tensorType: { elemType: DataType.FLOAT } } }] };
  };
  const then = branch(`head_${from}`, (e) => e.linear(hidden, linears[from]!));
  const otherwise = branch(`after_head_${from}`, (e) => {
    if (from + 1 === linears.length - 1) return e.linear(hidden, linears[from + 1]!);
    const out = `kv/heads_from_${from + 1}`;
    e.nodes.push(headChain(e, hidden, head, linears, from + 1, out));
    return out;
  });
  const test = parent.op('Equal', [head, parent.i64([from])]);
  const condition = parent.op('Squeeze', [test]);
  return {
    opType: 'If',
    input: [condition],
    output: [output],
    name: `kv/If_head_${from}`,
    attribute: [
      { name: 'then_branch', type: AttrType.GRAPH, g: then },
      { name: 'else_branch', type: AttrType.GRAPH, g: otherwise },
    ],
  };
}
