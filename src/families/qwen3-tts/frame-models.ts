import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type ort from 'onnxruntime-node';
import onnxProto from 'onnx-proto';
import { EmbedDecoder } from '../../runtimes/llama/embed-decoder.js';
import { getRuntime, setLlamaAddonHome } from '../../runtimes/llama/runtime.js';
import { framePredictor, type FramePredictor } from './code-predictor.js';
import type { TtsConfig } from './config.js';
import { LlamaPredictor, LlamaTalker } from './llama/frame-decoders.js';
import { PredictorFront } from './llama/predictor-front.js';
import { NO_BINDING } from './llama/prepare-llama.js';
import { current, openPredictor, openTalker, type GraphPlan } from './prepared/open-prepared.js';
import { inlineExternalData } from './prepared/inline-external.js';
import { readPredictorWeights } from './prepared/predictor-weights.js';
import { OnnxTalker, type FrameTalker } from './talker.js';

/**
 * The talker and the code predictor the frame loop runs: on llama.cpp where
 * `lserve pull` converted them to GGUF (llama/convert.ts) from this very
 * export and the loaded llama.cpp binary can decode embeddings (lserve's
 * threadpool addon); else the ONNX graphs, prepared (open-prepared.ts).
 * The note says which, and why, for the load line.
 */

export interface FrameModels {
  talker: FrameTalker;
  predictor: FramePredictor;
  /** The talker's width: the rows it reads, the state it gives. */
  hidden: number;
  /** Where the loop runs. */
  loop: 'llama' | 'onnx';
  note: string;
}

export interface FrameModelSources {
  talker: string;
  predictor: string;
  config: TtsConfig;
  plan: GraphPlan;
  threads: number;
  /** The lserve home, where lserve's llama.cpp addon is found. */
  llamaHome?: string;
  /** The talker's KV cache in positions (prompt and frames), on llama.cpp. */
  talkerPositions: number;
}

/** The frame models, filling `codes` (the frame's 16 codes, code 0 set by the caller). */
export async function openFrameModels(sources: FrameModelSources, options: ort.InferenceSession.SessionOptions, codes: BigInt64Array): Promise<FrameModels> {
  let why = '';
  if (sources.plan.loop === 'llama') {
    const opened = await openLlama(sources, options, codes);
    if (typeof opened !== 'string') return opened;
    why = `${opened}; `;
  }
  const onnx = await openOnnx(sources, options, codes);
  return { ...onnx, note: why + onnx.note };
}

async function openOnnx(sources: FrameModelSources, options: ort.InferenceSession.SessionOptions, codes: BigInt64Array): Promise<FrameModels> {
  const { config, plan } = sources;
  const [predictor, talker] = await Promise.allSettled([openPredictor(sources.predictor, plan, config, options, sources.threads), openTalker(sources.talker, plan, options)]);
  if (predictor.status === 'rejected' || talker.status === 'rejected') {
    await Promise.all([predictor, talker].map((r) => (r.status === 'fulfilled' ? r.value.session.release() : undefined)));
    throw predictor.status === 'rejected' ? predictor.reason : (talker as PromiseRejectedResult).reason;
  }
  let onnxTalker: OnnxTalker;
  try {
    onnxTalker = OnnxTalker.of(talker.value.session, config);
  } catch (error) {
    await Promise.all([talker.value.session.release(), predictor.value.session.release()]);
    throw error;
  }
  return {
    talker: onnxTalker,
    predictor: framePredictor(predictor.value.session, predictor.value.cached, onnxTalker.width, codes),
    hidden: onnxTalker.width,
    loop: 'onnx',
    note: [talker.value.note, predictor.value.note].filter(Boolean).join('; '),
  };
}

/** The llama.cpp frame models, or why they cannot run. */
async function openLlama(sources: FrameModelSources, options: ort.InferenceSession.SessionOptions, codes: BigInt64Array): Promise<FrameModels | string> {
  const files = sources.plan.files;
  if (!files?.talker_gguf || !files.predictor_gguf || !files.predictor_heads_gguf) return 'no GGUF talker and code predictor were converted at pull (`lserve pull` the model again)';
  const [talkerFile, predictorFile] = await Promise.all([current(files.talker_gguf, sources.talker), current(files.predictor_gguf, sources.predictor)]);
  const headsFile = files.predictor_heads_gguf.source === files.predictor_gguf.source ? files.predictor_heads_gguf.file : undefined;
  if (!talkerFile.file || !predictorFile.file || !headsFile) return `${talkerFile.stale || predictorFile.stale}the GGUF files are not used`;
  if (sources.llamaHome) setLlamaAddonHome(sources.llamaHome);
  const llama = await getRuntime();
  const opened: Array<{ dispose(): Promise<void> }> = [];
  try {
    // Blocking decodes: the loop runs in the generator worker, which does nothing else meanwhile.
    const talker = await EmbedDecoder.open(llama, talkerFile.file, { contextSize: sources.talkerPositions, threads: sources.threads, blocking: true });
    if (!talker) return NO_BINDING;
    opened.push(talker);
    const groups = codes.length;
    const predictor = (await EmbedDecoder.open(llama, predictorFile.file, { contextSize: groups, threads: sources.threads, heads: headsFile, blocking: true }))!;
    opened.push(predictor);
    const published = onnxProto.onnx.ModelProto.decode(await readFile(sources.predictor));
    await inlineExternalData(published, path.dirname(sources.predictor));
    const front = await PredictorFront.open(readPredictorWeights(published, groups), published.opsetImport ?? [], groups, predictor.vocab, options);
    opened.push({ dispose: () => front.release() });
    return {
      talker: new LlamaTalker(talker),
      predictor: new LlamaPredictor(predictor, front, codes),
      hidden: talker.hiddenWidth,
      loop: 'llama',
      note: 'the talker and code predictor on llama.cpp (GGUF converted at pull)',
    };
  } catch (error) {
    await Promise.all(opened.map((o) => o.dispose()));
    // A damaged file or a failed load costs the speed, not the voice.
    return `the GGUF models did not load (${(error as Error).message})`;
  }
}
