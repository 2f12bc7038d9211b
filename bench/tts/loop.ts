import { createRequire } from 'node:module';
import type * as Ort from 'onnxruntime-node';
import { CodecDecoder, StreamingBlocks, type BlockDecoder } from '../../src/families/qwen3-tts/codec.js';
import { openFrameModels } from '../../src/families/qwen3-tts/frame-models.js';
import type { Qwen3TtsRuntime } from '../../src/families/qwen3-tts/loader.js';
import { openCodecDecoder } from '../../src/families/qwen3-tts/prepared/prepare-decoder.js';
import { preparedFiles } from '../../src/families/qwen3-tts/prepared/prepare.js';
import { OnnxSession, ortSessionOptions } from '../../src/runtimes/onnx/session.js';
import { benchConfig, GRAPH_PLANS, pulledGraphs, type BenchModel, type Graphs } from './model.js';

const ort = createRequire(import.meta.url)('onnxruntime-node') as typeof Ort;
const FPS = 12.5;
export const fmt = (x: number, digits = 1) => (Number.isFinite(x) ? x.toFixed(digits) : '—');
export const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s[(s.length - 1) >> 1]! + s[s.length >> 1]!) / 2 : NaN;
};

export const SENTENCE = 'Hello, this is one sentence of a benchmark for speech synthesis.';

export interface SynthesisRun {
  /** Frames in the first audio block. */
  first: number;
  frames: number;
  firstAudio: number;
  total: number;
  /** Frames after the first block ÷ the time after the first audio (their decodes included). */
  loopFps: number;
  rtf: number;
}

/**
 * One sentence through the runtime (prefill, frame loop, streamed decode),
 * with the first audio block cut after `first` frames (the later blocks as
 * the decoder's block policy grows them).
 */
export async function synthesize(runtime: Qwen3TtsRuntime, first: number, maxFrames: number, seed: number): Promise<SynthesisRun> {
  runtime.blockPolicy = { ...runtime.blockPolicy, first };
  const started = performance.now();
  let firstAudio = 0;
  // The synthetic talker stops after 2 frames a text token (≈ 28 for the sentence): longer runs repeat it, up to maxFrames.
  const text = Array.from({ length: Math.ceil(maxFrames / 24) }, () => SENTENCE).join(' ');
  const { frames } = await runtime.synthesize({ text, speed: 1, seed, maxFrames }, () => {
    if (!firstAudio) firstAudio = performance.now() - started;
  }, new AbortController().signal);
  const total = (performance.now() - started) / 1000;
  firstAudio /= 1000;
  return { first, frames, firstAudio, total, loopFps: (frames - first) / (total - firstAudio), rtf: total / (frames / FPS) };
}

export function describeRun(label: string, r: SynthesisRun): string {
  return `${label}: ${r.frames} frames (${fmt(r.frames / FPS, 2)} s of audio): first audio ${fmt(r.firstAudio, 2)} s (first block ${r.first} frames), total ${fmt(r.total, 2)} s, RTF ${fmt(r.rtf, 2)}, loop ${fmt(r.loopFps, 2)} frames/s`;
}

async function timeIt(runs: number, fn: () => Promise<unknown>): Promise<number> {
  await fn();
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const started = performance.now();
    await fn();
    times.push(performance.now() - started);
  }
  return median(times);
}

export interface Parts {
  threads: number;
  /** Which talker and code predictor ran (the generator's note). */
  loop: string;
  /** ms, each a median. */
  prefill: number;
  step: number;
  /** The predictor's 15 calls of a frame, drawing each group's code from its logits. */
  predictor: number;
  embed: number;
  /** A sentence of `frames` frames decoded at the shipped block schedule: its calls, and the mean call. */
  decodeCall: number;
  decodeCalls: number;
  /** The sentence's decode ÷ frames. */
  decoder: number;
  /** step + predictor + embed + decoder. */
  frame: number;
}

