import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import ort from 'onnxruntime-node';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { concatFloats, readFloats } from '../../../runtimes/onnx/float-io.js';
import { floatsToHalves } from '../../../runtimes/onnx/float16.js';
import { buildCachedPredictor, CACHED_IO, type PredictorDims } from './predictor-graph.js';
import { readPredictorWeights, UnpreparableGraph } from './predictor-weights.js';
import { inlineExternalData } from './inline-external.js';
import type { Sampling } from '../config.js';

/**
 * Preparing the KV-cached code predictor from a published code_predictor
 * graph: its weights are read (external data brought inline: the prepared
 * graph is one file), the cached graph is built, and before it is accepted
 * it must give the published graph's logits for a probe frame (random talker
 * state and codes, every group), built with the export's own MatMulNBits
 * accuracy level. The model kept uses int8 activations (accuracy_level 4)
 * where the export's linear layers are 4-bit. The published file's SHA-256
 * goes in the sidecar, so a prepared graph is never used with another
 * export.
 */

const { onnx } = onnxProto;
/** Agreement asked of the cached graph at the export's accuracy level: relative to the probe's largest logit. */
export const CHECK_TOLERANCE = 1e-3;
/** MatMulNBits accuracy level of the prepared graph: int8 activations (bench/tts.ts: the talker step 1.5×, a predictor call 1.5×). */
export const PREPARED_ACCURACY_LEVEL = 4;

export interface PreparedPredictor {
  model: Uint8Array;
  /** The published graph's SHA-256. */
  source: string;
  /**
   * Largest |Δ logit| ÷ largest |logit| of the probe frame, at the export's
   * accuracy level and as prepared; and as prepared, the mean total variation
   * distance between the groups' sampling distributions (the config's
   * temperature and top-k): the share of draws with the same random number
   * that can come out otherwise.
   */
  difference: { exact: number; prepared: number; sampling: number };
  /** Whether the weights are 4-bit (MatMulNBits); the accuracy level applies to them only. */
  quantized: boolean;
}

