import { quantizeQ8_0, TensorType } from '../../../runtimes/llama/gguf-write.js';
import { toHalf } from '../../../runtimes/onnx/float16.js';
import { floatValues, UnpreparableGraph, type Linear, type Tensor } from '../prepared/predictor-weights.js';

/**
 * An ONNX export's weights in ggml's layouts, for the GGUF files the
 * talker and code predictor run from on llama.cpp. ONNX computes a linear
 * layer as x · W with W [K, N]; ggml stores it as N rows of K values
 * (ne = [K, N]). So:
 * - a 4-bit MatMulNBits layer (B [N, K/block, block/2], one scale per block,
 *   value = scale · (nibble − zero point), zero point 8 where the export
 *   gives none) is already N rows of blocks: each 32 values become a Q4_0
 *   block (d = scale, value = d · (q − 8)), or a Q4_1 block where the export
 *   has zero points (m = −zero point · scale). Only the scale's rounding to
 *   f16 changes a value; the nibbles are the export's.
 * - an fp32 MatMul weight is transposed and quantized to Q8_0, and so is a
 *   4-bit layer whose blocks are smaller than ggml's 32 (dequantized first).
 */

export interface GgufTensor {
  type: TensorType;
  /** ggml order: ne[0] first. */
  dims: number[];
  bytes: () => Uint8Array;
}

const attribute = (linear: Extract<Linear, { op: 'MatMulNBits' }>, name: string) => {
  const found = linear.attributes.find((a) => a.name === name);
  return found ? Number(found.i) : undefined;
};

/** K (inputs) and N (outputs) of a linear layer. */
export function linearShape(linear: Linear): { K: number; N: number } {
  if (linear.op === 'MatMul') {
    const [K, N] = (linear.weight.dims ?? []).map(Number);
    if (K === undefined || N === undefined || linear.weight.dims!.length !== 2) throw new UnpreparableGraph(`${linear.weight.name} is not a 2-D weight`);
    return { K, N };
  }
  const K = attribute(linear, 'K');
  const N = attribute(linear, 'N');
  if (!K || !N) throw new UnpreparableGraph('a MatMulNBits node without K and N');
  return { K, N };
}

function uint8s(t: Tensor | undefined, what: string): Uint8Array {
  if (!t || t.dataType !== 2 || !t.rawData?.length) throw new UnpreparableGraph(`the MatMulNBits ${what} is not inline uint8 data`);
  return t.rawData;
}

/** A norm's weight: F32. */
export function normTensor(t: Tensor): GgufTensor {
  const values = floatValues(t);
  return { type: TensorType.F32, dims: [values.length], bytes: () => new Uint8Array(values.buffer, values.byteOffset, values.byteLength) };
}

/** The type a linear layer converts to. */
export function linearType(linear: Linear): TensorType {
  if (linear.op === 'MatMul' || !wholeBlocks(linear)) return TensorType.Q8_0;
  return linear.inputs[2] ? TensorType.Q4_1 : TensorType.Q4_0;
}

/** Whether a 4-bit layer's blocks are whole ggml blocks (32 values with one scale); smaller ones go through Q8_0. */
const wholeBlocks = (linear: Extract<Linear, { op: 'MatMulNBits' }>) => (attribute(linear, 'block_size') ?? 0) % 32 === 0;

/** A linear layer as one ggml weight [K, N]. */
export function linearTensor(linear: Linear): GgufTensor {
  if (linear.bias) throw new UnpreparableGraph('a linear layer with a bias (Qwen3 has none)');
  const { K, N } = linearShape(linear);
  if (K % 32 !== 0) throw new UnpreparableGraph(`a linear layer of ${K} inputs (ggml's blocks take 32)`);
  return { type: linearType(linear), dims: [K, N], bytes: () => linearRows(linear, 0, N) };
}

