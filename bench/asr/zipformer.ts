import { existsSync } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { seededRandom } from '../../test/fixtures/gguf/format.js';
import { DataType, int64s, intAttr, model as encodeModel, node, onnx, valueInfo, type OnnxTypes } from '../../test/fixtures/onnx/build.js';
import {
  zipformerDecoder,
  zipformerEncoderMetadata,
  zipformerFiles,
  zipformerJoiner,
  zipformerStates,
  zipformerTokens,
  type ZipformerShape,
} from '../../test/fixtures/onnx/zipformer.js';

/**
 * A streaming Zipformer2 for the benchmark: the test fixture's interface
 * (test/fixtures/onnx/zipformer.ts: metadata, 6 states per layer in sherpa's
 * order, encoder_out steered so sound decodes to words and silence to blanks)
 * at the real dimensions of sherpa-onnx-streaming-zipformer-en-2023-06-26
 * (icefall `zipformer/export-onnx-streaming.py` with --num-encoder-layers
 * 2,2,3,4,3,2 --downsampling-factor 1,2,4,8,4,2 --feedforward-dim
 * 512,768,1024,1536,1024,768 --num-heads 4,4,4,8,4,4 --encoder-dim
 * 192,256,384,512,384,256 --query-head-dim 32 --value-head-dim 12
 * --cnn-module-kernel 31,31,15,15,15,31 --joiner-dim 512 --chunk-size 16
 * --left-context-frames 128), so every state tensor has the real size
 * (≈ 1.8 MB per stream), and with a compute proxy in place of the fixture's
 * pass-through encoder: the real model's work per 32-frame chunk, layer by
 * layer, in the same kinds of operators and precision as the int8 export
 * (MatMuls dynamically quantized: DynamicQuantizeLinear + MatMulInteger, as
 * onnxruntime's quantize_dynamic writes them; convolutions float):
 *
 *   front end   Conv2dSubsampling (conv 1→8, 8→32 stride 2, 32→128 stride
 *               (1,2)) and its ConvNeXt (depthwise 7×7 over the 3 cached
 *               frames of embed_states + 19 new, pointwise 128→384→128), then
 *               2432→192: 16 frames at 50 Hz.
 *   per layer   (stack s runs at 16 / downsampling frames per chunk)
 *               feed-forward d→3f→d (the three FF modules' hidden sizes
 *               ¾f + f + 5⁄4f together), attention weights (q, k: d→32·heads)
 *               over the cached keys + new (left + chunk frames), two
 *               self-attention value paths (d→12·heads, over cached_val1 /
 *               cached_val2, →d), non-linear attention (d→9d/4, weighted by
 *               head 0 over cached_nonlin_attn + new, 3d/4→d), two
 *               convolution modules (d→2d GLU, causal depthwise conv of
 *               (k+1)/2 over the cached k/2 frames + new, chunk depthwise conv
 *               of k, d→d), RMS norm. Every cached_* state is read and the
 *               last `left` frames written back, as the real layers do.
 *   stacks      down-sampled by reshaping r frames into one and projecting
 *               (r·192→d), up-sampled back (d→r·192) into the 192-wide
 *               residual stream.
 *   output      2 frames into 1 (384→512, the encoder_proj) added, scaled
 *               down, to the fixture's steering path (encoder_out dim 0 =
 *               sound indicator) so recognition behaves as with the fixture.
 *
 * ≈ 0.31 G multiply-adds per chunk (printed by the bench), close to the real
 * encoder's (counted from icefall's zipformer.py at these settings: ≈ 0.3 G);
 * not the real graph (no BiasNorm/Balancer/bypass details, no positional
 * encoding, merged FF modules), so a real model may differ by tens of per
 * cent. Decoder and joiner are the fixture's at joiner_dim 512 (the real ones
 * add two 512×512 projections per joiner call: < 1 % of a chunk).
 */

