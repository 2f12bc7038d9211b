import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import type { CodecDecoderConfig } from '../codec-config.js';
import { Emitter, float, int, ints, tensorInfo } from './emitter.js';
import type { Tensor } from './predictor-weights.js';

/**
 * The 12 Hz codec decoder (upstream's Qwen3TTSTokenizerV2Decoder) as an ONNX
 * graph, from its weights by module name: split residual VQ (1 semantic + 15
 * acoustic codebooks, each group's sum projected by a 1×1 convolution), a
 * causal k3 convolution over frames, a transformer with sliding-window
 * attention (RoPE at absolute frame positions, RMSNorm, LayerScale, SwiGLU),
 * two ×2 upsampling stages (transposed convolution, ConvNeXt block), then
 * decoder blocks of SnakeBeta, a transposed convolution trimmed on the right
 * and residual units with dilations 1, 3, 9, a last SnakeBeta and k7
 * convolution to one channel, clamped to [−1, 1].
 *
 * Every layer is causal, so the decoder streams exactly: the `streaming`
 * graph takes the next frames with the state the frames before left (each
 * causal convolution's last kernel − 1 inputs, each transposed convolution's
 * last input, each attention layer's keys and values of the last window − 1
 * frames) and gives their samples and the state after them. Decoding an
 * utterance in blocks of any size from the zero state gives the samples one
 * decode of the whole gives, and each frame is decoded once. The plain
 * graph (`streaming: false`) decodes as the export does: the test fixtures'
 * export is one.
 */

const { onnx } = onnxProto;
const DataType = onnx.TensorProto.DataType;

/** The decoder's config (speech tokenizer config.json) and its attention heads' width (q_proj's rows / heads). */
export type DecoderDims = CodecDecoderConfig & { headDim: number };

/** The weight of a module parameter (`pre_conv.conv.weight`), in PyTorch's layout; throws when missing. */
export type DecoderWeights = (param: string) => Tensor;

/** Names of the graphs' inputs and outputs. */
export const DECODER_IO = {
  codes: 'audio_codes',
  /** Frames decoded before this call (streaming): the first new frame's position. */
  position: 'position',
  audio: 'audio',
  state: (name: string) => `state.${name}`,
  nextState: (name: string) => `next_state.${name}`,
} as const;

export interface DecoderGraphOptions {
  streaming: boolean;
  /** The frame axis: a fixed length (as the export is traced) or open. */
  frames?: number;
  /** The output's name (the export's own, for the whole graph). */
  output?: string;
}

const SNAKE_EPSILON = 1e-9;
const CODEBOOK_EPSILON = 1e-5;
const CONVNEXT_EPSILON = 1e-6;
const RESIDUAL_DILATIONS = [1, 3, 9];

