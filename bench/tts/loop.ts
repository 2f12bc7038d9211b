import { createRequire } from 'node:module';
import type * as Ort from 'onnxruntime-node';
import { STREAMING_BLOCKS } from '../../src/families/qwen3-tts/codec.js';
import type { Qwen3TtsRuntime } from '../../src/families/qwen3-tts/index.js';
import { ortSessionOptions } from '../../src/runtimes/onnx/session.js';
import { QWEN3_TTS_0_6B, talkerPastName } from '../../test/fixtures/onnx/qwen3-tts.js';
import type { BenchModel } from './model.js';

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
 * STREAMING_BLOCKS grows them).
 */
export async function synthesize(runtime: Qwen3TtsRuntime, first: number, maxFrames: number, seed: number): Promise<SynthesisRun> {
  runtime.blockPolicy = { ...STREAMING_BLOCKS, first };
  const started = performance.now();
  let firstAudio = 0;
  const { frames } = await runtime.synthesize({ text: SENTENCE, speed: 1, seed, maxFrames }, () => {
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
  /** Whether ORT's intra-op threads spin between ops and runs (the runtime's sessions never do). */
  spinning: boolean;
  /** ms, each a median. */
  prefill: number;
  step: number;
  call: number;
  embed: number;
  frame: number;
}

/**
 * The parts of one frame, called in this thread on sessions made as the
 * generator worker makes them (`threads` intra-op threads; with `spinning`,
 * ORT's idle threads spin instead of sleeping): a talker prefill
 * of `prompt` rows, a cached step after it, one code-predictor call, one
 * residual embedding.
 */
export async function frameParts(model: BenchModel, threads: number, spinning = false, prompt = 24): Promise<Parts> {
  const s = QWEN3_TTS_0_6B.talker;
  const options = ortSessionOptions({ threads });
  if (spinning) options.extra.session.intra_op.allow_spinning = '1';
  const talker = await ort.InferenceSession.create(model.files.talker_cache!, options);
  const feeds = (rows: number, past: number, cache?: Record<string, Ort.Tensor>) => {
    const out: Record<string, Ort.Tensor> = {
      inputs_embeds: new ort.Tensor('float32', new Float32Array(rows * s.hidden).fill(0.01), [1, rows, s.hidden]),
      position_ids: new ort.Tensor('int64', BigInt64Array.from({ length: 3 * rows }, (_, i) => BigInt(past + (i % rows))), [3, 1, rows]),
      attention_mask: new ort.Tensor('int64', new BigInt64Array(past + rows).fill(1n), [1, past + rows]),
    };
    for (let l = 0; l < s.layers; l++) {
      for (const part of ['key', 'value'] as const) {
        out[talkerPastName(l, part)] = cache ? cache[`present.${l}.${part}`]! : new ort.Tensor('float32', new Float32Array(0), [1, s.kvHeads, 0, s.headDim]);
      }
    }
    return out;
  };
  const prefill = await timeIt(2, () => talker.run(feeds(prompt, 0)));
  const cache = (await talker.run(feeds(prompt, 0))) as Record<string, Ort.Tensor>;
  const step = await timeIt(7, () => talker.run(feeds(1, prompt, cache)));
  await talker.release();

  const predictor = await ort.InferenceSession.create(model.files.code_predictor!, options);
  const hidden = new ort.Tensor('float32', new Float32Array(s.hidden).fill(0.01), [1, s.hidden]);
  const codes = new ort.Tensor('int64', new BigInt64Array(16), [1, 16]);
  const call = await timeIt(15, () => predictor.run({ talker_hidden: hidden, codec_ids: codes }));
  await predictor.release();

  const residual = await ort.InferenceSession.create(model.files.residual_embed!, options);
  const embed = await timeIt(10, () => residual.run({ codec_ids: codes }));
  await residual.release();
  return { threads, spinning, prefill, step, call, embed, frame: step + 15 * call + embed };
}