export const REAL_ZIPFORMER: ZipformerShape = {
  encoderDims: [192, 256, 384, 512, 384, 256],
  queryHeadDims: [32, 32, 32, 32, 32, 32],
  valueHeadDims: [12, 12, 12, 12, 12, 12],
  numHeads: [4, 4, 4, 8, 4, 4],
  numEncoderLayers: [2, 2, 3, 4, 3, 2],
  cnnModuleKernels: [31, 31, 15, 15, 15, 31],
  leftContextLen: [128, 64, 32, 16, 32, 64],
  T: 45,
  decodeChunkLen: 32,
  joinerDim: 512,
  contextSize: 2,
};

/** Per stack, not part of ZipformerShape (the export's metadata does not carry them). */
export const REAL_ZIPFORMER_EXTRA = { downsampling: [1, 2, 4, 8, 4, 2], feedforward: [512, 768, 1024, 1536, 1024, 768] };

const FEATURES = 80;
const EMBED = 192;
/** Frames at 50 Hz per chunk (after the 2× subsampling of decode_chunk_len = 32 feature frames). */
const FRAMES = 16;
const SOUND_THRESHOLD = 0;

class Graph {
  readonly nodes: OnnxTypes.INodeProto[] = [];
  readonly initializers: OnnxTypes.ITensorProto[] = [];
  /** Multiply-adds per chunk of one stream, counted as the graph is built. */
  macs = 0;
  private count = 0;
  private readonly random: () => number;
  private readonly constants = new Map<string, string>();

  constructor(seed: number) {
    this.random = seededRandom(seed);
  }

  op(type: string, inputs: string[], attributes: OnnxTypes.IAttributeProto[] = [], output?: string): string {
    const out = output ?? `${type.toLowerCase()}_${this.count++}`;
    this.nodes.push(node(type, inputs, [out], attributes, `${type}_${this.count++}`));
    return out;
  }

  ops(type: string, inputs: string[], outputs: number, attributes: OnnxTypes.IAttributeProto[] = []): string[] {
    const names = Array.from({ length: outputs }, (_, i) => `${type.toLowerCase()}_${this.count}_${i}`);
    this.nodes.push(node(type, inputs, names, attributes, `${type}_${this.count++}`));
    return names;
  }

  floats(dims: number[], scale: number, hint = 'w'): string {
    const n = dims.reduce((a, b) => a * b, 1);
    const values = new Float32Array(n);
    for (let i = 0; i < n; i++) values[i] = (this.random() * 2 - 1) * scale;
    const name = `${hint}_${this.count++}`;
    this.initializers.push({ name, dims, dataType: DataType.FLOAT, rawData: new Uint8Array(values.buffer) });
    return name;
  }

  tensor(dims: number[], values: Float32Array, hint = 'c'): string {
    const name = `${hint}_${this.count++}`;
    this.initializers.push({ name, dims, dataType: DataType.FLOAT, rawData: new Uint8Array(values.buffer, values.byteOffset, values.byteLength) });
    return name;
  }

  scalar(value: number): string {
    const key = `f${value}`;
    let name = this.constants.get(key);
    if (!name) {
      name = `scalar_${this.count++}`;
      this.initializers.push({ name, dims: [], dataType: DataType.FLOAT, floatData: [value] });
      this.constants.set(key, name);
    }
    return name;
  }

  ints(values: number[]): string {
    const key = `i${values.join(',')}`;
    let name = this.constants.get(key);
    if (!name) {
      name = `ints_${this.count++}`;
      this.initializers.push(int64s(name, [values.length], values));
      this.constants.set(key, name);
    }
    return name;
  }

