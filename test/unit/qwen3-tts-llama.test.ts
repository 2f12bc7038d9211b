import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import onnxProto from 'onnx-proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseTtsConfig, type ModelConfigJson } from '../../src/families/qwen3-tts/config.js';
import { FrameGenerator, type GenerateRequest } from '../../src/families/qwen3-tts/generator.js';
import { convertTalker } from '../../src/families/qwen3-tts/llama/convert.js';
import { linearRows, linearShape, linearType } from '../../src/families/qwen3-tts/llama/gguf-tensors.js';
import { LLAMA_TOLERANCE, prepareLlamaDecoders } from '../../src/families/qwen3-tts/llama/prepare-llama.js';
import { PREPARED_PLAN, type GraphPlan } from '../../src/families/qwen3-tts/prepared/open-prepared.js';
import { preparedFiles, PREPARED_ROLES, writePreparedGraphs } from '../../src/families/qwen3-tts/prepared/prepare.js';
import { floatValues, graphWeights, type Linear } from '../../src/families/qwen3-tts/prepared/predictor-weights.js';
import { setLlamaAddonHome } from '../../src/runtimes/llama/runtime.js';
import { fromHalf } from '../../src/runtimes/onnx/float16.js';
import { readGguf, TensorType, ValueType } from '../fixtures/gguf/format.js';
import { qwen3TtsFiles, TINY_QWEN3_TTS, tinyPlainQwen3TtsModel, writeQwen3TtsModel, type Qwen3TtsShape } from '../fixtures/onnx/qwen3-tts.js';
import { NO_ADDON, threadpoolAddonHome } from '../helpers/llama-addon.js';

/**
 * Qwen3-TTS's talker and code predictor converted to GGUF (families/
 * qwen3-tts/llama/) and run by llama.cpp through lserve's embedding decoder,
 * on the suite's synthetic exports with a plain Qwen3 talker (no frame
 * counter: the llama.cpp model is the real architecture, so the counter's
 * extra wiring is exactly what its probe must refuse). The layout is checked
 * value by value; the probe, the generator's choice and the codes against
 * the ONNX path need the threadpool addon.
 */

const cache = (name: string) => fileURLToPath(new URL(`../.cache/${name}`, import.meta.url));
const PLAIN: Qwen3TtsShape = { ...TINY_QWEN3_TTS, frameCounter: false };
const EXACT: GraphPlan = { predictor: 'cached', int8: false };
const REQUEST: GenerateRequest = { text: 'Hello world. How are you today, my friend?', speaker: 'ryan', language: 'english', seed: 1, maxFrames: 12 };

const dirs = {} as Record<'fp32' | 'int4' | 'counter', string>;
let scratch: string;

beforeAll(async () => {
  dirs.fp32 = await writeQwen3TtsModel(cache('qwen3-tts-customvoice-plain'), 'customvoice', PLAIN);
  dirs.int4 = await tinyPlainQwen3TtsModel();
  dirs.counter = await writeQwen3TtsModel(cache('qwen3-tts-customvoice-int4-32'), 'customvoice', { ...TINY_QWEN3_TTS, int4: { blockSize: 32 } });
  scratch = await mkdtemp(path.join(os.tmpdir(), 'lserve-qwen3-llama-'));
}, 120_000);

afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

const file = (dir: string, role: string) => path.join(dir, qwen3TtsFiles('customvoice')[role]!);
const files = (dir: string) => Object.fromEntries(Object.keys(qwen3TtsFiles('customvoice')).map((role) => [role, file(dir, role)]));
const decode = async (dir: string, role: string) => onnxProto.onnx.ModelProto.decode(await readFile(file(dir, role)));
const config = async (dir: string) => parseTtsConfig(JSON.parse(await readFile(file(dir, 'config'), 'utf8')) as ModelConfigJson, { do_sample: false, subtalker_dosample: false });