export function buildDecoderGraph(weight: DecoderWeights, dims: DecoderDims, options: DecoderGraphOptions): Uint8Array {
  const e = new Emitter('dec/');
  const { streaming } = options;
  const frames = options.frames ?? 'frames';
  const inputs: OnnxTypes.IValueInfoProto[] = [tensorInfo(DECODER_IO.codes, DataType.INT64, [1, frames, dims.quantizers])];
  const outputs: OnnxTypes.IValueInfoProto[] = [];
  if (streaming) inputs.push(tensorInfo(DECODER_IO.position, DataType.INT64, [1]));
  const w = (param: string) => e.float(weight(param));
  const shape = (param: string) => (weight(param).dims ?? []).map(Number);
  const axis = (i: number) => e.i64([i]);
  const END = 2 ** 62;

  /** A state carried between calls: its input, and the output it continues as. */
  const carry = (name: string, dimsOf: number[], next: string) => {
    inputs.push(tensorInfo(DECODER_IO.state(name), DataType.FLOAT, dimsOf));
    outputs.push(tensorInfo(DECODER_IO.nextState(name), DataType.FLOAT, dimsOf));
    e.nodes.push({ opType: 'Identity', input: [next], output: [DECODER_IO.nextState(name)], name: `dec/next_${name}` });
  };

  /** x [1, C, L] through a causal convolution (left padding (k − 1)·d); streaming, the padding is the carried last inputs. */
  const causalConv = (x: string, module: string, dilation = 1, groups = 1): string => {
    const [, perGroup, kernel] = shape(`${module}.weight`);
    const left = (kernel! - 1) * dilation;
    const attributes = [ints('kernel_shape', [kernel!]), ints('dilations', [dilation]), int('group', groups)];
    const conv = (input: string, pads: number[]) => e.op('Conv', [input, w(`${module}.weight`), w(`${module}.bias`)], [...attributes, ints('pads', pads)]);
    if (left === 0) return conv(x, [0, 0]);
    if (!streaming) return conv(x, [left, 0]);
    const name = module;
    const joined = e.op('Concat', [DECODER_IO.state(name), x], [int('axis', 2)]);
    carry(name, [1, perGroup! * groups, left], e.op('Slice', [joined, e.i64([-left]), e.i64([END]), axis(2)]));
    return conv(joined, [0, 0]);
  };

  /**
   * x [1, C, L] through a transposed convolution of stride s and kernel k
   * (k = s or 2s), trimmed on the right by k − s: output n·s + p reads
   * input n through tap p and, where k = 2s, input n − 1 through tap s + p,
   * which streaming carries. Where k = 2s it runs as what it is, a k2
   * convolution over the inputs with s × out channels, one per phase p,
   * interleaved after: ONNX Runtime's direct convolution does that in about
   * half the time of its transposed one, which scatters and trims.
   */
  const causalTransConv = (x: string, module: string, stride: number): string => {
    const [inChannels, outChannels, kernel] = shape(`${module}.weight`);
    const bias = e.op('Unsqueeze', [w(`${module}.bias`), axis(1)]); // [out, 1]
    if (kernel === stride) return e.op('ConvTranspose', [x, w(`${module}.weight`), w(`${module}.bias`)], [ints('kernel_shape', [kernel!]), ints('strides', [stride])]);
    if (kernel !== 2 * stride) throw new Error(`${module}: a transposed convolution of kernel ${kernel} and stride ${stride} is not one this decoder has`);
    // Taps [from, from + s) of W [in, out, 2s] as [s·out, in, 1]: row p·out + o is tap from + p of output channel o.
    const taps = (from: number) =>
      e.op('Reshape', [e.op('Transpose', [e.op('Slice', [w(`${module}.weight`), e.i64([from]), e.i64([from + stride]), axis(2)])], [ints('perm', [2, 1, 0])]), e.i64([stride * outChannels!, inChannels!, 1])]);
    const phases = e.op('Concat', [taps(stride), taps(0)], [int('axis', 2)]); // [s·out, in, 2]: input n − 1, then n
    let input = x;
    if (streaming) {
      input = e.op('Concat', [DECODER_IO.state(module), x], [int('axis', 2)]);
      carry(module, [1, inChannels!, 1], e.op('Slice', [input, e.i64([-1]), e.i64([END]), axis(2)]));
    }
    const y = e.op('Conv', [input, phases], [ints('kernel_shape', [2]), ints('pads', streaming ? [0, 0] : [1, 0])]); // [1, s·out, L]
    const interleaved = e.op('Transpose', [e.op('Reshape', [y, e.i64([1, stride, outChannels!, -1])])], [ints('perm', [0, 2, 3, 1])]); // [1, out, L, s]
    return e.op('Add', [e.op('Reshape', [interleaved, e.i64([1, outChannels!, -1])]), bias]);
  };

  /** x + sin²(x·e^α) / (e^β + ε), per channel of [1, C, L]. */
  const snake = (x: string, module: string): string => {
    const channel = (param: string) => e.op('Unsqueeze', [e.op('Exp', [w(`${module}.${param}`)]), axis(1)]); // [C, 1]
    const sine = e.op('Sin', [e.op('Mul', [x, channel('alpha')])]);
    const inverse = e.op('Reciprocal', [e.op('Add', [channel('beta'), e.f32([SNAKE_EPSILON], [])])]);
    return e.op('Add', [x, e.op('Mul', [e.op('Mul', [sine, sine]), inverse])]);
  };

  /** [.., in] · W[out, in]ᵀ + b. */
  const linear = (x: string, module: string, bias = true): string => {
    const y = e.op('MatMul', [x, e.op('Transpose', [w(`${module}.weight`)], [ints('perm', [1, 0])])]);
    return bias ? e.op('Add', [y, w(`${module}.bias`)]) : y;
  };
  /** A 1×1 convolution without bias as a linear layer on [1, L, C]: W [out, in, 1]. */
  const pointwise = (x: string, module: string): string => {
    const [out, inChannels] = shape(`${module}.weight`);
    return e.op('MatMul', [x, e.op('Transpose', [e.op('Reshape', [w(`${module}.weight`), e.i64([out!, inChannels!])])], [ints('perm', [1, 0])])]);
  };
  const toChannels = (x: string) => e.op('Transpose', [x], [ints('perm', [0, 2, 1])]);

  // Residual VQ: each group's codebook is embedding_sum / max(cluster_usage, ε); groups 1… are summed before their projection.
  const codebook = (module: string) => {
    const usage = e.op('Max', [w(`${module}._codebook.cluster_usage`), e.f32([CODEBOOK_EPSILON], [])]);
    return e.op('Div', [w(`${module}._codebook.embedding_sum`), e.op('Unsqueeze', [usage, axis(1)])]);
  };
  const vocab = shape('quantizer.rvq_first.vq.layers.0._codebook.embedding_sum')[0]!;
  const group = (g: number) => e.op('Squeeze', [e.op('Slice', [DECODER_IO.codes, e.i64([g]), e.i64([g + 1]), axis(2)]), axis(2)]); // [1, T]
  const semantic = e.op('Gather', [codebook('quantizer.rvq_first.vq.layers.0'), group(0)], [int('axis', 0)]);
  const acousticTables = Array.from({ length: dims.quantizers - 1 }, (_, g) => codebook(`quantizer.rvq_rest.vq.layers.${g}`));
  const offsets = e.i64(Array.from({ length: dims.quantizers - 1 }, (_, g) => g * vocab), [1, 1, dims.quantizers - 1]);
  const acousticCodes = e.op('Add', [e.op('Slice', [DECODER_IO.codes, e.i64([1]), e.i64([dims.quantizers]), axis(2)]), offsets]);
  const acoustic = e.op('ReduceSum', [e.op('Gather', [e.op('Concat', acousticTables, [int('axis', 0)]), acousticCodes], [int('axis', 0)]), axis(2)], [int('keepdims', 0)]);
  const quantized = e.op('Add', [pointwise(semantic, 'quantizer.rvq_first.output_proj'), pointwise(acoustic, 'quantizer.rvq_rest.output_proj')]); // [1, T, codebook_dim]

  let x = toChannels(causalConv(toChannels(quantized), 'pre_conv.conv')); // [1, T, latent]
  x = transformer(e, linear(x, 'pre_transformer.input_proj'), weight, dims, streaming, carry);
  let h = toChannels(linear(x, 'pre_transformer.output_proj')); // [1, latent, T]

  dims.upsamplingRatios.forEach((stride, i) => {
    h = causalTransConv(h, `upsample.${i}.0.conv`, stride);
    const block = `upsample.${i}.1`;
    const [channels] = shape(`${block}.dwconv.conv.weight`);
    let y = toChannels(causalConv(h, `${block}.dwconv.conv`, 1, channels!));
    y = e.op('LayerNormalization', [y, w(`${block}.norm.weight`), w(`${block}.norm.bias`)], [int('axis', -1), float('epsilon', CONVNEXT_EPSILON)]);
    y = linear(e.op('Gelu', [linear(y, `${block}.pwconv1`)], [], 'com.microsoft'), `${block}.pwconv2`);
    h = e.op('Add', [h, toChannels(e.op('Mul', [y, w(`${block}.gamma`)]))]);
  });

  h = causalConv(h, 'decoder.0.conv');
  dims.upsampleRates.forEach((stride, i) => {
    const block = `decoder.${i + 1}.block`;
    h = causalTransConv(snake(h, `${block}.0`), `${block}.1.conv`, stride);
    RESIDUAL_DILATIONS.forEach((dilation, j) => {
      const unit = `${block}.${j + 2}`;
      const y = causalConv(snake(causalConv(snake(h, `${unit}.act1`), `${unit}.conv1.conv`, dilation), `${unit}.act2`), `${unit}.conv2.conv`);
      h = e.op('Add', [h, y]);
    });
  });
  const last = dims.upsampleRates.length + 1;
  h = causalConv(snake(h, `decoder.${last}`), `decoder.${last + 1}.conv`);
  const output = options.output ?? DECODER_IO.audio;
  e.nodes.push({ opType: 'Clip', input: [h, e.f32([-1], []), e.f32([1], [])], output: [output], name: 'dec/clamp' });
  const samples = typeof frames === 'number' ? frames * product([...dims.upsampleRates, ...dims.upsamplingRatios]) : 'samples';
  outputs.unshift(tensorInfo(output, DataType.FLOAT, [1, 1, samples]));

  const graph: OnnxTypes.IGraphProto = { name: streaming ? 'tok_decoder_streaming' : 'tok_decoder', node: e.nodes, initializer: e.initializers, input: inputs, output: outputs };
  return onnx.ModelProto.encode({
    irVersion: 8,
    producerName: 'lserve',
    opsetImport: [
      { domain: '', version: 17 },
      { domain: 'com.microsoft', version: 1 },
    ],
    graph,
  }).finish();
}