  /** x [..., rows, inputs] · W (int8, dynamically quantized activations) + b; `rows` counts the multiply-adds. */
  linear(x: string, inputs: number, outputs: number, rows: number, options: { bias?: boolean; scale?: number; zeroColumn?: boolean } = {}): string {
    const weights = new Int8Array(inputs * outputs);
    for (let i = 0; i < weights.length; i++) weights[i] = Math.round((this.random() * 2 - 1) * 127);
    if (options.zeroColumn) for (let i = 0; i < inputs; i++) weights[i * outputs] = 0;
    const w = `wq_${this.count++}`;
    this.initializers.push({ name: w, dims: [inputs, outputs], dataType: DataType.INT8, rawData: new Uint8Array(weights.buffer) });
    // Uniform ints in ±127 have std ≈ 73: the weights' std is then scale / √inputs.
    const wScale = this.scalar(((options.scale ?? 1) / Math.sqrt(inputs)) / 73);
    const [q, qScale, qZero] = this.ops('DynamicQuantizeLinear', [x], 3);
    const product = this.op('MatMulInteger', [q!, w, qZero!]);
    const scale = this.op('Mul', [qScale!, wScale]);
    let y = this.op('Mul', [this.op('Cast', [product], [intAttr('to', DataType.FLOAT)]), scale]);
    if (options.bias !== false) y = this.op('Add', [y, this.floats([outputs], 0.02, 'b')]);
    this.macs += rows * inputs * outputs;
    return y;
  }

  /** Float MatMul (the front end's pointwise convolutions). */
  matmul(x: string, inputs: number, outputs: number, rows: number): string {
    this.macs += rows * inputs * outputs;
    return this.op('MatMul', [x, this.floats([inputs, outputs], 1 / Math.sqrt(inputs))]);
  }

  swish(x: string): string {
    return this.op('Mul', [x, this.op('Sigmoid', [x])]);
  }

  /** RMS norm over the last axis (zipformer's BiasNorm without its bias). */
  norm(x: string): string {
    const ms = this.op('ReduceMean', [this.op('Mul', [x, x])], [ints('axes', [-1]), intAttr('keepdims', 1)]);
    return this.op('Div', [x, this.op('Sqrt', [this.op('Add', [ms, this.scalar(1e-5)])])]);
  }

  slice(x: string, start: number, end: number, axis: number, output?: string): string {
    return this.op('Slice', [x, this.ints([start]), this.ints([end]), this.ints([axis])], [], output);
  }

  /** [N, T, h·c] → [N, h, T, c]. */
  heads(x: string, heads: number, dim: number): string {
    return this.op('Transpose', [this.op('Reshape', [x, this.ints([0, 0, heads, dim])])], [ints('perm', [0, 2, 1, 3])]);
  }

  /** [N, h, T, c] → [N, T, h·c]. */
  merge(x: string, heads: number, dim: number): string {
    return this.op('Reshape', [this.op('Transpose', [x], [ints('perm', [0, 2, 1, 3])]), this.ints([0, 0, heads * dim])]);
  }
}

const ints = (name: string, values: number[]): OnnxTypes.IAttributeProto => ({ name, type: onnx.AttributeProto.AttributeType.INTS, ints: values });
const BIG = 1 << 30;

