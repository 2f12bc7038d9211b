import { createHash } from 'node:crypto';
import { readFile, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import ort from 'onnxruntime-node';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { EmbedDecoder, embedModelBinding } from '../../../runtimes/llama/embed-decoder.js';
import { getRuntime } from '../../../runtimes/llama/runtime.js';
import { concatFloats, readFloats } from '../../../runtimes/onnx/float-io.js';
import { halvesToFloats } from '../../../runtimes/onnx/float16.js';
import { OnnxTalker } from '../talker.js';
import { Rng } from '../sampling.js';
import type { Sampling, TtsConfig } from '../config.js';
import { inlineExternalData } from '../prepared/inline-external.js';
import { probeInputs, publishedLogits, relativeDifference, samplingDistance } from '../prepared/prepare-predictor.js';
import { readPredictorWeights, UnpreparableGraph } from '../prepared/predictor-weights.js';
import { convertPredictor, convertTalker, type DecoderDims } from './convert.js';
import { LlamaPredictor, LlamaTalker } from './frame-decoders.js';
import { PredictorFront } from './predictor-front.js';

/**
 * Converting a Qwen3-TTS export's talker and code predictor to GGUF at
 * `lserve pull` (convert.ts), and the rule they are kept by: on probe inputs
 * the converted models, run by llama.cpp through lserve's embedding decoder,
 * must give the published graphs' logits within LLAMA_TOLERANCE of the
 * largest logit — the talker over a prefill of 8 frames' summed embeddings
 * and 2 steps after it, the predictor over a frame of random codes from a
 * random talker state. Otherwise the files go, and the loop stays on ONNX
 * Runtime with the reason said.
 */

const { onnx } = onnxProto;

/** Agreement asked of the converted models: their 4-bit weights are the export's, their activations are quantized to 8 bits as the prepared ONNX graphs' are. */
export const LLAMA_TOLERANCE = 0.05;
const PROBE_PREFILL = 8;
export const NO_BINDING = "the loaded llama.cpp binary cannot decode embeddings (lserve's threadpool addon is not installed)";
const PROBE_STEPS = 2;

export interface LlamaAgreement {
  /** Largest |Δ logit| ÷ largest |logit| over the probe. */
  logits: number;
  /** Mean total variation distance of the sampling distributions (the config's temperature and top-k). */
  sampling: number;
}

export interface PreparedLlama {
  talker: { file: string; source: string; dims: DecoderDims; agreement: LlamaAgreement };
  predictor: { file: string; heads: string; source: string; dims: DecoderDims; agreement: LlamaAgreement };
}

export interface LlamaSources {
  talker: string;
  predictor: string;
  residual: string;
}

/** Converts and probes; the files are written as `<dir>/talker.gguf`, `<dir>/predictor.gguf` and `<dir>/predictor-heads.gguf`. Throws UnpreparableGraph with the reason where they cannot be used. */
export async function prepareLlamaDecoders(sources: LlamaSources, config: TtsConfig, dir: string, threads: number): Promise<PreparedLlama> {
  const llama = await getRuntime();
  if (!embedModelBinding(llama)) throw new UnpreparableGraph(NO_BINDING);
  const files = { talker: path.join(dir, 'talker.gguf'), predictor: path.join(dir, 'predictor.gguf'), heads: path.join(dir, 'predictor-heads.gguf') };
  const partial = (file: string) => `${file}.${process.pid}.tmp`;
  try {
    const [{ model: talkerModel, source: talkerSource }, { model: predictorModel, source: predictorSource }] = await Promise.all([decode(sources.talker), decode(sources.predictor)]);
    const talkerDims = await convertTalker(talkerModel, partial(files.talker), { ...config.talkerNorms, contextLength: config.maxPositions });
    const predictorNorms = { ropeTheta: config.predictorDims.ropeTheta, eps: config.predictorDims.eps, contextLength: config.groups };
    const predictorWeights = readPredictorWeights(predictorModel, config.groups);
    const predictorDims = await convertPredictor(predictorWeights, partial(files.predictor), partial(files.heads), predictorNorms);
    const options: ort.InferenceSession.SessionOptions = { intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential' };
    const talker = await EmbedDecoder.open(llama, partial(files.talker), { contextSize: PROBE_PREFILL + PROBE_STEPS, threads });
    if (!talker) throw new UnpreparableGraph(NO_BINDING);
    const talkerAgreement = await probeTalker(new LlamaTalker(talker), sources, config, options);
    if (!(talkerAgreement.logits <= LLAMA_TOLERANCE)) throw new UnpreparableGraph(`the converted talker does not reproduce the published graph (largest logit difference ${pct(talkerAgreement.logits)} of the largest logit)`);
    const predictor = (await EmbedDecoder.open(llama, partial(files.predictor), { contextSize: config.groups, threads, heads: partial(files.heads) }))!;
    const front = await PredictorFront.open(predictorWeights, predictorModel.opsetImport ?? [], config.groups, predictorDims.vocab, options);
    const predictorAgreement = await probePredictor(predictor, front, sources.predictor, config, options);
    if (!(predictorAgreement.logits <= LLAMA_TOLERANCE)) throw new UnpreparableGraph(`the converted code predictor does not reproduce the published graph (largest logit difference ${pct(predictorAgreement.logits)} of the largest logit)`);
    for (const file of Object.values(files)) await rename(partial(file), file);
    return {
      talker: { file: files.talker, source: talkerSource, dims: talkerDims, agreement: talkerAgreement },
      predictor: { file: files.predictor, heads: files.heads, source: predictorSource, dims: predictorDims, agreement: predictorAgreement },
    };
  } finally {
    await Promise.all(Object.values(files).map((file) => rm(partial(file), { force: true })));
  }
}

const pct = (x: number) => `${(x * 100).toFixed(2)} %`;

/** A published graph, decoded with its external data inline, and the SHA-256 of the bytes read. */
async function decode(file: string): Promise<{ model: OnnxTypes.ModelProto; source: string }> {
  const bytes = await readFile(file);
  const model = onnx.ModelProto.decode(bytes);
  await inlineExternalData(model, path.dirname(file));
  return { model, source: createHash('sha256').update(bytes).digest('hex') };
}

/** The published talker and the converted one over the same rows (summed frame embeddings of random codes); disposes `converted`. */
async function probeTalker(converted: LlamaTalker, sources: LlamaSources, config: TtsConfig, options: ort.InferenceSession.SessionOptions): Promise<LlamaAgreement> {
  const [published, residual] = await Promise.all([ort.InferenceSession.create(sources.talker, options), ort.InferenceSession.create(sources.residual, options)]);
  try {
    const reference = OnnxTalker.of(published, config);
    const hidden = reference.width;
    const rng = new Rng(0x5eed7a1c);
    const rows = new Float32Array((PROBE_PREFILL + PROBE_STEPS) * hidden);
    for (let r = 0; r < PROBE_PREFILL + PROBE_STEPS; r++) {
      const codes = BigInt64Array.from({ length: config.groups }, () => BigInt(Math.floor(rng.next() * 2048)));
      const out = await residual.run({ [residual.inputNames[0]!]: new ort.Tensor('int64', codes, [1, config.groups]) });
      const row = out[residual.outputNames[0]!]!;
      rows.set(readFloats(row.type, row.data).subarray(0, hidden), r * hidden);
    }
    const expected: Float32Array[] = [];
    const actual: Float32Array[] = [];
    const runs: Array<[number, number]> = [[0, PROBE_PREFILL], ...Array.from({ length: PROBE_STEPS }, (_, i): [number, number] => [PROBE_PREFILL + i, 1])];
    for (const [past, count] of runs) {
      const slice = rows.subarray(past * hidden, (past + count) * hidden);
      expected.push((await reference.step(slice, count, past)).logits.slice());
      actual.push((await converted.step(slice, count, past)).logits.slice());
    }
    return agreement(concatFloats(expected), concatFloats(actual), runs.length, config.talker);
  } finally {
    await Promise.all([published.release(), residual.release(), converted.release()]);
  }
}

/** The published code predictor and the converted one over a frame of random codes; disposes `decoder` and `front`. */
async function probePredictor(decoder: EmbedDecoder, front: PredictorFront, file: string, config: TtsConfig, options: ort.InferenceSession.SessionOptions): Promise<LlamaAgreement> {
  const published = await ort.InferenceSession.create(file, options);
  const frame = new BigInt64Array(config.groups);
  const converted = new LlamaPredictor(decoder, front, frame);
  try {
    const probe = probeInputs(published, config.groups);
    const expected = await publishedLogits(published, probe);
    const codes = Array.from(probe.codes.data as ArrayLike<number | bigint>, Number);
    const hidden = probe.hidden.type === 'float16' ? halvesToFloats(probe.hidden.data as Uint16Array) : (probe.hidden.data as Float32Array);
    const rows: Float32Array[] = [];
    frame[0] = BigInt(codes[0]!);
    // Each group draws the probe's own code, so every row reads the same codes as the published run.
    await converted.frame(hidden, (logits) => (rows.push(logits.slice()), codes[rows.length]!), () => false);
    return agreement(expected, concatFloats(rows), config.groups - 1, config.predictor);
  } finally {
    await Promise.all([published.release(), converted.release()]);
  }
}

function agreement(expected: Float32Array, actual: Float32Array, rows: number, sampling: Sampling): LlamaAgreement {
  return { logits: relativeDifference(expected, actual), sampling: samplingDistance(expected, actual, rows, sampling) };
}
