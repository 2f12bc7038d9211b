import { existsSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Qwen3TtsRuntime } from '../../src/families/qwen3-tts/loader.js';
import { CodecDecoder } from '../../src/families/qwen3-tts/codec.js';
import { readCodecConfig, type CodecConfig } from '../../src/families/qwen3-tts/codec-config.js';
import { parseTtsConfig, type GenerationConfigJson, type ModelConfigJson, type TtsConfig } from '../../src/families/qwen3-tts/config.js';
import type { GraphPaths } from '../../src/families/qwen3-tts/generator.js';
import { PREPARED_PLAN, type GraphPlan } from '../../src/families/qwen3-tts/prepared/open-prepared.js';
import { openCodecDecoder } from '../../src/families/qwen3-tts/prepared/prepare-decoder.js';
import { PREPARED_ROLES, preparedFiles, writePreparedGraphs } from '../../src/families/qwen3-tts/prepared/prepare.js';
import { holdFor, Qwen3TtsRuntime as Runtime } from '../../src/families/qwen3-tts/runtime.js';
import { GeneratorWorker } from '../../src/families/qwen3-tts/worker-client.js';
import { JobQueue } from '../../src/core/job-queue.js';
import { OnnxSession } from '../../src/runtimes/onnx/session.js';
import { machineThreads } from '../../src/runtimes/onnx/threads.js';
import { QWEN3_TTS_0_6B, QWEN3_TTS_1_7B, qwen3TtsFiles, writeQwen3TtsModel, type Qwen3TtsShape } from '../../test/fixtures/onnx/qwen3-tts.js';
import type { TransformerShape } from '../../test/fixtures/onnx/qwen3-tts/graph.js';
import type { Int4Weights } from '../../test/fixtures/onnx/qwen3-tts/int4.js';

/**
 * The benchmark's models: Qwen3-TTS-12Hz-0.6B's dimensions with fp32 weights
 * (as cpu_fp32/) or with the talker's and predictor's linear layers in 4 bits
 * (MatMulNBits, block 32, symmetric: as cpu_int4/), accuracy_level unset (as
 * the export's quantizer writes it by default) or 4 (int8 activations).
 */

export const VARIANTS = {
  fp32: undefined,
  int4: { blockSize: 32 },
  'int4-acc4': { blockSize: 32, accuracyLevel: 4 },
  /** int4 at Qwen3-TTS-12Hz-1.7B's dimensions (QWEN3_TTS_1_7B). */
  '1.7b-int4': { blockSize: 32 },
} satisfies Record<string, Int4Weights | undefined>;
export type Variant = keyof typeof VARIANTS;

export const isVariant = (name: string): name is Variant => name in VARIANTS;

export function variantShape(variant: Variant): Qwen3TtsShape {
  const int4 = VARIANTS[variant];
  // A plain Qwen3 talker (no frame counter): llama.cpp's conversion reads it; runs end at maxFrames.
  const shape = { ...(variant.startsWith('1.7b') ? QWEN3_TTS_1_7B : QWEN3_TTS_0_6B), frameCounter: false };
  return int4 ? { ...shape, int4 } : shape;
}

export function variantDir(variant: Variant): string {
  const name = variant.startsWith('1.7b') ? `qwen3-tts-bench-${variant}` : `qwen3-tts-0.6b-bench${variant === 'fp32' ? '' : `-${variant}`}`;
  return fileURLToPath(new URL(`../../test/.cache/${name}`, import.meta.url));
}

/** Weights of the linear layers of one decoder layer (q, k, v, o, gate, up, down). */
function layerParams(s: TransformerShape): number {
  const attention = s.heads * s.headDim;
  return 2 * s.hidden * attention + 2 * s.hidden * s.kvHeads * s.headDim + 3 * s.hidden * s.intermediate;
}

/**
 * Weight bytes a frame reads: one talker step (every layer and the codec
 * head) and 15 predictor calls, each through every layer; the published
 * predictor also runs all 15 heads each call (it scores every group), the
 * cached one the head of the group it draws. Embedding tables are gathered
 * row by row and left out.
 */
export function weightBytes(variant: Variant, graphs: Graphs): { talker: number; predictor: number; frame: number } {
  const shape = variantShape(variant);
  const int4 = shape.int4;
  const perWeight = int4 ? 0.5 + 4 / int4.blockSize : 4; // nibble + its share of a float scale
  const talker = (shape.talker.layers * layerParams(shape.talker) + shape.talker.hidden * 3072) * perWeight;
  const layers = shape.predictor.layers * layerParams(shape.predictor) * perWeight;
  const head = shape.predictor.hidden * 2048 * perWeight;
  const predictor = 15 * layers + (graphs === 'published' ? 15 * 15 : 15) * head;
  return { talker, predictor, frame: talker + predictor };
}

/**
 * The graphs compared: 'prepared' is what the server runs (PREPARED_PLAN:
 * the KV-cached predictor and, for 4-bit weights, int8 activations, and the
 * streaming codec decoder, written beside the bench model once as `lserve
 * pull` writes them: pulledGraphs), 'published' the export's graphs as
 * shipped, 'fixed-decoder' the prepared talker and predictor with the
 * published decoder (each block decoded again with its look-back in the
 * export's 25-frame calls: the server before the streaming decoder).
 */