/** One Zipformer2 layer's proxy on x [N, n, d]; reads and writes its six states. */
function layer(g: Graph, x: string, index: number, s: { d: number; f: number; heads: number; qd: number; vd: number; left: number; kernel: number; n: number }): string {
  const { d, f, heads, qd, vd, left, kernel, n } = s;
  const state = (kind: string) => `cached_${kind}_${index}`;
  const out = (kind: string) => `new_cached_${kind}_${index}`;
  const time = (t: string) => g.op('Transpose', [t], [ints('perm', [1, 0, 2])]); // [L, N, C] ↔ [N, L, C]
  // Feed-forward (the three modules' hidden sizes together).
  x = g.op('Add', [x, g.linear(g.swish(g.linear(x, d, 3 * f, n)), 3 * f, d, n, { scale: 0.5 })]);
  // Attention weights over the cached keys and the new ones.
  const q = g.heads(g.linear(x, d, qd * heads, n), heads, qd);
  const keys = g.op('Concat', [time(state('key')), g.linear(x, d, qd * heads, n, { bias: false })], [intAttr('axis', 1)]);
  g.op('Transpose', [g.slice(keys, -left, BIG, 1)], [ints('perm', [1, 0, 2])], out('key'));
  const scores = g.op('Mul', [g.op('MatMul', [q, g.op('Transpose', [g.heads(keys, heads, qd)], [ints('perm', [0, 1, 3, 2])])]), g.scalar(1 / Math.sqrt(qd))]);
  const probs = g.op('Softmax', [scores], [intAttr('axis', -1)]);
  g.macs += 2 * heads * n * (left + n) * qd; // scores, plus a second heads × n × (left + n) × vd per value path below
  const selfAttention = (which: 'val1' | 'val2') => {
    const values = g.op('Concat', [time(state(which)), g.linear(x, d, vd * heads, n)], [intAttr('axis', 1)]);
    g.op('Transpose', [g.slice(values, -left, BIG, 1)], [ints('perm', [1, 0, 2])], out(which));
    g.macs += heads * n * (left + n) * vd;
    const context = g.merge(g.op('MatMul', [probs, g.heads(values, heads, vd)]), heads, vd);
    return g.op('Add', [x, g.linear(context, vd * heads, d, n, { scale: 0.5 })]);
  };
  const convolution = (which: 'conv1' | 'conv2') => {
    const gated = g.linear(x, d, 2 * d, n);
    const glu = g.op('Mul', [g.slice(gated, 0, d, 2), g.op('Sigmoid', [g.slice(gated, d, 2 * d, 2)])]);
    const channels = g.op('Transpose', [glu], [ints('perm', [0, 2, 1])]); // [N, d, n]
    const half = Math.floor(kernel / 2);
    const all = g.op('Concat', [state(which), channels], [intAttr('axis', 2)]);
    g.slice(all, -half, BIG, 2, out(which));
    const causalKernel = (kernel + 1) / 2;
    const causal = g.op('Conv', [all, g.floats([d, 1, causalKernel], 1 / Math.sqrt(causalKernel))], [intAttr('group', d), ints('kernel_shape', [causalKernel])]);
    const chunk = g.op('Conv', [channels, g.floats([d, 1, kernel], 1 / Math.sqrt(kernel))], [intAttr('group', d), ints('kernel_shape', [kernel]), ints('pads', [half, half])]);
    g.macs += d * n * (causalKernel + kernel);
    const y = g.op('Transpose', [g.swish(g.op('Add', [causal, chunk]))], [ints('perm', [0, 2, 1])]);
    return g.op('Add', [x, g.linear(y, d, d, n, { scale: 0.5 })]);
  };
  x = selfAttention('val1');
  x = convolution('conv1');
  // Non-linear attention: values over cached_nonlin_attn + new, weighted by head 0.
  const nonlin = (3 * d) / 4;
  const hidden = g.linear(x, d, 3 * nonlin, n);
  const value = g.op('Mul', [g.slice(hidden, 0, nonlin, 2), g.op('Sigmoid', [g.slice(hidden, nonlin, 2 * nonlin, 2)])]);
  const gate = g.op('Tanh', [g.slice(hidden, 2 * nonlin, 3 * nonlin, 2)]);
  const cachedNonlin = g.op('Squeeze', [state('nonlin_attn'), g.ints([0])]); // [N, L, 3d/4]
  const nonlinAll = g.op('Concat', [cachedNonlin, value], [intAttr('axis', 1)]);
  g.op('Unsqueeze', [g.slice(nonlinAll, -left, BIG, 1), g.ints([0])], [], out('nonlin_attn'));
  const head0 = g.op('Squeeze', [g.slice(probs, 0, 1, 1), g.ints([1])]); // [N, n, L + n]
  g.macs += n * (left + n) * nonlin;
  const nonlinOut = g.op('Mul', [g.op('MatMul', [head0, nonlinAll]), gate]);
  x = g.op('Add', [x, g.linear(nonlinOut, nonlin, d, n, { scale: 0.5 })]);
  x = selfAttention('val2');
  x = convolution('conv2');
  return g.norm(x);
}

