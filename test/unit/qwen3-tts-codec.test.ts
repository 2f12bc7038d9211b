import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CodecDecoder, STREAMING_BLOCKS, StreamingBlocks } from '../../src/families/qwen3-tts/codec.js';
import { decoderLookBack, parseCodecConfig, type SpeechTokenizerConfigJson } from '../../src/families/qwen3-tts/codec-config.js';
import { PromptError } from '../../src/families/qwen3-tts/prompt.js';
import { encodeReferenceCodes, splitFrames } from '../../src/families/qwen3-tts/reference-codes.js';
import { OnnxSession } from '../../src/runtimes/onnx/session.js';
import { qwen3TtsLoader } from '../../src/families/qwen3-tts/loader.js';
import type { InstalledModel } from '../../src/core/store.js';
import {
  decoderGraph,
  encoderGraph,
  GROUPS,
  qwen3TtsFiles,
  SAMPLES_PER_FRAME,
  speechTokenizerConfig,
  TINY_QWEN3_TTS,
  tinyQwen3TtsModel,
} from '../fixtures/onnx/qwen3-tts.js';

/**
 * The codec side of Qwen3-TTS against what upstream computes: streamed
 * blocks decode to the samples of one decode of the whole (the synthetic
 * decoder looks back 16 frames through sliding-window attention, so too
 * little history shows as seams), and a reference clip's codes are those of
 * one encoder pass over the whole clip, tail included.
 */

const dir = mkdtempSync(path.join(os.tmpdir(), 'lserve-qwen3-codec-'));
const codecConfig = parseCodecConfig(speechTokenizerConfig(TINY_QWEN3_TTS) as SpeechTokenizerConfigJson);
let open: OnnxSession;
let fixed: OnnxSession;

beforeAll(async () => {
  const file = (name: string, bytes: Uint8Array) => {
    writeFileSync(path.join(dir, name), bytes);
    return path.join(dir, name);
  };
  [open, fixed] = await Promise.all([
    OnnxSession.create(file('open.onnx', decoderGraph(TINY_QWEN3_TTS, 1, 'open')), { threads: 1 }),
    OnnxSession.create(file('fixed.onnx', decoderGraph(TINY_QWEN3_TTS, 1)), { threads: 1 }),
  ]);
});

afterAll(async () => {
  await Promise.all([open?.release(), fixed?.release()]);
  rmSync(dir, { recursive: true, force: true });
});

/** Seeded codes in [0, 2048). */
function randomFrames(count: number, seed: number): Int32Array[] {
  let state = seed;
  const next = () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32;
  return Array.from({ length: count }, () => Int32Array.from({ length: GROUPS }, () => Math.floor(next() * 2048)));
}

/** One decoder run over all of `frames` (padded to `length` with repeats of the last), clamped as upstream clamps. */
async function decodeWhole(session: OnnxSession, frames: Int32Array[], length = frames.length): Promise<Float32Array> {
  const codes = BigInt64Array.from({ length: length * GROUPS }, (_, i) => BigInt(frames[Math.min(Math.floor(i / GROUPS), frames.length - 1)]![i % GROUPS]!));
  const out = await session.runWith({ audio_codes: { type: 'int64', data: codes, dims: [1, length, GROUPS] } }, { fetch: ['waveform'] });
  return (out.waveform!.data as Float32Array).slice(0, frames.length * SAMPLES_PER_FRAME).map((x) => Math.max(-1, Math.min(1, x)));
}

/** Frames pushed one at a time as the talker makes them, blocks decoded as they are cut: the audio and the block sizes. */
async function stream(codec: CodecDecoder, frames: Int32Array[], context: Int32Array[] = []): Promise<{ samples: Float32Array; sizes: number[] }> {
  const blocks = new StreamingBlocks(STREAMING_BLOCKS, codec.maxBlock, context);
  const parts: Float32Array[] = [];
  const sizes: number[] = [];
  const drain = async (final: boolean) => {
    for (let block = blocks.take(final); block; block = blocks.take(final)) {
      sizes.push(block.to - block.from);
      parts.push(await codec.decode(block.frames, block.from, block.to));
    }
  };
  for (const frame of frames) {
    blocks.push(frame);
    await drain(false);
  }
  await drain(true);
  const samples = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (samples.set(p, at), at + p.length), 0);
  return { samples, sizes };
}