export const GRAPH_PLANS = {
  published: { predictor: 'published', int8: false, loop: 'onnx' },
  'fixed-decoder': { ...PREPARED_PLAN, loop: 'onnx' },
  prepared: { ...PREPARED_PLAN, loop: 'onnx' },
  llama: { ...PREPARED_PLAN, loop: 'llama' },
} satisfies Record<string, GraphPlan>;
export type Graphs = keyof typeof GRAPH_PLANS;

export const isGraphs = (name: string): name is Graphs => name in GRAPH_PLANS;

export interface BenchModel {
  dir: string;
  files: Record<string, string>;
  shape: Qwen3TtsShape;
  sizeBytes: number;
  writeSeconds: number;
}

export async function writeBenchModel(variant: Variant): Promise<BenchModel> {
  const started = performance.now();
  const dir = variantDir(variant);
  const shape = variantShape(variant);
  await writeQwen3TtsModel(dir, 'customvoice', shape);
  const files = Object.fromEntries(Object.entries(qwen3TtsFiles('customvoice')).map(([role, f]) => [role, path.join(dir, f)]));
  const sizeBytes = Object.values(files).reduce((sum, f) => sum + statSync(f).size, 0);
  return { dir, files, shape, sizeBytes, writeSeconds: (performance.now() - started) / 1000 };
}

const json = async <T>(file: string) => JSON.parse(await readFile(file, 'utf8')) as T;

export async function benchConfig(model: BenchModel): Promise<{ config: TtsConfig; codec: CodecConfig }> {
  const { files } = model;
  const config = parseTtsConfig(await json<ModelConfigJson>(files.config!), await json<GenerationConfigJson>(files.generation_config!));
  return { config, codec: await readCodecConfig(files) };
}

/**
 * What `lserve pull` prepares for the model (writePreparedGraphs), written
 * into its folder the first time and found there afterwards: the prepared
 * roles with absolute paths.
 */
export async function pulledGraphs(model: BenchModel): Promise<Record<string, string>> {
  const roles = Object.values(PREPARED_ROLES);
  const names: Record<string, string> = { [PREPARED_ROLES.sources]: 'sources.json', [PREPARED_ROLES.talker_gguf]: 'talker.gguf', [PREPARED_ROLES.predictor_gguf]: 'predictor.gguf', [PREPARED_ROLES.predictor_heads_gguf]: 'predictor-heads.gguf' };
  const found = Object.fromEntries(roles.map((role) => [role, path.join(model.dir, 'prepared', names[role] ?? `${role.replace(/_prepared$/, '')}.onnx`)]));
  if (Object.values(found).every((file) => existsSync(file))) return found;
  console.log('preparing the graphs once, as lserve pull does:');
  const recorded = await writePreparedGraphs(model.files, model.dir, (line) => console.log(line));
  return Object.fromEntries(Object.entries(recorded).map(([role, spec]) => [role, path.join(model.dir, spec.name)]));
}

export interface LoadedRuntime {
  runtime: Qwen3TtsRuntime;
  /** Which talker and code predictor run, and how long their preparation took (what the loader's load line says). */
  graphNotes: string;
}

/**
 * The runtime assembled from the parts qwen3TtsLoader assembles, as it does
 * (its thread plan, the prepared files of an `lserve pull` looked up the same
 * way), but for the graph plan, which the loader does not let one choose, and
 * the decoder's worker, given `decoderThreads` (the plan: the loop's own).
 */
export async function loadRuntime(model: BenchModel, graphs: Graphs, threads: number, decoderThreads = machineThreads(threads)): Promise<LoadedRuntime> {
  const files = graphs === 'published' ? model.files : { ...model.files, ...(await pulledGraphs(model)) };
  const { config, codec } = await benchConfig(model);
  const paths = Object.fromEntries(['text_embed', 'codec_embed', 'talker_cache', 'code_predictor', 'residual_embed'].map((g) => [g, files[g]!])) as unknown as GraphPaths;
  const [generator, decoder] = await Promise.all([
    GeneratorWorker.start({
      paths,
      threads: machineThreads(threads),
      config,
      referenceSamplesPerFrame: codec.encoderSamplesPerFrame,
      graphs: { ...GRAPH_PLANS[graphs], files: await preparedFiles(files) },
      tokenizer: { tokenizer: files.tokenizer, vocab: files.vocab, merges: files.merges, tokenizer_config: files.tokenizer_config },
    }),
    graphs === 'prepared' || graphs === 'llama'
      ? openCodecDecoder(files.tok_decoder!, (await preparedFiles(files)).tok_decoder, codec, decoderThreads)
      : OnnxSession.create(files.tok_decoder!, { threads: decoderThreads }).then((session) => ({ decoder: new CodecDecoder(session, config.groups, codec), note: 'the published codec decoder' })),
  ]);
  const runtime = new Runtime(generator, decoder.decoder, config, 0, new JobQueue(1, 'Speech synthesis model (bench)'));
  runtime.holdBlocks = holdFor(generator.loop, machineThreads(threads), decoderThreads);
  return { runtime, graphNotes: `${generator.graphNotes}, ${decoder.note}` };
}