/** The encoder graph; `macs` is its multiply-adds per chunk of one stream. */
export function zipformerBenchEncoder(shape: ZipformerShape = REAL_ZIPFORMER, seed = 31): { bytes: Uint8Array; macs: number } {
  const g = new Graph(seed);
  const D = shape.joinerDim;
  const outFrames = shape.decodeChunkLen / 4;
  // --- the fixture's steering path (see test/fixtures/onnx/zipformer.ts): encoder_out dim 0 = sound indicator.
  const steer = seededRandom(seed + 1);
  const wSound = Float32Array.from({ length: D }, () => (steer() * 2 - 1) * 0.5);
  wSound[0] = 3;
  const wx = Float32Array.from({ length: FEATURES * D }, () => (steer() * 2 - 1) * 0.02);
  for (let f = 0; f < FEATURES; f++) wx[f * D] = 0;
  const frames = g.op('Slice', ['x', g.ints([0]), g.ints([shape.decodeChunkLen]), g.ints([1]), g.ints([4])]);
  const energy = g.op('ReduceMax', [frames], [ints('axes', [2]), intAttr('keepdims', 1)]);
  const sound = g.op('Tanh', [g.op('Mul', [g.op('Sub', [energy, g.scalar(SOUND_THRESHOLD)]), g.scalar(0.5)])]);
  const steering = g.op('Add', [g.op('MatMul', [sound, g.tensor([1, D], wSound)]), g.op('MatMul', [frames, g.tensor([FEATURES, D], wx)])]);

  // --- front end: Conv2dSubsampling + ConvNeXt over [N, 1, T, 80].
  const image = g.op('Unsqueeze', ['x', g.ints([1])]);
  const conv = (x: string, cin: number, cout: number, attributes: OnnxTypes.IAttributeProto[], outH: number, outW: number) => {
    g.macs += outH * outW * cout * cin * 9;
    return g.swish(g.op('Conv', [x, g.floats([cout, cin, 3, 3], 1 / Math.sqrt(cin * 9)), g.floats([cout], 0.02)], [ints('kernel_shape', [3, 3]), ...attributes]));
  };
  const t0 = shape.T - 2; // 43
  const c0 = conv(image, 1, 8, [ints('pads', [0, 1, 0, 1])], t0, FEATURES);
  const t1 = Math.floor((t0 - 3) / 2) + 1; // 21
  const w1 = Math.floor((FEATURES - 3) / 2) + 1; // 39
  const c1 = conv(c0, 8, 32, [ints('strides', [2, 2])], t1, w1);
  const t2 = t1 - 2; // 19
  const w2 = Math.floor((w1 - 3) / 2) + 1; // 19
  const c2 = conv(c1, 32, 128, [ints('strides', [1, 2])], t2, w2);
  const padded = g.op('Concat', ['embed_states', c2], [intAttr('axis', 2)]); // [N, 128, 3 + 19, 19]
  g.slice(padded, -3, BIG, 2, 'new_embed_states');
  const depthwise = g.op('Conv', [padded, g.floats([128, 1, 7, 7], 1 / 7)], [intAttr('group', 128), ints('kernel_shape', [7, 7]), ints('pads', [0, 3, 0, 3])]); // [N, 128, 16, 19]
  g.macs += FRAMES * w2 * 128 * 49;
  const pointIn = g.op('Transpose', [depthwise], [ints('perm', [0, 2, 3, 1])]); // [N, 16, 19, 128]
  const pointwise = g.matmul(g.swish(g.matmul(pointIn, 128, 384, FRAMES * w2)), 384, 128, FRAMES * w2);
  const residual = g.op('Transpose', [g.slice(c2, t2 - FRAMES, BIG, 2)], [ints('perm', [0, 2, 3, 1])]);
  const embedded = g.op('Reshape', [g.op('Add', [residual, pointwise]), g.ints([0, FRAMES, 128 * w2])]);
  let stream = g.norm(g.linear(embedded, 128 * w2, EMBED, FRAMES));

  // --- the stacks.
  let index = 0;
  shape.encoderDims.forEach((d, stack) => {
    const r = REAL_ZIPFORMER_EXTRA.downsampling[stack] ?? 1;
    const n = FRAMES / r;
    const s = {
      d,
      f: REAL_ZIPFORMER_EXTRA.feedforward[stack] ?? 4 * d,
      heads: shape.numHeads[stack]!,
      qd: shape.queryHeadDims[stack]!,
      vd: shape.valueHeadDims[stack]!,
      left: shape.leftContextLen[stack]!,
      kernel: shape.cnnModuleKernels[stack]!,
      n,
    };
    let x = r === 1 && d === EMBED ? stream : g.linear(g.op('Reshape', [stream, g.ints([0, n, r * EMBED])]), r * EMBED, d, n);
    for (let j = 0; j < shape.numEncoderLayers[stack]!; j++) x = layer(g, x, index++, s);
    if (r === 1 && d === EMBED) stream = x;
    else stream = g.norm(g.op('Add', [stream, g.op('Reshape', [g.linear(x, d, r * EMBED, n, { scale: 0.5 }), g.ints([0, FRAMES, EMBED])])]));
  });

  // --- output: 2 frames into 1, the encoder_proj, added small to the steering path (dim 0 left alone).
  const pairs = g.op('Reshape', [stream, g.ints([0, outFrames, (FRAMES / outFrames) * EMBED])]);
  const deep = g.linear(pairs, (FRAMES / outFrames) * EMBED, D, outFrames, { scale: 0.05, bias: false, zeroColumn: true });
  g.op('Add', [steering, deep], [], 'encoder_out');
  // processed_lens counts frames after the 2× embed subsampling, as the real model does.
  g.initializers.push(int64s('chunk_frames', [], [shape.decodeChunkLen / 2]));
  g.op('Add', ['processed_lens', 'chunk_frames'], [], 'new_processed_lens');

  const states = zipformerStates(shape);
  const bytes = encodeModel(
    {
      name: 'zipformer2_streaming_encoder_bench',
      input: [valueInfo('x', ['N', shape.T, FEATURES]), ...states.map((s) => valueInfo(s.name, s.dims, s.elemType))],
      output: [valueInfo('encoder_out', ['N', outFrames, D]), ...states.map((s) => valueInfo(`new_${s.name}`, s.dims, s.elemType))],
      initializer: g.initializers,
      node: g.nodes,
    },
    { opset: 17, metadata: { ...zipformerEncoderMetadata(shape), comment: 'streaming zipformer2, real dimensions, compute proxy (lserve bench, random weights)' } },
  );
  return { bytes, macs: g.macs };
}