export async function prepareCodePredictor(source: string, dims: PredictorDims, groups: number, threads: number, sampling: Pick<Sampling, 'temperature' | 'topK'>, int8 = true): Promise<PreparedPredictor> {
  const bytes = await readFile(source);
  const sha = createHash('sha256').update(bytes).digest('hex');
  const published = onnx.ModelProto.decode(bytes);
  await inlineExternalData(published, path.dirname(source));
  const weights = readPredictorWeights(published, groups);
  const quantized = [...weights.layers.flatMap((l) => [l.q, l.k, l.v, l.o, l.gate, l.up, l.down]), ...weights.heads].some((l) => l.op === 'MatMulNBits');
  const opsets = published.opsetImport ?? [];
  const exact = buildCachedPredictor(weights, dims, opsets);
  const model = quantized && int8 ? buildCachedPredictor(weights, dims, opsets, PREPARED_ACCURACY_LEVEL) : exact;
  const options: ort.InferenceSession.SessionOptions = { intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential' };
  const sessions = await Promise.all([ort.InferenceSession.create(onnx.ModelProto.encode(published).finish(), options), ort.InferenceSession.create(exact, options)]);
  const prepared = model === exact ? sessions[1] : await ort.InferenceSession.create(model, options);
  try {
    const [reference, cached] = [sessions[0], sessions[1]];
    const probe = probeInputs(reference, groups);
    const expected = await publishedLogits(reference, probe);
    const exactLogits = await cachedLogits(cached, probe, dims, weights.layers.length, groups);
    const difference = { exact: relativeDifference(expected, exactLogits), prepared: 0, sampling: 0 };
    if (!(difference.exact <= CHECK_TOLERANCE)) {
      throw new UnpreparableGraph(`the cached predictor does not reproduce the published graph (largest logit difference ${difference.exact.toExponential(2)} of the largest logit)`);
    }
    const preparedLogits = prepared === cached ? exactLogits : await cachedLogits(prepared, probe, dims, weights.layers.length, groups);
    difference.prepared = relativeDifference(expected, preparedLogits);
    difference.sampling = samplingDistance(expected, preparedLogits, groups - 1, sampling);
    return { model, source: sha, difference, quantized };
  } finally {
    await Promise.all([...sessions, prepared].filter((s, i, all) => all.indexOf(s) === i).map((s) => s.release()));
  }
}

export async function fileSha256(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

export interface Probe {
  hidden: ort.Tensor;
  codes: ort.Tensor;
}

/** A talker state and codes drawn from a fixed seed, in the published graph's input types. */
export function probeInputs(session: ort.InferenceSession, groups: number): Probe {
  const [hiddenMeta, codesMeta] = session.inputMetadata as ort.InferenceSession.ValueMetadata[];
  const width = hiddenMeta?.isTensor ? Number(hiddenMeta.shape.at(-1)) : NaN;
  if (!hiddenMeta?.isTensor || !codesMeta?.isTensor || !(width > 0)) throw new UnpreparableGraph('the code_predictor inputs are not the talker state and the codes');
  let state = 0x2545f491;
  const next = () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32);
  const values = Float32Array.from({ length: width }, () => (next() * 2 - 1) * 2);
  const hidden = hiddenMeta.type === 'float16' ? new ort.Tensor('float16', floatsToHalves(values), [1, width]) : new ort.Tensor('float32', values, [1, width]);
  const codes = new ort.Tensor(codesMeta.type === 'int32' ? 'int32' : 'int64', codesMeta.type === 'int32' ? Int32Array.from({ length: groups }, () => Math.floor(next() * 2048)) : BigInt64Array.from({ length: groups }, () => BigInt(Math.floor(next() * 2048))), [1, groups]);
  return { hidden, codes };
}

export async function publishedLogits(session: ort.InferenceSession, probe: Probe): Promise<Float32Array> {
  const out = await session.run({ [session.inputNames[0]!]: probe.hidden, [session.inputNames[1]!]: probe.codes });
  const logits = out[session.outputNames[0]!]!;
  return readFloats(logits.type, logits.data).slice();
}

/** The 15 rows of logits as the generator asks for them: rows [0, 2), then one row a call. */
async function cachedLogits(session: ort.InferenceSession, probe: Probe, dims: PredictorDims, layers: number, groups: number): Promise<Float32Array> {
  const rows: Float32Array[] = [];
  let cache: Record<string, ort.Tensor> = {};
  for (let layer = 0; layer < layers; layer++) {
    for (const part of ['key', 'value'] as const) cache[CACHED_IO.past(layer, part)] = new ort.Tensor('float32', new Float32Array(0), [1, dims.kvHeads, 0, dims.headDim]);
  }
  for (let end = 2; end <= groups; end++) {
    const start = end === 2 ? 0 : end - 1;
    const out = await session.run({
      [session.inputNames[0]!]: probe.hidden,
      [session.inputNames[1]!]: probe.codes,
      [CACHED_IO.start]: new ort.Tensor('int64', BigInt64Array.of(BigInt(start)), [1]),
      [CACHED_IO.end]: new ort.Tensor('int64', BigInt64Array.of(BigInt(end)), [1]),
      ...cache,
    });
    rows.push(out[CACHED_IO.logits]!.data as Float32Array);
    cache = {};
    for (let layer = 0; layer < layers; layer++) {
      for (const part of ['key', 'value'] as const) cache[CACHED_IO.past(layer, part)] = out[CACHED_IO.present(layer, part)]!;
    }
  }
  return concatFloats(rows);
}

/** Mean over `rows` of the total variation distance between softmax(top-k(logits) / T) of `a` and of `b`. */
export function samplingDistance(a: Float32Array, b: Float32Array, rows: number, { temperature, topK }: Pick<Sampling, 'temperature' | 'topK'>): number {
  const vocab = a.length / rows;
  const distribution = (logits: Float32Array) => {
    const k = topK > 0 ? Math.min(topK, vocab) : vocab;
    const threshold = [...logits].sort((x, y) => y - x)[k - 1]!;
    const max = Math.max(...logits);
    const p = logits.map((x) => (x >= threshold ? Math.exp((x - max) / Math.max(temperature, 1e-6)) : 0));
    const sum = p.reduce((s, x) => s + x, 0);
    return p.map((x) => x / sum);
  };
  let total = 0;
  for (let r = 0; r < rows; r++) {
    const p = distribution(a.subarray(r * vocab, (r + 1) * vocab));
    const q = distribution(b.subarray(r * vocab, (r + 1) * vocab));
    total += 0.5 * p.reduce((s, x, i) => s + Math.abs(x - q[i]!), 0);
  }
  return total / rows;
}

export function relativeDifference(expected: Float32Array, actual: Float32Array): number {
  if (expected.length !== actual.length) return Infinity;
  let largest = 0;
  let worst = 0;
  for (let i = 0; i < expected.length; i++) {
    largest = Math.max(largest, Math.abs(expected[i]!));
    worst = Math.max(worst, Math.abs(expected[i]! - actual[i]!));
  }
  return worst / Math.max(largest, 1e-12);
}
