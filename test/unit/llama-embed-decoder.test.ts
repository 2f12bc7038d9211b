import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Llama, LlamaContext, LlamaModel, Token } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmbedDecoder, embedModelBinding, type EmbedDecodeResult } from '../../src/runtimes/llama/embed-decoder.js';
import { evaluateWithLogprobs, nativeLogprobs, type PositionLogprobs } from '../../src/runtimes/llama/native-logprobs.js';
import { sampleAfterReorder } from '../../src/runtimes/llama/output-reorder.js';
import { getRuntime, setLlamaAddonHome, setThreadpoolPolling } from '../../src/runtimes/llama/runtime.js';
import { readGguf, TensorType } from '../fixtures/gguf/format.js';
import { TINY_QWEN3, writeQwen3Model } from '../fixtures/gguf/qwen3.js';
import { NO_ADDON, threadpoolAddonHome } from '../helpers/llama-addon.js';

/**
 * The decode of a GGUF model from input embeddings (scripts/llama/
 * lserveEmbedDecode.cpp in the threadpool addon, runtimes/llama/
 * embed-decoder.ts), on the tiny random Qwen3 with F32 weights: token
 * embedding rows read from the file give the logits node-llama-cpp's own
 * token path gives, the hidden state is the one the head multiplies (Qwen3
 * ties the head to token_embd), and the cache is cut back and refilled.
 */

const home = threadpoolAddonHome();

const F32_QWEN3 = { ...TINY_QWEN3, type: TensorType.F32 };
const CONTEXT = 64;

/** token_embd.weight of a GGUF written by the fixtures (F32): vocab rows of `width` floats. */
function tokenEmbeddings(file: string): { width: number; table: Float32Array } {
  const { tensors } = readGguf(file);
  const bytes = (dims: number[]) => dims.reduce((a, b) => a * b, 4);
  const pad = (n: number) => (32 - (n % 32)) % 32;
  // The fixtures' writer pads every tensor to 32 bytes: the data section ends with the file.
  const dataStart = statSync(file).size - Math.max(...tensors.map((t) => Number(t.offset) + bytes(t.dims) + pad(bytes(t.dims))));
  const read = (name: string) => {
    const tensor = tensors.find((t) => t.name === name)!;
    expect(tensor.type).toBe(TensorType.F32);
    const out = new Float32Array(bytes(tensor.dims) / 4);
    const fd = openSync(file, 'r');
    try {
      readSync(fd, new Uint8Array(out.buffer), 0, out.byteLength, dataStart + Number(tensor.offset));
    } finally {
      closeSync(fd);
    }
    return { out, dims: tensor.dims };
  };
  // The fixtures fill norms with 1: a wrong data offset would not read that.
  expect([...read('output_norm.weight').out].every((v) => v === 1)).toBe(true);
  const { out, dims } = read('token_embd.weight');
  return { width: dims[0]!, table: out };
}

function logSoftmax(logits: Float32Array): (id: number) => number {
  let max = -Infinity;
  for (const x of logits) max = Math.max(max, x);
  let sum = 0;
  for (const x of logits) sum += Math.exp(x - max);
  const lse = max + Math.log(sum);
  return (id) => logits[id]! - lse;
}

function maxDifference(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i]! - b[i]!));
  return max;
}

