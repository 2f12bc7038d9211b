import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbedDecoder } from '../../src/runtimes/llama/embed-decoder.js';
import { TensorType, ValueType, writeGgufFile, type Metadata, type MetadataValue, type TensorSpec } from '../../src/runtimes/llama/gguf-write.js';
import { getRuntime, setLlamaAddonHome } from '../../src/runtimes/llama/runtime.js';
import { fromHalf, toHalf } from '../../src/runtimes/onnx/float16.js';
import { NO_ADDON, threadpoolAddonHome } from '../helpers/llama-addon.js';

/**
 * llama.cpp's product of repacked Q4_0 weights with a few rows (lserve's
 * AVX-512 VNNI variants carry a kernel of their own for it:
 * scripts/llama/ggml-cpu.patch), against an exact reference. The model is a
 * Qwen3 GGUF whose one layer is all zeros, so its hidden state is the
 * input's RMS norm and its logits are output.weight (Q4_0, random) times
 * that state quantized to Q8_0 as ggml quantizes it, summed in double here.
 * 1 and 3 rows take the single-row kernel (GEMV); 4 rows take llama.cpp's
 * GEMM, the same reference.
 */

const home = threadpoolAddonHome();
const WIDTH = 512;
const VOCAB = 96;
const FF = 1024;
const HEAD = 64;

/** Q4_0 blocks: per 32 values an f16 scale and 16 bytes, value j low nibble of byte j, j + 16 the high. */
interface Q4Matrix {
  bytes: Uint8Array;
  value(row: number, k: number): number;
  scale(row: number, block: number): number;
}

function q4Matrix(rows: number, width: number, random: () => number): Q4Matrix {
  const blocks = width / 32;
  const bytes = new Uint8Array(rows * blocks * 18);
  const view = new DataView(bytes.buffer);
  for (let b = 0; b < rows * blocks; b++) {
    view.setUint16(b * 18, toHalf(0.01 + 0.04 * random()), true);
    for (let j = 0; j < 16; j++) bytes[b * 18 + 2 + j] = Math.floor(random() * 256);
  }
  return {
    bytes,
    value: (row, k) => {
      const byte = bytes[(row * blocks + Math.floor(k / 32)) * 18 + 2 + (k % 16)]!;
      return (k % 32 < 16 ? byte & 15 : byte >> 4) - 8;
    },
    scale: (row, block) => fromHalf(view.getUint16((row * blocks + block) * 18, true)),
  };
}

/** ggml's quantize_row_q8_0 (its AVX form): d = max|x| / 127 kept as f16, q = x · (127 / max|x|) rounded to even. */
function q8Row(x: Float32Array): { q: Int8Array; d: Float64Array } {
  const q = new Int8Array(x.length);
  const d = new Float64Array(x.length / 32);
  for (let b = 0; b < d.length; b++) {
    let max = 0;
    for (let j = 0; j < 32; j++) max = Math.max(max, Math.abs(x[b * 32 + j]!));
    d[b] = fromHalf(toHalf(Math.fround(max / 127)));
    const id = max ? Math.fround(127 / max) : 0;
    for (let j = 0; j < 32; j++) {
      const v = Math.fround(x[b * 32 + j]! * id);
      const r = Math.round(v);
      q[b * 32 + j] = r - v === 0.5 && r % 2 !== 0 ? r - 1 : r;
    }
  }
  return { q, d };
}

function reference(w: Q4Matrix, hidden: Float32Array): Float64Array {
  const { q, d } = q8Row(hidden);
  const out = new Float64Array(VOCAB);
  for (let n = 0; n < VOCAB; n++) {
    for (let b = 0; b < WIDTH / 32; b++) {
      let dot = 0;
      for (let j = 0; j < 32; j++) dot += w.value(n, b * 32 + j) * q[b * 32 + j]!;
      out[n]! += w.scale(n, b) * d[b]! * dot;
    }
  }
  return out;
}