/** Multiply-adds per chunk of the bench encoder (builds the graph once: ≈ 1 s). */
let cachedMacs: number | undefined;
export function zipformerBenchMacs(shape: ZipformerShape = REAL_ZIPFORMER): number {
  cachedMacs ??= zipformerBenchEncoder(shape).macs;
  return cachedMacs;
}

/** Writes encoder, decoder, joiner and tokens.txt under the catalog's file names, unless they are there. */
export async function writeBenchZipformer(dir: string, shape: ZipformerShape = REAL_ZIPFORMER): Promise<string> {
  const files = zipformerFiles();
  const complete = () => Object.values(files).every((name) => existsSync(path.join(dir, name)));
  if (complete()) return dir;
  const tmp = `${dir}.${process.pid}.tmp`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  const encoder = zipformerBenchEncoder(shape);
  cachedMacs = encoder.macs;
  await writeFile(path.join(tmp, files.encoder), encoder.bytes);
  await writeFile(path.join(tmp, files.decoder), zipformerDecoder(shape));
  await writeFile(path.join(tmp, files.joiner), zipformerJoiner(shape));
  await writeFile(path.join(tmp, files.tokens), zipformerTokens());
  await rm(dir, { recursive: true, force: true });
  await rename(tmp, dir);
  return dir;
}
