import { readFile } from 'node:fs/promises';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { halvesToFloats } from '../../runtimes/onnx/float16.js';

/**
 * TAESD's decoder (madebyollin/taesd, MIT) as an ONNX graph, built from its
 * published safetensors weights when the model loads (≈ 1.2M weights: a few
 * milliseconds). It decodes the UNet's latents as they are (no 1/0.18215)
 * into an image, here mapped to [-1, 1] like the SD VAE's output; in exchange
 * for fine detail it costs a fraction of the SD VAE decoder, which at
 * 512×512 costs about as much as a UNet step.
 *
 * Both weight layouts are read: diffusers' AutoencoderTiny
 * (diffusion_pytorch_model.safetensors, `decoder.layers.<i>.…`, layer 0 the
 * first conv) and the original (taesd_decoder.safetensors, `<i>.…`, layer 0
 * the tanh clamp). The network is one sequence: 3x3 convs (a ReLU after the
 * first), residual blocks (conv → ReLU → conv → ReLU → conv, + input, ReLU)
 * and parameterless 2x nearest upsamplings where a layer index has no weights.
 */

const { onnx } = onnxProto;
const FLOAT = onnx.TensorProto.DataType.FLOAT;
const Attr = onnx.AttributeProto.AttributeType;

interface SafeTensor {
  dtype: string;
  shape: number[];
  data: Float32Array;
}

/** Reads a safetensors file's float tensors (F32, F16 or BF16) as float32. */
export async function readSafetensors(file: string): Promise<Map<string, SafeTensor>> {
  const bytes = await readFile(file);
  if (bytes.length < 8) throw new Error(`${file}: not a safetensors file`);
  const headerLength = Number(bytes.readBigUInt64LE(0));
  if (headerLength <= 0 || 8 + headerLength > bytes.length) throw new Error(`${file}: not a safetensors file (header length ${headerLength})`);
  const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const base = 8 + headerLength;
  const tensors = new Map<string, SafeTensor>();
  for (const [name, info] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [start, end] = info.data_offsets;
    const raw = new Uint8Array(end - start);
    raw.set(bytes.subarray(base + start, base + end));
    let data: Float32Array;
    if (info.dtype === 'F32') data = new Float32Array(raw.buffer);
    else if (info.dtype === 'F16') data = halvesToFloats(new Uint16Array(raw.buffer));
    else if (info.dtype === 'BF16') data = Float32Array.from(new Uint16Array(raw.buffer), (v) => new Float32Array(new Uint32Array([v << 16]).buffer)[0]!);
    else continue;
    tensors.set(name, { dtype: info.dtype, shape: info.shape, data });
  }
  return tensors;
}

/** The decoder's layers by index, whichever layout the file has. */
function decoderLayers(tensors: Map<string, SafeTensor>): Map<string, SafeTensor> {
  const prefix = [...tensors.keys()].some((k) => k.startsWith('decoder.layers.')) ? 'decoder.layers.' : '';
  const layers = new Map<string, SafeTensor>();
  for (const [name, tensor] of tensors) {
    if (!name.startsWith(prefix) || !/^\d+\./.test(name.slice(prefix.length))) continue;
    layers.set(name.slice(prefix.length), tensor);
  }
  if (![...layers.keys()].some((k) => /^\d+\.conv\.0\.weight$/.test(k))) throw new Error('no TAESD decoder weights found (expected decoder.layers.<i>.conv.0.weight or <i>.conv.0.weight)');
  return layers;
}

