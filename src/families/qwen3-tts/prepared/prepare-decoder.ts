import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import onnxProto from 'onnx-proto';
import { OnnxSession } from '../../../runtimes/onnx/session.js';
import { CodecDecoder, StreamingCodecDecoder, type BlockDecoder } from '../codec.js';
import type { CodecConfig } from '../codec-config.js';
import { buildDecoderGraph, type DecoderWeights } from './decoder-graph.js';
import { current, seconds, type PreparedFile } from './open-prepared.js';
import { UnpreparableGraph, type Tensor } from './predictor-weights.js';

/**
 * The streaming codec decoder (decoder-graph.ts) built from the published
 * tok_decoder's weights, found by their module names (with whatever prefix
 * the export gives them), and accepted only if it reproduces the published
 * graph: probe codes decoded in blocks of 1, 2, 4, 8 and 10 frames from the
 * zero state must give the published decode's samples within
 * DECODER_CHECK_TOLERANCE of full scale. A graph that does not read that way or
 * misses is refused with the reason (the published graph is used then).
 */

/** Largest difference from the published decode's samples, of full scale (±1). */
export const DECODER_CHECK_TOLERANCE = 1e-3;
const PROBE_BLOCKS = [1, 2, 4, 8, 10];
const PROBE_SEED = 1234;
/** Codes per group of the released decoder (its codebook_size); every export has it. */
const CODEBOOK_SIZE = 2048;

export interface PreparedDecoder {
  /** The streaming graph's session (on `threads` threads). */
  session: OnnxSession;
  /** The graph's bytes, when asked to keep them (to write at pull). */
  model?: Uint8Array;
  /** SHA-256 of the published graph. */
  source: string;
  /** Largest difference from the published graph's samples on the probe. */
  difference: number;
}

const escape = (text: string) => text.replace(/[.]/g, '\\.');

/** The published graph's parameters by module name; the attention heads' width from q_proj's rows. */
export function readDecoderWeights(model: onnxProto.onnx.IModelProto, heads: number): { weight: DecoderWeights; headDim: number } {
  const initializers = model.graph?.initializer ?? [];
  const weight = (param: string): Tensor => {
    const pattern = new RegExp(`(^|\\.)${escape(param)}$`);
    const found = initializers.filter((t) => pattern.test(t.name ?? ''));
    if (found.length !== 1) throw new UnpreparableGraph(found.length ? `more than one initializer is named like ${param}` : `no initializer named like ${param}`);
    if (found[0]!.dataLocation === onnxProto.onnx.TensorProto.DataLocation.EXTERNAL) throw new UnpreparableGraph(`${found[0]!.name} is stored outside the graph`);
    return found[0]!;
  };
  const rows = Number(weight('pre_transformer.layers.0.self_attn.q_proj.weight').dims?.[0] ?? 0);
  if (!rows || rows % heads !== 0) throw new UnpreparableGraph(`q_proj's ${rows} rows are not ${heads} heads`);
  return { weight, headDim: rows / heads };
}

export async function prepareStreamingDecoder(published: string, codec: CodecConfig, threads: number, keepModel = false): Promise<PreparedDecoder> {
  const bytes = await readFile(published);
  const source = createHash('sha256').update(bytes).digest('hex');
  const { weight, headDim } = readDecoderWeights(onnxProto.onnx.ModelProto.decode(bytes), codec.decoder.heads);
  let model: Uint8Array;
  try {
    model = buildDecoderGraph(weight, { ...codec.decoder, headDim }, { streaming: true });
  } catch (error) {
    throw error instanceof UnpreparableGraph ? error : new UnpreparableGraph((error as Error).message);
  }
  const name = `${published} (streaming)`;
  // Each session takes its bytes (the published ones are read once; the weights were copied into `model`); a copy stays when they are to be written.
  const [reference, streaming] = await Promise.all([
    OnnxSession.create(published, { threads }, bytes),
    OnnxSession.create(name, { threads }, keepModel ? Uint8Array.prototype.slice.call(model) : model).catch((error: Error) => new UnpreparableGraph(`the streaming graph does not load (${error.message.split('\n')[0]})`)),
  ]);
  try {
    if (streaming instanceof Error) throw streaming;
    const difference = await compare(reference, new StreamingCodecDecoder(streaming, codec.decoder.quantizers, codec), codec);
    if (!(difference <= DECODER_CHECK_TOLERANCE)) throw new UnpreparableGraph(`its samples are ${difference.toExponential(1)} from the published graph's (at most ${DECODER_CHECK_TOLERANCE} is accepted)`);
    return { session: streaming, ...(keepModel ? { model } : {}), source, difference };
  } catch (error) {
    if (!(streaming instanceof Error)) await streaming.release();
    throw error;
  } finally {
    await reference.release();
  }
}