const product = (values: number[]) => values.reduce((a, b) => a * b, 1);

/**
 * The pre-transformer's layers on x [1, T, hidden]: frame t sits at
 * position `position` + t; streaming, each layer's keys and values of the
 * window − 1 frames before are carried (zeros, masked, before the first).
 */
function transformer(e: Emitter, x: string, weight: DecoderWeights, dims: DecoderDims, streaming: boolean, carry: (name: string, dims: number[], next: string) => void): string {
  const { heads, kvHeads, headDim: hd, slidingWindow: window } = dims;
  const rep = heads / kvHeads;
  const w = (param: string) => e.float(weight(`pre_transformer.${param}`));
  const axis = (i: number) => e.i64([i]);
  const linear = (input: string, module: string) => e.op('MatMul', [input, e.op('Transpose', [w(`${module}.weight`)], [ints('perm', [1, 0])])]);
  const rmsNorm = (input: string, module: string) =>
    e.op('SimplifiedLayerNormalization', [input, w(`${module}.weight`)], [int('axis', -1), float('epsilon', dims.rmsEps), int('stash_type', 1)]);

  const count = e.op('Squeeze', [e.op('Shape', [x], [int('start', 1), int('end', 2)]), axis(0)]);
  const first = streaming ? e.op('Squeeze', [DECODER_IO.position, axis(0)]) : e.i64([0], []);
  const end = e.op('Add', [first, count]);
  const queries = e.op('Range', [first, end, e.i64([1], [])]);
  // Keys: the carried window − 1 frames, then this call's.
  const keys = streaming ? e.op('Range', [e.op('Sub', [first, e.i64([window - 1], [])]), end, e.i64([1], [])]) : queries;

  const half = hd / 2;
  const inverse = Float32Array.from({ length: half }, (_, i) => 1 / dims.ropeTheta ** ((2 * i) / hd));
  const freqs = e.op('Mul', [e.op('Unsqueeze', [e.op('Cast', [queries], [int('to', DataType.FLOAT)]), axis(1)]), e.f32(inverse, [1, half])]);
  const angles = e.op('Concat', [freqs, freqs], [int('axis', -1)]); // [T, hd]
  const cos = e.op('Cos', [angles]);
  const sin = e.op('Sin', [angles]);
  const rotate = (t: string) => {
    const x1 = e.op('Slice', [t, e.i64([0]), e.i64([half]), e.i64([-1])]);
    const x2 = e.op('Slice', [t, e.i64([half]), e.i64([hd]), e.i64([-1])]);
    return e.op('Add', [e.op('Mul', [t, cos]), e.op('Mul', [e.op('Concat', [e.op('Neg', [x2]), x1], [int('axis', -1)]), sin])]);
  };
  // Key k is visible to query q when q − window < k ≤ q and k is a frame (k ≥ 0): transformers' sliding-window causal mask.
  const q = e.op('Unsqueeze', [queries, axis(1)]);
  const k = e.op('Unsqueeze', [keys, axis(0)]);
  const hidden = e.op('Or', [e.op('Or', [e.op('Greater', [k, q]), e.op('LessOrEqual', [k, e.op('Sub', [q, e.i64([window], [])])])]), e.op('Less', [k, e.i64([0], [])])]);
  const mask = e.op('Where', [hidden, e.f32([-1e9], []), e.f32([0], [])]); // [T, keys]
  const scale = e.f32([1 / Math.sqrt(hd)], []);

  for (let i = 0; i < dims.layers; i++) {
    const layer = `layers.${i}`;
    const h = rmsNorm(x, `${layer}.input_layernorm`);
    // Query heads grouped by the key/value head they read: [1, kv, rep, T, hd].
    const query = rotate(e.op('Transpose', [e.op('Reshape', [linear(h, `${layer}.self_attn.q_proj`), e.i64([1, 0, kvHeads, rep, hd])])], [ints('perm', [0, 2, 3, 1, 4])]));
    const split = (t: string) => e.op('Transpose', [e.op('Reshape', [t, e.i64([1, 0, kvHeads, hd])])], [ints('perm', [0, 2, 1, 3])]); // [1, kv, T, hd]
    let key = rotate(split(linear(h, `${layer}.self_attn.k_proj`)));
    let value = split(linear(h, `${layer}.self_attn.v_proj`));
    if (streaming) {
      const kept = (part: string, all: string) => {
        carry(`${layer}.${part}`, [1, kvHeads, window - 1, hd], e.op('Slice', [all, e.i64([-(window - 1)]), e.i64([2 ** 62]), axis(2)]));
        return all;
      };
      key = kept('key', e.op('Concat', [DECODER_IO.state(`${layer}.key`), key], [int('axis', 2)]));
      value = kept('value', e.op('Concat', [DECODER_IO.state(`${layer}.value`), value], [int('axis', 2)]));
    }
    const keysT = e.op('Unsqueeze', [e.op('Transpose', [key], [ints('perm', [0, 1, 3, 2])]), axis(2)]); // [1, kv, 1, hd, K]
    const scores = e.op('Add', [e.op('Mul', [e.op('MatMul', [query, keysT]), scale]), mask]);
    const context = e.op('MatMul', [e.op('Softmax', [scores], [int('axis', -1)]), e.op('Unsqueeze', [value, axis(2)])]); // [1, kv, rep, T, hd]
    const merged = e.op('Reshape', [e.op('Transpose', [context], [ints('perm', [0, 3, 1, 2, 4])]), e.i64([1, 0, heads * hd])]);
    x = e.op('Add', [x, e.op('Mul', [linear(merged, `${layer}.self_attn.o_proj`), w(`${layer}.self_attn_layer_scale.scale`)])]);
    const m = rmsNorm(x, `${layer}.post_attention_layernorm`);
    const gate = linear(m, `${layer}.mlp.gate_proj`);
    const gated = e.op('Mul', [e.op('Mul', [gate, e.op('Sigmoid', [gate])]), linear(m, `${layer}.mlp.up_proj`)]);
    x = e.op('Add', [x, e.op('Mul', [linear(gated, `${layer}.mlp.down_proj`), w(`${layer}.mlp_layer_scale.scale`)])]);
  }
  return rmsNorm(x, 'norm');
}