/** A GGUF tensor's bytes (the data section follows the header at 32-byte alignment and ends with the file). */
function tensorData(gguf: string, name: string): { type: TensorType; dims: number[]; bytes: Uint8Array } {
  const { tensors } = readGguf(gguf);
  const size = (t: { type: TensorType; dims: number[] }) => {
    const n = t.dims.reduce((a, b) => a * b, 1);
    return t.type === TensorType.F32 ? 4 * n : t.type === TensorType.Q4_0 ? (n / 32) * 18 : (n / 32) * 34;
  };
  const end = Math.max(...tensors.map((t) => Number(t.offset) + size(t) + ((32 - (size(t) % 32)) % 32)));
  const start = statSync(gguf).size - end;
  const tensor = tensors.find((t) => t.name === name)!;
  const bytes = new Uint8Array(size(tensor));
  const fd = openSync(gguf, 'r');
  try {
    readSync(fd, bytes, 0, bytes.length, start + Number(tensor.offset));
  } finally {
    closeSync(fd);
  }
  return { type: tensor.type, dims: tensor.dims, bytes };
}

/** Row-major [N, K] values of a Q4_0 or Q8_0 tensor. */
function dequantize(t: { type: TensorType; bytes: Uint8Array }): Float32Array {
  const view = new DataView(t.bytes.buffer, t.bytes.byteOffset);
  const block = t.type === TensorType.Q4_0 ? 18 : 34;
  const out = new Float32Array((t.bytes.length / block) * 32);
  for (let b = 0; b < out.length / 32; b++) {
    const d = fromHalf(view.getUint16(b * block, true));
    for (let j = 0; j < 32; j++) {
      const q = t.type === TensorType.Q4_0 ? (j < 16 ? t.bytes[b * block + 2 + j]! & 0x0f : t.bytes[b * block + 2 + j - 16]! >> 4) - 8 : view.getInt8(b * block + 2 + j);
      out[b * 32 + j] = d * q;
    }
  }
  return out;
}

/** A linear layer's weight as [N, K] (the export's MatMul reads [K, N]; 4-bit ones dequantized as ONNX Runtime does). */
function exportWeight(linear: Linear): Float32Array {
  const { K, N } = linearShape(linear);
  const out = new Float32Array(N * K);
  if (linear.op === 'MatMul') {
    const w = floatValues(linear.weight);
    for (let k = 0; k < K; k++) for (let n = 0; n < N; n++) out[n * K + k] = w[k * N + n]!;
    return out;
  }
  const [packed, scales] = linear.inputs;
  const B = packed!.rawData!;
  const s = floatValues(scales!);
  const blocks = K / 32;
  for (let n = 0; n < N; n++) {
    for (let k = 0; k < K; k++) {
      const byte = B[(n * blocks + (k >> 5)) * 16 + ((k % 32) >> 1)]!;
      out[n * K + k] = s[n * blocks + (k >> 5)]! * ((k & 1 ? byte >> 4 : byte & 0x0f) - 8);
    }
  }
  return out;
}

