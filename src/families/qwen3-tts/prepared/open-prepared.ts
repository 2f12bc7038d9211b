import ort from 'onnxruntime-node';
import onnxProto from 'onnx-proto';
import type { TtsConfig } from '../config.js';
import { fileSha256, prepareCodePredictor } from './prepare-predictor.js';
import { UnpreparableGraph } from './predictor-weights.js';
import { talkerWithInt8Activations } from './talker-int8.js';

/**
 * Which talker and code predictor graphs the generator runs, opened. By
 * default the prepared ones: the KV-cached predictor and, for 4-bit
 * exports, both on MatMulNBits' int8-activation kernel. A graph written at
 * `lserve pull` is used when it was built from this very export (the
 * published graph's SHA-256 matches); otherwise it is prepared now, in
 * memory (a model pulled before lserve prepared graphs, or whose export
 * changed since); a predictor no cached graph can be built from runs as
 * published. The notes say which, and why, for the load line.
 */

export interface PreparedFile {
  file: string;
  /** SHA-256 of the published graph it was built from. */
  source: string;
}

export interface GraphPlan {
  /** 'published' runs the export's own code_predictor (the equal-codes tests and the benchmark compare the two). */
  predictor: 'cached' | 'published';
  /** MatMulNBits with int8 activations (accuracy_level 4) in the talker and the cached predictor. */
  int8: boolean;
  /** Where the talker and code predictor run: llama.cpp where pull converted them (frame-models.ts), else (and unset) ONNX Runtime. */
  loop?: 'llama' | 'onnx';
  /** What `lserve pull` prepared. */
  files?: { code_predictor?: PreparedFile; talker_cache?: PreparedFile; tok_decoder?: PreparedFile; talker_gguf?: PreparedFile; predictor_gguf?: PreparedFile; predictor_heads_gguf?: PreparedFile };
}

/** LSERVE_TTS_LOOP=onnx keeps the frame loop on ONNX Runtime where llama.cpp could run it. */
export const PREPARED_PLAN: GraphPlan = { predictor: 'cached', int8: true, loop: process.env.LSERVE_TTS_LOOP === 'onnx' ? 'onnx' : 'llama' };

export interface Opened {
  session: ort.InferenceSession;
  note?: string;
}

export interface OpenedPredictor extends Opened {
  /** Whether it is the KV-cached graph (else the published one). */
  cached: boolean;
}

export const seconds = (since: number) => `${((Date.now() - since) / 1000).toFixed(1)} s`;

/** A prepared file usable for `published`: recorded, and built from the same bytes. */
export async function current(prepared: PreparedFile | undefined, published: string): Promise<{ file?: string; stale: string }> {
  if (!prepared) return { stale: '' };
  if ((await fileSha256(published)) === prepared.source) return { file: prepared.file, stale: '' };
  return { stale: `the graph prepared at pull was built from another ${published.split(/[\\/]/).pop()}; ` };
}

export async function openPredictor(published: string, plan: GraphPlan, config: TtsConfig, options: ort.InferenceSession.SessionOptions, threads: number): Promise<OpenedPredictor> {
  const openPublished = async (note: string) => ({ session: await ort.InferenceSession.create(published, options), cached: false, note });
  if (plan.predictor === 'published') return openPublished('the published code predictor (asked for)');
  const { file, stale } = plan.int8 ? await current(plan.files?.code_predictor, published) : { stale: '' };
  if (file) {
    const session = await ort.InferenceSession.create(file, options);
    return { session, cached: true, note: 'the KV-cached code predictor prepared at pull' };
  }
  const started = Date.now();
  try {
    const prepared = await prepareCodePredictor(published, config.predictorDims, config.groups, threads, config.predictor, plan.int8);
    const session = await ort.InferenceSession.create(prepared.model, options);
    return { session, cached: true, note: `${stale}the KV-cached code predictor, prepared in memory in ${seconds(started)} (\`lserve pull\` the model again to keep it)` };
  } catch (error) {
    if (!(error instanceof UnpreparableGraph)) throw error;
    return openPublished(`${stale}the published code predictor: no KV-cached one can be built from it (${error.message})`);
  }
}

export async function openTalker(published: string, plan: GraphPlan, options: ort.InferenceSession.SessionOptions): Promise<Opened> {
  if (!plan.int8) return { session: await ort.InferenceSession.create(published, options) };
  const { file, stale } = await current(plan.files?.talker_cache, published);
  if (file) return { session: await ort.InferenceSession.create(file, options), note: 'the talker on int8 activations prepared at pull' };
  const started = Date.now();
  const int8Talker = await talkerWithInt8Activations(published);
  if (!int8Talker) return { session: await ort.InferenceSession.create(published, options) };
  const session = await ort.InferenceSession.create(onnxProto.onnx.ModelProto.encode(int8Talker.model).finish(), options);
  return { session, note: `${stale}the talker on int8 activations, prepared in memory in ${seconds(started)}` };
}
