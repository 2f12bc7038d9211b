import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CodecDecoder, StreamingCodecDecoder } from '../../src/families/qwen3-tts/codec.js';
import { parseCodecConfig, type SpeechTokenizerConfigJson } from '../../src/families/qwen3-tts/codec-config.js';
import { openCodecDecoder, prepareStreamingDecoder } from '../../src/families/qwen3-tts/prepared/prepare-decoder.js';
import { fileSha256 } from '../../src/families/qwen3-tts/prepared/prepare-predictor.js';
import { UnpreparableGraph } from '../../src/families/qwen3-tts/prepared/predictor-weights.js';
import { OnnxSession } from '../../src/runtimes/onnx/session.js';
import { decoderGraph, GROUPS, SAMPLES_PER_FRAME, speechTokenizerConfig, TINY_QWEN3_TTS } from '../fixtures/onnx/qwen3-tts.js';

/**
 * The 12 Hz codec decoder against upstream's PyTorch module
 * (scripts/golden/qwen3_tts_decoder.py ran Qwen3TTSTokenizerV2Decoder with
 * the fixture's weights on seeded codes): the plain graph gives its samples,
 * and the streaming graph built from the export's weights gives them too,
 * block by block from the zero state, each frame decoded once.
 */

interface Golden {
  frames: number;
  codes: number[][];
  samples_f32_base64: string;
}

const golden = JSON.parse(readFileSync(new URL('../golden/qwen3-tts-decoder/golden.json', import.meta.url), 'utf8')) as Golden;
const upstream = new Float32Array(Uint8Array.from(Buffer.from(golden.samples_f32_base64, 'base64')).buffer);
const frames = golden.codes.map((row) => Int32Array.from(row));
const codec = parseCodecConfig(speechTokenizerConfig(TINY_QWEN3_TTS) as SpeechTokenizerConfigJson);
const maxAbsDiff = (a: Float32Array, b: Float32Array) => a.reduce((max, x, i) => Math.max(max, Math.abs(x - b[i]!)), 0);

let dir: string;
/** The export's graph, traced at 25 frames as the onnx-community one is. */
let published: string;
const opened: Array<{ release(): Promise<void> }> = [];

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-qwen3-decoder-'));
  published = path.join(dir, 'tok_decoder.onnx');
  await writeFile(published, decoderGraph(TINY_QWEN3_TTS, 1));
});

afterAll(async () => {
  await Promise.all(opened.map((o) => o.release()));
  await rm(dir, { recursive: true, force: true });
});

/** Frames [0, frames.length) through a decoder stream in blocks of `sizes`, after `context` frames decoded as history only. */
async function streamed(decoder: StreamingCodecDecoder, sizes: number[], context = 0): Promise<Float32Array> {
  const stream = decoder.stream();
  const parts: Float32Array[] = [];
  let at = context;
  for (const size of sizes) {
    parts.push(await stream.decode(frames, at, at + size));
    at += size;
  }
  await stream.end();
  return Float32Array.from(parts.flatMap((p) => [...p]));
}

describe('Qwen3-TTS codec decoder against upstream', () => {
  it('the plain graph (the fixture export) gives upstream’s samples', async () => {
    const file = path.join(dir, 'open.onnx');
    await writeFile(file, decoderGraph(TINY_QWEN3_TTS, 1, 'open'));
    const session = await OnnxSession.create(file, { threads: 1 });
    opened.push(session);
    const codes = BigInt64Array.from(golden.codes.flat(), (c) => BigInt(c));
    const out = await session.runWith({ audio_codes: { type: 'int64', data: codes, dims: [1, golden.frames, GROUPS] } }, { fetch: ['waveform'] });
    const samples = out.waveform!.data as Float32Array;
    expect(samples.length).toBe(golden.frames * SAMPLES_PER_FRAME);
    expect(maxAbsDiff(samples, upstream)).toBeLessThan(1e-4);
    // Not a near-silent signal a loose comparison would pass.
    expect(Math.sqrt(upstream.reduce((a, x) => a + x * x, 0) / upstream.length)).toBeGreaterThan(0.1);
  });

  it('the streaming graph built from the export’s weights passes the check, then streams upstream’s samples in blocks of any size', async () => {
    const prepared = await prepareStreamingDecoder(published, codec, 1);
    opened.push(prepared.session);
    expect(prepared.difference).toBeLessThan(1e-5);
    expect(prepared.source).toBe(await fileSha256(published));
    const decoder = new StreamingCodecDecoder(prepared.session, GROUPS, codec);
    for (const sizes of [[12], [1, 1, 2, 3, 5], [2, 4, 6]]) expect(maxAbsDiff(await streamed(decoder, sizes), upstream)).toBeLessThan(1e-4);
    // An in-context reference's frames: decoded as history, their samples not returned.
    const after = await streamed(decoder, [3, 4], 5);
    expect(after.length).toBe(7 * SAMPLES_PER_FRAME);
    expect(maxAbsDiff(after, upstream.subarray(5 * SAMPLES_PER_FRAME))).toBeLessThan(1e-4);
  });

  it('refuses a decoder whose config or weights do not reproduce the export, saying why', async () => {
    // A config whose attention window is not the graph's: the samples move, and the check says by how much.
    const narrow = { ...codec, decoder: { ...codec.decoder, slidingWindow: 3 } };
    await expect(prepareStreamingDecoder(published, narrow, 1)).rejects.toThrow(/its samples are \S+ from the published graph's \(at most 0\.001 is accepted\)/);
    // An exporter that names no weight after its module.
    const model = onnxProto.onnx.ModelProto.decode(readFileSync(published));
    for (const [i, t] of model.graph!.initializer!.entries()) {
      const name = t.name!;
      t.name = `onnx::weight_${i}`;
      for (const n of model.graph!.node!) n.input = n.input!.map((input) => (input === name ? t.name! : input));
    }
    const anonymous = path.join(dir, 'anonymous', 'tok_decoder.onnx');
    await mkdir(path.dirname(anonymous), { recursive: true });
    await writeFile(anonymous, onnxProto.onnx.ModelProto.encode(model).finish());
    await expect(prepareStreamingDecoder(anonymous, codec, 1)).rejects.toThrow(UnpreparableGraph);
    const fallback = await openCodecDecoder(anonymous, undefined, codec, 1);
    opened.push(fallback.decoder);
    expect(fallback.decoder).toBeInstanceOf(CodecDecoder);
    expect(fallback.note).toMatch(/the published codec decoder: no streaming one can be built from it \(no initializer named like pre_transformer\.layers\.0\.self_attn\.q_proj\.weight\)/);
  });

  it('opens the graph prepared at pull for the export it was built from, and prepares in memory for another', async () => {
    const prepared = await prepareStreamingDecoder(published, codec, 1, true);
    await prepared.session.release();
    const file = path.join(dir, 'tok_decoder_streaming.onnx');
    await writeFile(file, prepared.model!);
    const own = await openCodecDecoder(published, { file, source: prepared.source }, codec, 1);
    opened.push(own.decoder);
    expect(own.note).toBe('the streaming codec decoder prepared at pull');
    const other = await openCodecDecoder(published, { file, source: 'another export' }, codec, 1);
    opened.push(other.decoder);
    expect(other.note).toMatch(/^the graph prepared at pull was built from another tok_decoder\.onnx; the streaming codec decoder, prepared in memory in [\d.]+ s/);
    expect(maxAbsDiff(await streamed(own.decoder as StreamingCodecDecoder, [4, 8]), upstream)).toBeLessThan(1e-4);
  });
});