const maxAbsDiff = (a: Float32Array, b: Float32Array) => a.reduce((max, x, i) => Math.max(max, Math.abs(x - b[i]!)), 0);

describe('Qwen3-TTS codec decoder look-back', () => {
  it('reads the released decoder’s geometry: 1920 samples a frame, 2 + 8 × 71 + 10 = 580 frames of look-back', () => {
    const upstream = parseCodecConfig();
    expect(upstream.samplesPerFrame).toBe(1920);
    expect(upstream.encoderSamplesPerFrame).toBe(1920);
    expect(decoderLookBack(upstream.decoder)).toBe(580);
    // Only the frame-rate part changes with the window; the sample-rate convolutions add their 10 frames.
    expect(decoderLookBack({ ...upstream.decoder, slidingWindow: 12, layers: 3 })).toBe(2 + 3 * 11 + 10);
    // One block upsampling 1920×: its k7 input convolution reads 6 frames back, its k3840 transposed convolution 1, its residual units and output convolution a fraction.
    expect(decoderLookBack({ ...upstream.decoder, layers: 0, upsampleRates: [1920], upsamplingRatios: [] })).toBe(2 + 8);
    expect(() => parseCodecConfig({ decode_upsample_rate: 960 })).toThrow(/960/);
    // The fixture's config, as the loader reads it: 2 layers of an 8-frame window.
    expect(decoderLookBack(codecConfig.decoder)).toBe(2 + 2 * 7 + 10);
  });

  it('streams blocks that equal one decode of the whole, first audio after 2 frames, blocks doubling', async () => {
    const codec = new CodecDecoder(open, GROUPS, codecConfig);
    expect(codec.approximate).toBe(false);
    const frames = randomFrames(90, 1);
    const whole = await decodeWhole(open, frames);
    const streamed = await stream(codec, frames);
    expect(streamed.sizes).toEqual([2, 4, 8, 16, 32, 28]);
    expect(streamed.samples.length).toBe(whole.length);
    expect(maxAbsDiff(streamed.samples, whole)).toBeLessThan(1e-5);
  });

  it('shows seams when blocks get less history than the decoder looks back (as the old 13-frame context gave)', async () => {
    // A config that claims no attention: 12 frames of look-back against the graph's real 16.
    const short = new CodecDecoder(open, GROUPS, parseCodecConfig({ decoder_config: { num_hidden_layers: 0 } }));
    expect(short.lookBack).toBe(12);
    const frames = randomFrames(90, 1);
    const whole = await decodeWhole(open, frames);
    expect(maxAbsDiff((await stream(short, frames)).samples, whole)).toBeGreaterThan(1e-3);
  });

  it('decodes an in-context reference as history only: the audio after it is the whole decode’s, cut where upstream cuts', async () => {
    const codec = new CodecDecoder(open, GROUPS, codecConfig);
    const reference = randomFrames(30, 2);
    const generated = randomFrames(40, 3);
    const whole = await decodeWhole(open, [...reference, ...generated]);
    const streamed = await stream(codec, generated, reference);
    expect(streamed.samples.length).toBe(generated.length * SAMPLES_PER_FRAME);
    expect(maxAbsDiff(streamed.samples, whole.subarray(reference.length * SAMPLES_PER_FRAME))).toBeLessThan(1e-5);
  });

  it('through a graph traced at 25 frames: blocks up to half the window, exact while the utterance fits one window', async () => {
    const codec = new CodecDecoder(fixed, GROUPS, codecConfig);
    expect({ callFrames: codec.callFrames, maxBlock: codec.maxBlock, approximate: codec.approximate }).toEqual({ callFrames: 25, maxBlock: 12, approximate: true });
    const frames = randomFrames(25, 4);
    const streamed = await stream(codec, frames);
    expect(streamed.sizes).toEqual([2, 4, 8, 11]);
    expect(maxAbsDiff(streamed.samples, await decodeWhole(fixed, frames, 25))).toBeLessThan(1e-5);
    await expect(codec.decode(randomFrames(30, 5), 0, 30)).rejects.toThrow(/25/);
  });
});