async function writeModel(file: string, output: Q4Matrix): Promise<void> {
  type Tensor = TensorSpec & { data: Uint8Array };
  const zeros = (name: string, input: number, rows: number): Tensor => ({ name, dims: [input, rows], type: TensorType.Q4_0, data: new Uint8Array((input / 32) * rows * 18) });
  const ones = (name: string, n: number): Tensor => ({ name, dims: [n], type: TensorType.F32, data: new Uint8Array(new Float32Array(n).fill(1).buffer) });
  const tensors: Tensor[] = [
    zeros('token_embd.weight', WIDTH, VOCAB),
    ones('output_norm.weight', WIDTH),
    { name: 'output.weight', dims: [WIDTH, VOCAB], type: TensorType.Q4_0, data: output.bytes },
    ones('blk.0.attn_norm.weight', WIDTH),
    zeros('blk.0.attn_q.weight', WIDTH, 4 * HEAD),
    zeros('blk.0.attn_k.weight', WIDTH, 2 * HEAD),
    zeros('blk.0.attn_v.weight', WIDTH, 2 * HEAD),
    zeros('blk.0.attn_output.weight', 4 * HEAD, WIDTH),
    ones('blk.0.attn_q_norm.weight', HEAD),
    ones('blk.0.attn_k_norm.weight', HEAD),
    ones('blk.0.ffn_norm.weight', WIDTH),
    zeros('blk.0.ffn_gate.weight', WIDTH, FF),
    zeros('blk.0.ffn_up.weight', WIDTH, FF),
    zeros('blk.0.ffn_down.weight', FF, WIDTH),
  ];
  const u32 = (value: number) => ({ type: ValueType.UINT32, value }) as const;
  const metadata: Metadata = new Map<string, MetadataValue>([
    ['general.architecture', { type: ValueType.STRING, value: 'qwen3' }],
    ['qwen3.block_count', u32(1)],
    ['qwen3.context_length', u32(64)],
    ['qwen3.embedding_length', u32(WIDTH)],
    ['qwen3.feed_forward_length', u32(FF)],
    ['qwen3.attention.head_count', u32(4)],
    ['qwen3.attention.head_count_kv', u32(2)],
    ['qwen3.attention.key_length', u32(HEAD)],
    ['qwen3.attention.value_length', u32(HEAD)],
    ['qwen3.attention.layer_norm_rms_epsilon', { type: ValueType.FLOAT32, value: 1e-6 }],
    ['qwen3.rope.freq_base', { type: ValueType.FLOAT32, value: 1e6 }],
    ['qwen3.vocab_size', u32(VOCAB)],
    ['tokenizer.ggml.model', { type: ValueType.STRING, value: 'none' }],
  ]);
  const data = new Map(tensors.map((t) => [t.name, t.data]));
  await writeGgufFile(file, metadata, tensors, (spec) => data.get(spec.name)!);
}

describe.skipIf(!home)(`repacked Q4_0 weights times a few rows${home ? '' : NO_ADDON}`, () => {
  let dir: string;
  let output: Q4Matrix;
  let decoder: EmbedDecoder;
  const saved = process.env.LSERVE_LLAMA_BUILD;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-q4-gemv-'));
    process.env.LSERVE_LLAMA_BUILD = 'threadpool'; // vitest.config.ts pins the prebuilt binary: this suite is about lserve's variants
    setLlamaAddonHome(home === 'scratch' ? dir : home!);
    let seed = 7;
    const random = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    output = q4Matrix(VOCAB, WIDTH, random);
    const file = path.join(dir, 'q4.gguf');
    await writeModel(file, output);
    const opened = await EmbedDecoder.open(await getRuntime(), file, { contextSize: 64, threads: 2 });
    expect(opened, 'the threadpool addon has no LserveEmbedModel').toBeDefined();
    decoder = opened!;
  }, 120_000);

  afterAll(async () => {
    await decoder?.dispose();
    process.env.LSERVE_LLAMA_BUILD = saved;
    await rm(dir, { recursive: true, force: true });
  });

  it.each([1, 3, 4])('gives output.weight × the Q8_0 hidden state for the last of %i rows', async (count) => {
    const rows = Float32Array.from({ length: count * WIDTH }, (_, i) => Math.sin(i * 0.731 + count) * (1 + (i % 7)));
    await decoder.truncate(0);
    const { hidden, logits } = await decoder.decode(rows, count, 0);
    // The zero layer leaves the input: the hidden state is its RMS norm.
    const last = rows.subarray((count - 1) * WIDTH);
    const rms = Math.sqrt(last.reduce((s, v) => s + v * v, 0) / WIDTH + 1e-6);
    expect(Math.max(...hidden.map((h, i) => Math.abs(h - last[i]! / rms)))).toBeLessThan(1e-5);
    const expected = reference(output, hidden);
    const scale = Math.max(...expected.map(Math.abs));
    expect(scale).toBeGreaterThan(0.1);
    // Float sums in another order (≈ 3e-7 of the largest logit on Zen 5); a misplaced nibble or scale gives order 1.
    expect(Math.max(...logits.map((l, n) => Math.abs(l - expected[n]!))) / scale).toBeLessThan(1e-5);
  });
});