/** Rows [from, to) of a linear layer's ggml weight (output channels), in its type. */
export function linearRows(linear: Linear, from: number, to: number): Uint8Array {
  const { K, N } = linearShape(linear);
  if (linear.op === 'MatMulNBits') return wholeBlocks(linear) ? repackNibbles(linear, K, from, to) : quantizeQ8_0(dequantizeRows(linear, K, from, to));
  const w = floatValues(linear.weight);
  const rows = new Float32Array((to - from) * K);
  for (let k = 0; k < K; k++) {
    const row = k * N;
    for (let n = from; n < to; n++) rows[(n - from) * K + k] = w[row + n]!;
  }
  return quantizeQ8_0(rows);
}

interface Nibbles {
  B: Uint8Array;
  scales: Float32Array;
  zeros?: Uint8Array;
  block: number;
  blocks: number;
}

function nibbles(linear: Extract<Linear, { op: 'MatMulNBits' }>, K: number): Nibbles {
  const bits = attribute(linear, 'bits') ?? 4;
  const block = attribute(linear, 'block_size');
  if (bits !== 4 || !block) throw new UnpreparableGraph(`MatMulNBits with ${bits} bits in blocks of ${block} (4 bits convert)`);
  const [packed, scaleTensor, zeroTensor] = linear.inputs;
  if (!scaleTensor) throw new UnpreparableGraph('a MatMulNBits node without scales');
  return { B: uint8s(packed, 'weight'), scales: floatValues(scaleTensor), zeros: zeroTensor ? uint8s(zeroTensor, 'zero points') : undefined, block, blocks: Math.ceil(K / block) };
}

/** Block b of row n: its scale and zero point. */
function blockScale(w: Nibbles, n: number, b: number): { scale: number; zero: number } {
  const scale = w.scales[n * w.blocks + b]!;
  if (!w.zeros) return { scale, zero: 8 };
  const byte = w.zeros[n * Math.ceil(w.blocks / 2) + (b >> 1)]!;
  return { scale, zero: b & 1 ? byte >> 4 : byte & 0x0f };
}

/** Rows [from, to) as float32 [to − from, K]. */
function dequantizeRows(linear: Extract<Linear, { op: 'MatMulNBits' }>, K: number, from: number, to: number): Float32Array {
  const w = nibbles(linear, K);
  const out = new Float32Array((to - from) * K);
  for (let n = from; n < to; n++) {
    for (let b = 0; b < w.blocks; b++) {
      const { scale, zero } = blockScale(w, n, b);
      const base = (n * w.blocks + b) * (w.block / 2);
      for (let i = 0; i < w.block && b * w.block + i < K; i++) out[(n - from) * K + b * w.block + i] = scale * (nibble(w.B, base, i) - zero);
    }
  }
  return out;
}

function repackNibbles(linear: Extract<Linear, { op: 'MatMulNBits' }>, K: number, from: number, to: number): Uint8Array {
  const w = nibbles(linear, K);
  const size = w.zeros ? 20 : 18;
  const out = new Uint8Array(((to - from) * K * size) / 32);
  const view = new DataView(out.buffer);
  let at = 0;
  for (let n = from; n < to; n++) {
    for (let k0 = 0; k0 < K; k0 += 32) {
      const b = Math.floor(k0 / w.block);
      const { scale, zero } = blockScale(w, n, b);
      view.setUint16(at, toHalf(scale), true);
      if (w.zeros) view.setUint16(at + 2, toHalf(-zero * scale), true);
      const qs = at + size - 16;
      // The export packs values 2i, 2i+1 in byte i; ggml packs j and j + 16 in byte j.
      const base = (n * w.blocks + b) * (w.block / 2) + (k0 - b * w.block) / 2;
      for (let j = 0; j < 16; j++) out[qs + j] = nibble(w.B, base, j) | (nibble(w.B, base, j + 16) << 4);
      at += size;
    }
  }
  return out;
}

const nibble = (B: Uint8Array, base: number, i: number) => {
  const byte = B[base + (i >> 1)]!;
  return i & 1 ? byte >> 4 : byte & 0x0f;
};

/** Values the decoder's inputs never read (it is fed embeddings): a table of zeros of the quantized type. */
export function zeroTable(width: number, rows: number): GgufTensor {
  return { type: TensorType.Q4_0, dims: [width, rows], bytes: () => new Uint8Array(((width * rows) / 32) * 18) };
}