describe('the talker as a GGUF file', () => {
  it('keeps the 4-bit layers as Q4_0 blocks of the export\'s own nibbles, norms as F32, and declares a qwen3 model without a tokenizer', async () => {
    const model = await decode(dirs.int4, 'talker_cache');
    const gguf = path.join(scratch, 'talker-int4.gguf');
    const dims = await convertTalker(model, gguf, { ropeTheta: 1e6, eps: 1e-6, contextLength: 256 });
    expect(dims).toEqual({ layers: 2, width: 32, vocab: 3072, types: ['Q4_0'] });
    const { metadata, tensors } = readGguf(gguf);
    const value = (key: string) => metadata.get(key)?.value;
    expect([value('general.architecture'), value('tokenizer.ggml.model'), value('qwen3.vocab_size'), value('qwen3.block_count')]).toEqual(['qwen3', 'none', 3072, 2]);
    expect([value('qwen3.attention.head_count'), value('qwen3.attention.head_count_kv'), value('qwen3.attention.key_length'), value('qwen3.feed_forward_length')]).toEqual([4, 2, 16, 64]);
    expect(metadata.get('qwen3.rope.freq_base')?.type).toBe(ValueType.FLOAT32);
    expect(tensors.find((t) => t.name === 'blk.1.attn_q_norm.weight')).toMatchObject({ type: TensorType.F32, dims: [16] });
    expect(tensors.find((t) => t.name === 'output.weight')).toMatchObject({ type: TensorType.Q4_0, dims: [32, 3072] });

    const weights = graphWeights(model);
    for (const [tensor, param] of [['blk.0.attn_q.weight', 'layers.0.self_attn.q_proj.weight'], ['blk.1.ffn_down.weight', 'layers.1.mlp.down_proj.weight'], ['output.weight', 'codec_head.weight']]) {
      const converted = dequantize(tensorData(gguf, tensor!));
      const expected = exportWeight(weights.linearAt(param!).linear);
      // Only the scale's rounding to f16 may move a value: at most 8 steps of 2^-11 of it.
      let worst = 0;
      let largest = 0;
      expected.forEach((v, i) => ((worst = Math.max(worst, Math.abs(v - converted[i]!))), (largest = Math.max(largest, Math.abs(v)))));
      expect(worst, tensor).toBeLessThanOrEqual(largest * 2 ** -11 + 1e-9);
    }
  });

  it('keeps a 4-bit layer with zero points as Q4_1 blocks: d = scale, m = −zero point · scale', () => {
    // Two output rows of 64 inputs in blocks of 32: nibbles and zero points chosen, scales of both signs.
    const K = 64;
    const N = 2;
    const nibbles = Array.from({ length: N * K }, (_, i) => (i * 7 + 3) % 16);
    const packed = new Uint8Array((N * K) / 2);
    nibbles.forEach((q, i) => (packed[i >> 1]! |= i & 1 ? q << 4 : q));
    const scales = Float32Array.of(0.5, -0.25, 0.125, 2);
    const zeros = Uint8Array.of(0x93, 0x5c); // row 0: blocks 3, 9; row 1: 12, 5 (low nibble first)
    const tensor = (name: string, dataType: number, bytes: Uint8Array, dims: number[]) => ({ name, dataType, rawData: bytes, dims });
    const linear: Linear = {
      op: 'MatMulNBits',
      inputs: [tensor('B', 2, packed, [N, 2, 16]), tensor('scales', 1, new Uint8Array(scales.buffer), [N * 2]), tensor('zero_points', 2, zeros, [N])],
      attributes: [{ name: 'K', i: K }, { name: 'N', i: N }, { name: 'bits', i: 4 }, { name: 'block_size', i: 32 }],
    };
    expect(linearType(linear)).toBe(TensorType.Q4_1);
    const bytes = linearRows(linear, 0, N);
    expect(bytes.length).toBe(((N * K) / 32) * 20);
    const view = new DataView(bytes.buffer, bytes.byteOffset);
    const zeroPoints = [3, 9, 12, 5];
    for (let b = 0; b < (N * K) / 32; b++) {
      const d = fromHalf(view.getUint16(b * 20, true));
      const m = fromHalf(view.getUint16(b * 20 + 2, true));
      for (let j = 0; j < 32; j++) {
        const q = j < 16 ? bytes[b * 20 + 4 + j]! & 0x0f : bytes[b * 20 + 4 + j - 16]! >> 4;
        expect(d * q + m).toBeCloseTo(scales[b]! * (nibbles[b * 32 + j]! - zeroPoints[b]!), 6);
      }
    }
  });

  it('quantizes fp32 layers to Q8_0 within half a step of each block (and the step\'s rounding to f16)', async () => {
    const model = await decode(dirs.fp32, 'talker_cache');
    const gguf = path.join(scratch, 'talker-fp32.gguf');
    expect((await convertTalker(model, gguf, { ropeTheta: 1e6, eps: 1e-6, contextLength: 256 })).types).toEqual(['Q8_0']);
    const converted = dequantize(tensorData(gguf, 'blk.0.attn_k.weight'));
    const expected = exportWeight(graphWeights(model).linearAt('layers.0.self_attn.k_proj.weight').linear);
    for (let b = 0; b < expected.length / 32; b++) {
      const block = expected.subarray(b * 32, (b + 1) * 32);
      const step = Math.max(...block.map(Math.abs)) / 127;
      // As ggml does: q = round(x / step), stored with the step rounded to f16 (2^-11 of it, times |q| ≤ 127).
      block.forEach((v, j) => expect(Math.abs(v - converted[b * 32 + j]!)).toBeLessThanOrEqual(step * (0.5 + 127 * 2 ** -11)));
    }
  });
});