describe('Qwen3-TTS reference clip encoding', () => {
  const clip = (seconds: number) => Float32Array.from({ length: Math.round(seconds * 24000) }, (_, i) => 0.4 * Math.sin(i * 0.031) + 0.1 * Math.sin(i * 0.77));

  async function session(length?: number): Promise<ort.InferenceSession> {
    return ort.InferenceSession.create(encoderGraph(1, length));
  }

  /** One run of the encoder over `samples` zero-padded to `length`: every frame it makes. */
  async function run(encoder: ort.InferenceSession, samples: Float32Array, length: number): Promise<Int32Array[]> {
    const data = new Float32Array(length);
    data.set(samples);
    const out = await encoder.run({ audio: new ort.Tensor('float32', data, [1, 1, length]) });
    return splitFrames(out.audio_codes!.data as BigInt64Array, out.audio_codes!.dims, GROUPS);
  }

  it('encodes the whole clip in one pass and keeps ceil(samples ÷ 1920) frames: the tail is not dropped', async () => {
    const encoder = await session();
    try {
      const samples = clip(2.3); // 55 200 samples: 28.75 frames
      const codes = await encodeReferenceCodes(encoder, samples, GROUPS, 1920);
      expect(codes).toHaveLength(29);
      expect(codes).toEqual(await run(encoder, samples, 29 * 1920));
      // Pieces encoded apart differ: each frame's codes read the frame before.
      const pieces = [...(await run(encoder, samples.subarray(0, 12 * 1920), 12 * 1920)), ...(await run(encoder, samples.subarray(12 * 1920), 17 * 1920))];
      expect(pieces).toHaveLength(29);
      expect(pieces).not.toEqual(codes);
      expect(codes.slice(0, 12)).toEqual(pieces.slice(0, 12));
    } finally {
      await encoder.release();
    }
  });

  it('through a graph traced at 1 s: a clip up to its whole frames in its one pass, a longer one refused naming ref_audio', async () => {
    const encoder = await session(24000);
    try {
      const short = clip(0.9); // 21 600 samples: 11.25 frames
      const codes = await encodeReferenceCodes(encoder, short, GROUPS, 1920);
      expect(codes).toHaveLength(12);
      expect(codes).toEqual((await run(encoder, short, 24000)).slice(0, 12));
      const refused = encodeReferenceCodes(encoder, clip(1.5), GROUPS, 1920);
      await expect(refused).rejects.toBeInstanceOf(PromptError);
      await expect(refused).rejects.toMatchObject({ param: 'ref_audio', message: expect.stringMatching(/1\.50 s.*at most 0\.96 s/) });
    } finally {
      await encoder.release();
    }
  });
});

describe('Qwen3-TTS in-context cloning through the runtime', () => {
  it('puts every frame of the reference clip in the prompt, the tail shorter than a frame included', async () => {
    const model = await tinyQwen3TtsModel('base');
    const files = Object.fromEntries(Object.entries(qwen3TtsFiles('base')).map(([role, file]) => [role, path.join(model, file)]));
    const installed: InstalledModel = {
      id: 'qwen3-tts-base-codec-test',
      entry: { id: 'qwen3-tts-base-codec-test', kind: 'tts', backend: 'onnx', description: 'synthetic', aliases: [], owned_by: 'test', license: 'apache-2.0', files: {}, defaults: {} },
      source: 'local',
      files,
      sizeBytes: 0,
    };
    const runtime = await qwen3TtsLoader.load(installed, { threads: 1 });
    try {
      const voice = (seconds: number) => ({ samples: Float32Array.from({ length: Math.round(seconds * 24000) }, (_, i) => 0.4 * Math.sin(i * 0.031)), text: 'Hi there.' });
      const text = 'One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen.';
      const frames = async (seconds: number) => (await runtime.synthesize({ text, speed: 1, seed: 1, reference: voice(seconds) }, () => undefined, new AbortController().signal)).frames;
      // The synthetic talker stops one frame earlier for each reference frame in its prompt: 2 s are 25 frames, 2.3 s 29 (28.75 rounded up).
      const [two, more] = [await frames(2), await frames(2.3)];
      expect(two).toBeGreaterThan(4);
      expect(two - more).toBe(29 - 25);
    } finally {
      await runtime.dispose();
    }
  });
});