/** The blocks a sentence of `frames` frames is decoded in, cut as the runtime cuts them (the decoder's policy). */
function blockSizes(frames: number, decoder: BlockDecoder): number[] {
  const blocks = new StreamingBlocks(decoder.blocks, decoder.maxBlock);
  const sizes: number[] = [];
  const take = (final: boolean) => {
    for (let block = blocks.take(final); block; block = blocks.take(final)) sizes.push(block.to - block.from);
  };
  for (let f = 0; f < frames; f++) {
    blocks.push(new Int32Array(0));
    take(false);
  }
  take(true);
  return sizes;
}

const argmax = (logits: Float32Array) => logits.reduce((best, x, i) => (x > logits[best]! ? i : best), 0);

/**
 * The parts of one frame, called in this thread on the sessions the
 * generator worker opens for `graphs` (open-prepared.ts, `threads` intra-op
 * threads): a talker prefill of `prompt` rows, a cached step after it, the
 * code predictor's whole frame (15 calls: the published graph's, or the
 * cached one's through CachedPredictor, as the generator runs them), one
 * residual embedding; and the decoder as the runtime runs it (its own
 * worker: the published graph, or for `prepared` the streaming one): a
 * sentence of `frames` frames in the runtime's blocks, per frame.
 */
export async function frameParts(model: BenchModel, graphs: Graphs, threads: number, frames: number, prompt = 24): Promise<Parts> {
  const s = model.shape.talker;
  const options = ortSessionOptions({ threads });
  const plan = GRAPH_PLANS[graphs];
  const { config, codec } = await benchConfig(model);
  const files = graphs === 'published' ? model.files : { ...model.files, ...(await pulledGraphs(model)) };
  const codes = new BigInt64Array(config.groups);
  const { talker, predictor, note } = await openFrameModels(
    { talker: model.files.talker_cache!, predictor: model.files.code_predictor!, config, plan: { ...plan, files: await preparedFiles(files) }, threads, talkerPositions: prompt + 64 },
    options,
    codes,
  );
  const rows = new Float32Array(prompt * s.hidden).fill(0.01);
  const prefill = await timeIt(2, () => talker.step(rows, prompt, 0));
  // Steps at successive positions after the prompt, as a sentence takes them.
  let past = prompt;
  const step = await timeIt(7, () => talker.step(rows.subarray(0, s.hidden), 1, past++));
  const hidden = new Float32Array(s.hidden).fill(0.01);
  const predictorFrame = await timeIt(5, () => predictor.frame(hidden, argmax, () => false));
  await Promise.all([talker.release(), predictor.release()]);

  const residual = await ort.InferenceSession.create(model.files.residual_embed!, options);
  const embed = await timeIt(10, () => residual.run({ codec_ids: new ort.Tensor('int64', codes, [1, config.groups]) }));
  await residual.release();

  const decoder =
    graphs === 'prepared' || graphs === 'llama'
      ? (await openCodecDecoder(model.files.tok_decoder!, (await preparedFiles({ ...model.files, ...(await pulledGraphs(model)) })).tok_decoder, codec, threads)).decoder
      : new CodecDecoder(await OnnxSession.create(model.files.tok_decoder!, { threads }), config.groups, codec);
  const silence = Array.from({ length: frames }, () => new Int32Array(config.groups));
  const sizes = blockSizes(frames, decoder);
  const sentence = await timeIt(2, async () => {
    const stream = decoder.stream();
    let at = 0;
    for (const size of sizes) await stream.decode(silence, at, (at += size));
    await stream.end();
  });
  await decoder.release();
  const decodeCalls = sizes.length;
  const decodeCall = sentence / decodeCalls;
  const perFrame = sentence / frames;
  return { threads, loop: note, prefill, step, predictor: predictorFrame, embed, decodeCall, decodeCalls, decoder: perFrame, frame: step + predictorFrame + embed + perFrame };
}