/** Largest sample difference between the published decode of the probe and the streaming decoder's, block by block. */
async function compare(reference: OnnxSession, streaming: StreamingCodecDecoder, codec: CodecConfig): Promise<number> {
  const groups = codec.decoder.quantizers;
  const total = PROBE_BLOCKS.reduce((a, b) => a + b, 0);
  const traced = reference.inputShape()[1];
  const length = typeof traced === 'number' && traced > 0 ? traced : total;
  if (length < total) throw new UnpreparableGraph(`the published graph decodes ${length} frames a call, fewer than the probe's ${total}`);
  let state = PROBE_SEED;
  const frames = Array.from({ length }, () => Int32Array.from({ length: groups }, () => (state = (Math.imul(state, 1103515245) + 12345) >>> 0) % CODEBOOK_SIZE));
  const codes = BigInt64Array.from({ length: length * groups }, (_, i) => BigInt(frames[Math.floor(i / groups)]![i % groups]!));
  const out = await reference.runWith({ [reference.inputName]: { type: 'int64', data: codes, dims: [1, length, groups] } }, { fetch: [reference.outputName] });
  const expected = out[reference.outputName]!.data as Float32Array;
  const stream = streaming.stream();
  let difference = 0;
  let at = 0;
  try {
    for (const count of PROBE_BLOCKS) {
      const samples = await stream.decode(frames, at, at + count);
      if (samples.length !== count * codec.samplesPerFrame) throw new UnpreparableGraph(`the streaming graph made ${samples.length} samples of ${count} frames`);
      const offset = at * codec.samplesPerFrame;
      for (let i = 0; i < samples.length; i++) difference = Math.max(difference, Math.abs(samples[i]! - Math.max(-1, Math.min(1, expected[offset + i]!))));
      at += count;
    }
  } finally {
    await stream.end();
  }
  return difference;
}

/**
 * The codec decoder a loaded model runs: the streaming one written at pull
 * when it was built from this very tok_decoder, else one prepared now in
 * memory, else the published graph (re-decoding each block's look-back;
 * `LSERVE_TTS_DECODER=published` asks for it). The note says which, and
 * why, for the load line.
 */
export async function openCodecDecoder(published: string, prepared: PreparedFile | undefined, codec: CodecConfig, threads: number): Promise<{ decoder: BlockDecoder; note: string }> {
  const groups = codec.decoder.quantizers;
  // A decoder that refuses its session (a graph whose shapes do not fit) leaves no worker behind.
  const wrap = <D extends BlockDecoder>(session: OnnxSession, make: (session: OnnxSession) => D): D => {
    try {
      return make(session);
    } catch (error) {
      void session.release();
      throw error;
    }
  };
  const publishedDecoder = async (note: string) => ({ decoder: wrap(await OnnxSession.create(published, { threads }), (s) => new CodecDecoder(s, groups, codec)), note });
  const streamingDecoder = (session: OnnxSession) => wrap(session, (s) => new StreamingCodecDecoder(s, groups, codec));
  if (process.env.LSERVE_TTS_DECODER === 'published') return publishedDecoder('the published codec decoder (LSERVE_TTS_DECODER=published)');
  const { file, stale } = await current(prepared, published);
  if (file) return { decoder: streamingDecoder(await OnnxSession.create(file, { threads })), note: 'the streaming codec decoder prepared at pull' };
  const started = Date.now();
  try {
    const { session, difference } = await prepareStreamingDecoder(published, codec, threads);
    return {
      decoder: streamingDecoder(session),
      note: `${stale}the streaming codec decoder, prepared in memory in ${seconds(started)} (samples within ${difference.toExponential(1)} of the published graph's; \`lserve pull\` the model again to keep it)`,
    };
  } catch (error) {
    if (!(error instanceof UnpreparableGraph)) throw error;
    return publishedDecoder(`${stale}the published codec decoder: no streaming one can be built from it (${error.message})`);
  }
}