/** Builds the decoder graph: latent_sample [batch, C, h, w] float32 → sample [batch, 3, 8h, 8w] in [-1, 1]. */
export function taesdDecoderGraph(tensors: Map<string, SafeTensor>): Uint8Array {
  const layers = decoderLayers(tensors);
  const nodes: OnnxTypes.INodeProto[] = [];
  const initializers: OnnxTypes.ITensorProto[] = [];
  let counter = 0;
  const op = (opType: string, inputs: string[], attribute: OnnxTypes.IAttributeProto[] = []) => {
    const output = `${opType.toLowerCase()}_${counter++}`;
    nodes.push({ opType, input: inputs, output: [output], attribute, name: output });
    return output;
  };
  const constant = (name: string, dims: number[], values: Float32Array) => {
    initializers.push({ name, dims, dataType: FLOAT, rawData: new Uint8Array(values.buffer, values.byteOffset, values.byteLength) });
    return name;
  };
  const conv = (x: string, key: string) => {
    const weight = layers.get(`${key}.weight`)!;
    const inputs = [x, constant(`${key}.weight`, weight.shape, weight.data)];
    const bias = layers.get(`${key}.bias`);
    if (bias) inputs.push(constant(`${key}.bias`, bias.shape, bias.data));
    const k = weight.shape[2]!;
    const pad = (k - 1) >> 1;
    return op('Conv', inputs, [{ name: 'kernel_shape', type: Attr.INTS, ints: [k, k] }, { name: 'pads', type: Attr.INTS, ints: [pad, pad, pad, pad] }]);
  };
  const indices = [...new Set([...layers.keys()].map((k) => Number(k.split('.')[0])))].sort((a, b) => a - b);
  const first = indices.find((i) => layers.has(`${i}.weight`));
  if (first === undefined) throw new Error('no TAESD decoder input conv found');
  const channels = layers.get(`${first}.weight`)!.shape[1]!;
  const three = constant('three', [1], new Float32Array([3]));
  // Latents are soft-clamped to (-3, 3), as the original's Clamp layer does.
  let x = op('Mul', [op('Tanh', [op('Div', ['latent_sample', three])]), three]);
  const last = indices[indices.length - 1]!;
  let seenConv = false;
  let relu = false;
  for (let i = indices[0]!; i <= last; i++) {
    if (layers.has(`${i}.weight`)) {
      x = conv(x, String(i));
      relu = !seenConv;
      seenConv = true;
      if (relu) x = op('Relu', [x]);
    } else if (layers.has(`${i}.conv.0.weight`)) {
      let y = op('Relu', [conv(x, `${i}.conv.0`)]);
      y = op('Relu', [conv(y, `${i}.conv.2`)]);
      y = conv(y, `${i}.conv.4`);
      const skip = layers.has(`${i}.skip.weight`) ? conv(x, `${i}.skip`) : x;
      x = op('Relu', [op('Add', [y, skip])]);
    } else if (seenConv && !relu) {
      const scales = constant(`scales_${i}`, [4], new Float32Array([1, 1, 2, 2]));
      x = op('Resize', [x, '', scales], [
        { name: 'mode', type: Attr.STRING, s: new TextEncoder().encode('nearest') },
        { name: 'coordinate_transformation_mode', type: Attr.STRING, s: new TextEncoder().encode('asymmetric') },
        { name: 'nearest_mode', type: Attr.STRING, s: new TextEncoder().encode('floor') },
      ]);
    }
    // The ReLU layer right after the first conv is already applied; a leading index without weights is the clamp.
    if (!layers.has(`${i}.weight`)) relu = false;
  }
  // TAESD paints [0, 1]; the pipeline takes [-1, 1] like the SD VAE's.
  const output = op('Sub', [op('Mul', [x, constant('two', [1], new Float32Array([2]))]), constant('one', [1], new Float32Array([1]))]);
  nodes.push({ opType: 'Identity', input: [output], output: ['sample'], name: 'output' });
  const io = (name: string, dims: Array<number | string>) => ({
    name,
    type: { tensorType: { elemType: FLOAT, shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) } } },
  });
  return onnx.ModelProto.encode({
    irVersion: 8,
    producerName: 'lserve',
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'taesd_decoder',
      node: nodes,
      initializer: initializers,
      input: [io('latent_sample', ['batch_size', channels, 'height_latent', 'width_latent'])],
      output: [io('sample', ['batch_size', 3, 'height', 'width'])],
    },
  }).finish();
}