const home = threadpoolAddonHome();

describe.skipIf(!home)(`the talker and code predictor on llama.cpp${home ? '' : NO_ADDON}`, () => {
  const saved = process.env.LSERVE_LLAMA_BUILD;
  let llamaHome: string;

  beforeAll(async () => {
    process.env.LSERVE_LLAMA_BUILD = 'threadpool'; // vitest.config.ts pins the prebuilt binary, which has no embedding decoder
    llamaHome = home === 'scratch' ? path.join(scratch, 'home') : home!;
    setLlamaAddonHome(llamaHome);
  });

  afterAll(() => {
    process.env.LSERVE_LLAMA_BUILD = saved;
  });

  async function generator(dir: string, graphs: GraphPlan): Promise<FrameGenerator> {
    return FrameGenerator.create({
      paths: { text_embed: file(dir, 'text_embed'), codec_embed: file(dir, 'codec_embed'), talker_cache: file(dir, 'talker_cache'), code_predictor: file(dir, 'code_predictor'), residual_embed: file(dir, 'residual_embed') },
      threads: 1,
      config: await config(dir),
      tokenizer: { vocab: file(dir, 'vocab'), merges: file(dir, 'merges'), tokenizer_config: file(dir, 'tokenizer_config') },
      graphs,
      llamaHome,
    });
  }

  async function codes(dir: string, graphs: GraphPlan): Promise<{ frames: Int32Array[]; notes: string }> {
    const g = await generator(dir, graphs);
    try {
      const frames: Int32Array[] = [];
      await g.generate(REQUEST, (frame) => frames.push(frame), () => false);
      return { frames, notes: g.graphNotes };
    } finally {
      await g.release();
    }
  }

  /** What pull prepared for each export (roles → files). */
  const pulled = {} as Record<'fp32' | 'int4', Record<string, string>>;

  /** Frames equal from the first, before the paths part. */
  const agreeing = (a: Int32Array[], b: Int32Array[]) => a.findIndex((frame, i) => frame.join() !== b[i]?.join()) + 1 || a.length;

  for (const weights of ['fp32', 'int4'] as const) {
    it(`converts a ${weights} export at pull and probes it: the converted models give the published graphs' logits within tolerance`, async () => {
      const dir = path.join(scratch, weights);
      const said: string[] = [];
      const recorded = await writePreparedGraphs(files(dirs[weights]), dir, (line) => said.push(line));
      expect(Object.keys(recorded)).toEqual(expect.arrayContaining([PREPARED_ROLES.talker_gguf, PREPARED_ROLES.predictor_gguf, PREPARED_ROLES.predictor_heads_gguf]));
      expect(said.join('\n')).toMatch(new RegExp(`talker and code_predictor: GGUF for llama\\.cpp \\(${weights === 'int4' ? 'Q4_0' : 'Q8_0'}; talker logits within`));
      const prepared = await prepareLlamaDecoders({ talker: file(dirs[weights], 'talker_cache'), predictor: file(dirs[weights], 'code_predictor'), residual: file(dirs[weights], 'residual_embed') }, await config(dirs[weights]), scratch, 1);
      for (const part of [prepared.talker, prepared.predictor]) {
        expect(part.agreement.logits).toBeLessThanOrEqual(LLAMA_TOLERANCE);
        expect(part.agreement.logits).toBeGreaterThan(0); // llama.cpp's own arithmetic, not the ONNX graph's
      }
    }, 120_000);

    it(`runs the frame loop on llama.cpp for a ${weights} export, with the ONNX path's greedy codes for the first frames`, async () => {
      const dir = path.join(scratch, `${weights}-loop`);
      pulled[weights] = Object.fromEntries(Object.entries(await writePreparedGraphs(files(dirs[weights]), dir, () => {})).map(([role, spec]) => [role, path.join(dir, spec.name)]));
      const prepared = await preparedFiles(pulled[weights]);
      const llama = await codes(dirs[weights], { ...PREPARED_PLAN, loop: 'llama', files: prepared });
      const onnx = await codes(dirs[weights], EXACT);
      expect(llama.notes).toContain('the talker and code predictor on llama.cpp');
      expect(llama.frames).toHaveLength(REQUEST.maxFrames);
      expect(agreeing(llama.frames, onnx.frames)).toBeGreaterThanOrEqual(2);
      // The same loop again: the same codes (the caches are cut back between utterances).
      expect((await codes(dirs[weights], { ...PREPARED_PLAN, loop: 'llama', files: prepared })).frames).toEqual(llama.frames);
    }, 120_000);
  }

  it('keeps a talker with wiring the architecture lacks (the frame counter) on ONNX Runtime, and says why', async () => {
    const said: string[] = [];
    const recorded = await writePreparedGraphs(files(dirs.counter), path.join(scratch, 'counter'), (line) => said.push(line));
    expect(recorded[PREPARED_ROLES.talker_gguf]).toBeUndefined();
    expect(said.join('\n')).toMatch(/talker and code_predictor: kept on ONNX Runtime \(the converted talker does not reproduce the published graph \(largest logit difference [\d.]+ % of the largest logit\)\)/);
  }, 120_000);

  it('does not use GGUF files converted from another export, and says so', async () => {
    const sources = JSON.parse(await readFile(pulled.int4[PREPARED_ROLES.sources]!, 'utf8')) as Record<string, string>;
    const moved = path.join(scratch, 'sources-other.json');
    await writeFile(moved, JSON.stringify({ ...sources, talker_gguf: '0'.repeat(64) }));
    const stale = await preparedFiles({ ...pulled.int4, [PREPARED_ROLES.sources]: moved });
    const run = await codes(dirs.int4, { ...PREPARED_PLAN, loop: 'llama', files: stale });
    expect(run.notes).toMatch(/the graph prepared at pull was built from another talker_cache\.onnx; the GGUF files are not used; /);
    expect(run.frames).toHaveLength(REQUEST.maxFrames);
  }, 120_000);

  it('runs the loop on ONNX Runtime when a GGUF file is damaged, and says so', async () => {
    const talker = pulled.int4[PREPARED_ROLES.talker_gguf]!;
    const damaged = path.join(scratch, 'talker-damaged.gguf');
    await writeFile(damaged, (await readFile(talker)).subarray(0, 4096));
    const prepared = await preparedFiles({ ...pulled.int4, [PREPARED_ROLES.talker_gguf]: damaged });
    const run = await codes(dirs.int4, { ...PREPARED_PLAN, loop: 'llama', files: prepared });
    expect(run.notes).toMatch(/^the GGUF models did not load \(llama\.cpp could not load .*talker-damaged\.gguf\); /);
    expect(run.frames).toHaveLength(REQUEST.maxFrames);
  }, 120_000);
});