describe.skipIf(!home)(`decoding a GGUF model from input embeddings${home ? '' : NO_ADDON}`, () => {
  let scratch: string | undefined;
  let runtime: Llama;
  let file: string;
  let width: number;
  let table: Float32Array;
  let decoder: EmbedDecoder;
  let model: LlamaModel;
  let context: LlamaContext;
  const saved = process.env.LSERVE_LLAMA_BUILD;

  const rows = (ids: readonly number[]) => {
    const out = new Float32Array(ids.length * width);
    ids.forEach((id, i) => out.set(table.subarray(id * width, (id + 1) * width), i * width));
    return out;
  };

  beforeAll(async () => {
    if (home === 'scratch') scratch = await mkdtemp(path.join(os.tmpdir(), 'lserve-embed-decode-'));
    process.env.LSERVE_LLAMA_BUILD = 'threadpool'; // vitest.config.ts pins the prebuilt binary: this suite is about the addon
    setLlamaAddonHome(scratch ?? home!);
    runtime = await getRuntime();
    file = writeQwen3Model(fileURLToPath(new URL('../.cache/qwen3-tiny-f32.gguf', import.meta.url)), F32_QWEN3);
    ({ width, table } = tokenEmbeddings(file));
    const opened = await EmbedDecoder.open(runtime, file, { contextSize: CONTEXT, threads: 1 });
    expect(opened, 'the threadpool addon has no LserveEmbedModel').toBeDefined();
    decoder = opened!;
    model = await runtime.loadModel({ modelPath: file });
    // The decoder's context takes llama.cpp's default, flash attention where the CPU has it: so does this one.
    context = await model.createContext({ contextSize: CONTEXT, sequences: 1, threads: 1, flashAttention: true });
    sampleAfterReorder(context);
  }, 120_000);

  afterAll(async () => {
    await decoder?.dispose();
    await context?.dispose();
    await model?.dispose();
    process.env.LSERVE_LLAMA_BUILD = saved;
    if (scratch) await rm(scratch, { recursive: true, force: true });
  });

  it('loads the model with its shape', () => {
    expect(embedModelBinding(runtime)).toBeDefined();
    expect(decoder.width).toBe(F32_QWEN3.embd);
    expect(decoder.hiddenWidth).toBe(F32_QWEN3.embd);
    expect(decoder.vocab).toBe(table.length / width);
    expect(decoder.length).toBe(0);
  });

  let ids: Token[];
  let prefill: EmbedDecodeResult;
  let step: EmbedDecodeResult;

  it('gives the logits node-llama-cpp gives for the same tokens, for a prefill and the row after it', async () => {
    ids = model.tokenize('The quick brown fox jumps over');
    const next = model.tokenize(' the')[0]!;
    expect(ids.length).toBeGreaterThan(4);
    prefill = await decoder.decode(rows(ids), ids.length, 0);
    step = await decoder.decode(rows([next]), 1, ids.length);
    expect(decoder.length).toBe(ids.length + 1);
    expect(prefill.hidden).toHaveLength(width);
    expect(prefill.logits).toHaveLength(decoder.vocab);

    // The token path: node-llama-cpp's decode of the same tokens, its raw logits read natively (in double) as
    // log-softmax values, the likeliest 20 — equal to ours up to the row's constant, so compared as log-softmax.
    const read = nativeLogprobs(model)!;
    const sequence = context.getSequence();
    try {
      const byTokens: PositionLogprobs[] = [
        (await evaluateWithLogprobs(read, sequence, ids, ids.map(() => -1), 20, ids.length - 1)).at(-1)!,
        (await evaluateWithLogprobs(read, sequence, [next], [-1], 20))[0]!,
      ];
      [prefill, step].forEach((ours, i) => {
        const logprob = logSoftmax(ours.logits);
        expect(byTokens[i]!.top).toHaveLength(20);
        for (const { id, logprob: expected } of byTokens[i]!.top) expect(Math.abs(logprob(id) - expected), `row ${i}, token ${id}`).toBeLessThan(1e-4);
      });
    } finally {
      sequence.dispose();
    }
  });

  it('returns the hidden state the output head multiplies: hidden · token_embdᵀ is the logits', () => {
    for (const { hidden, logits } of [prefill, step]) {
      let worst = 0;
      let largest = 0;
      for (let v = 0; v < decoder.vocab; v++) {
        let dot = 0;
        for (let k = 0; k < width; k++) dot += hidden[k]! * table[v * width + k]!;
        worst = Math.max(worst, Math.abs(dot - logits[v]!));
        largest = Math.max(largest, Math.abs(logits[v]!));
      }
      expect(largest).toBeGreaterThan(0.05);
      expect(worst / largest).toBeLessThan(1e-4);
    }
  });

  let afterCut: EmbedDecodeResult;
  const cut = 3;
  const other = 1000;

  it('decodes a different row after truncate(k) as a fresh decode of that prefix does', async () => {
    await decoder.truncate(cut);
    expect(decoder.length).toBe(cut);
    afterCut = await decoder.decode(rows([other]), 1, cut);
    expect(maxDifference(afterCut.logits, step.logits)).toBeGreaterThan(1e-3); // another input, another output

    // A second decoder (sharing the first's threadpool: the same thread count) fed the prefix and the row fresh.
    const fresh = (await EmbedDecoder.open(runtime, file, { contextSize: CONTEXT, threads: 1 }))!;
    try {
      await fresh.decode(rows(ids.slice(0, cut)), cut, 0);
      const expected = await fresh.decode(rows([other]), 1, cut);
      expect(maxDifference(afterCut.hidden, expected.hidden)).toBeLessThan(1e-5);
      expect(maxDifference(afterCut.logits, expected.logits)).toBeLessThan(1e-5);
    } finally {
      await fresh.dispose();
    }
  });

  it('returns a slice of the logits equal to the same slice of the whole', async () => {
    await decoder.truncate(cut);
    const sliced = await decoder.decode(rows([other]), 1, cut, { from: 2048, to: 4096 });
    expect(sliced.logits).toHaveLength(2048);
    expect(maxDifference(sliced.logits, afterCut.logits.subarray(2048, 4096))).toBeLessThan(1e-6);
    expect(maxDifference(sliced.hidden, afterCut.hidden)).toBeLessThan(1e-6);
  });

  it('rejects bad arguments with an error and keeps working', async () => {
    const position = decoder.length;
    const one = rows([other]);
    const bad: Array<[() => Promise<unknown>, RegExp]> = [
      [() => decoder.decode(one.subarray(1), 1, position), /count × width/],
      [() => decoder.decode(new Int32Array(width) as unknown as Float32Array, 1, position), /Float32Array/],
      [() => decoder.decode(one, 0, position), /count must be/],
      [() => decoder.decode(one, 1.5, position), /count must be/],
      [() => decoder.decode(rows(Array(5).fill(other)), 5, CONTEXT - 4), /at most the context size/],
      [() => decoder.decode(one, 1, -1), /at most the context size/],
      [() => decoder.decode(one, 1, position, { from: 10, to: 10 }), /from < to/],
      [() => decoder.decode(one, 1, position, { from: 0, to: decoder.vocab + 1 }), /from < to <= vocab/],
      [() => decoder.decode(one, 1, position + 1), new RegExp(`cache holds positions 0 to ${position - 1}`)],
      [() => decoder.decode(one, 1, position - 1), new RegExp(`truncate\\(${position - 1}\\) first`)],
      [() => decoder.decode(one, 1, position, undefined, -1, 1 as unknown as boolean), /spin must be a boolean/],
      [() => decoder.truncate(-1), /truncate\(position\)/],
    ];
    for (const [call, message] of bad) await expect(call()).rejects.toThrow(message);
    expect(decoder.length).toBe(position);
    await decoder.truncate(cut);
    const again = await decoder.decode(one, 1, cut);
    expect(maxDifference(again.logits, afterCut.logits)).toBeLessThan(1e-6);
  });

  it('runs the calls made together one after another, in order', async () => {
    await decoder.truncate(cut);
    const [a, , b] = await Promise.all([decoder.decode(rows([other]), 1, cut), decoder.truncate(cut), decoder.decode(rows([other]), 1, cut)]);
    expect(maxDifference(a.logits, afterCut.logits)).toBeLessThan(1e-6);
    expect(maxDifference(b.logits, afterCut.logits)).toBeLessThan(1e-6);
  });

  it('decodes on the calling thread (blocking) as on the pool, and a bad call fails the same way', async () => {
    const blocking = (await EmbedDecoder.open(runtime, file, { contextSize: CONTEXT, threads: 1, blocking: true }))!;
    try {
      expect(blocking.blocking, 'the binary has no decodeSync').toBe(true);
      expect(decoder.blocking).toBe(false);
      expect(maxDifference((await blocking.decode(rows(ids), ids.length, 0)).logits, prefill.logits)).toBeLessThan(1e-5);
      await blocking.truncate(cut);
      expect(maxDifference((await blocking.decode(rows([other]), 1, cut)).logits, afterCut.logits)).toBeLessThan(1e-5);
      await expect(blocking.decode(rows([other]), 1, cut + 5)).rejects.toThrow(/cache holds positions 0 to 3/);
      await expect(blocking.decode(rows([other]).subarray(1), 1, cut + 1)).rejects.toThrow(/count × width/);
      expect(blocking.length).toBe(cut + 1);
    } finally {
      await blocking.dispose();
    }
  });

  it('decodes the same with its threadpool paused after every decode (polling off), or left polling (spin)', async () => {
    setThreadpoolPolling(false);
    try {
      for (let i = 0; i < 4; i++) {
        await decoder.truncate(cut);
        expect(maxDifference((await decoder.decode(rows([other]), 1, cut, undefined, -1, i % 2 === 0)).logits, afterCut.logits)).toBeLessThan(1e-6);
      }
    } finally {
      setThreadpoolPolling(true);
    }
  });

  it('is unusable after dispose', async () => {
    const spare = (await EmbedDecoder.open(runtime, file, { contextSize: 8, threads: 1 }))!;
    await spare.decode(rows([other]), 1, 0);
    await spare.dispose();
    await expect(spare.decode(rows([other]), 1, 1)).rejects.toThrow(/disposed/);
  });
});
