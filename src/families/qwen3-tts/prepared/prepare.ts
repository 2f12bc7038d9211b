import { mkdir, readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import type { Preparer } from '../../../core/loader.js';
import { MANIFEST, type InstalledModel, type Manifest, type ModelStore } from '../../../core/store.js';
import { writeFileWhole } from '../../../core/write-whole.js';
import { machineThreads } from '../../../runtimes/onnx/threads.js';
import { readCodecConfig } from '../codec-config.js';
import { parseTtsConfig, type GenerationConfigJson, type ModelConfigJson } from '../config.js';
import { graphFile } from '../files.js';
import { seconds, type PreparedFile } from './open-prepared.js';
import { prepareStreamingDecoder } from './prepare-decoder.js';
import { prepareCodePredictor } from './prepare-predictor.js';
import { UnpreparableGraph } from './predictor-weights.js';
import { talkerWithInt8Activations } from './talker-int8.js';
import { prepareLlamaDecoders, type LlamaAgreement } from '../llama/prepare-llama.js';

/**
 * Work done once when a Qwen3-TTS model is installed (`lserve pull`, or
 * `lserve pull <id>` again for one pulled before): the KV-cached code
 * predictor built from the published graph (prepare-predictor.ts), for
 * 4-bit exports the talker on int8 activations (talker-int8.ts), and the
 * streaming codec decoder (prepare-decoder.ts), written
 * under `<model dir>/prepared/` and recorded in the manifest as
 * `<graph>_prepared`, with `prepared_sources` naming the published graphs
 * (SHA-256) they were built from. The loader prefers them while those
 * match, and prepares in memory otherwise. A predictor or decoder that
 * cannot be rebuilt is said so here and runs as published.
 */

export const PREPARED_ROLES = {
  code_predictor: 'code_predictor_prepared',
  talker_cache: 'talker_cache_prepared',
  tok_decoder: 'tok_decoder_prepared',
  talker_gguf: 'talker_gguf_prepared',
  predictor_gguf: 'code_predictor_gguf_prepared',
  predictor_heads_gguf: 'code_predictor_heads_gguf_prepared',
  sources: 'prepared_sources',
} as const;

type PreparedGraph = Exclude<keyof typeof PREPARED_ROLES, 'sources'>;

/** The prepared graphs recorded for a model, with the sources they were built from. */
export async function preparedFiles(files: Record<string, string>): Promise<Partial<Record<PreparedGraph, PreparedFile>>> {
  const sources = files[PREPARED_ROLES.sources];
  if (!sources) return {};
  let shas: Record<string, string>;
  try {
    shas = JSON.parse(await readFile(sources, 'utf8')) as Record<string, string>;
  } catch {
    return {};
  }
  const entry = (graph: PreparedGraph) => {
    const file = files[PREPARED_ROLES[graph]];
    return file && typeof shas[graph] === 'string' ? { file, source: shas[graph] } : undefined;
  };
  return {
    code_predictor: entry('code_predictor'),
    talker_cache: entry('talker_cache'),
    tok_decoder: entry('tok_decoder'),
    talker_gguf: entry('talker_gguf'),
    predictor_gguf: entry('predictor_gguf'),
    predictor_heads_gguf: entry('predictor_heads_gguf'),
  };
}

/**
 * Writes the prepared graphs of the export whose files are `files` under
 * `<dir>/prepared/`, saying what it did; the manifest entries of what it
 * wrote (names relative to `dir`), none when there was nothing to prepare.
 */
export async function writePreparedGraphs(files: Record<string, string>, dir: string, say: (line: string) => void): Promise<Manifest['files']> {
  const predictor = graphFile(files, 'code_predictor');
  const talker = graphFile(files, 'talker_cache');
  if (!predictor || !talker || !files.config) return {};
  const json = async <T>(file: string | undefined) => (file ? (JSON.parse(await readFile(file, 'utf8')) as T) : ({} as T));
  const config = parseTtsConfig(await json<ModelConfigJson>(files.config), await json<GenerationConfigJson>(files.generation_config));
  await mkdir(path.join(dir, 'prepared'), { recursive: true });
  const recorded: Manifest['files'] = {};
  const sources: Record<string, string> = {};
  const write = async (graph: PreparedGraph, bytes: Uint8Array, source: string) => {
    const name = path.posix.join('prepared', `${graph}.onnx`);
    await writeFileWhole(path.join(dir, name), bytes);
    recorded[PREPARED_ROLES[graph]] = { name, size: bytes.byteLength };
    sources[graph] = source;
  };
  let started = Date.now();
  try {
    const prepared = await prepareCodePredictor(predictor, config.predictorDims, config.groups, machineThreads(0), config.predictor);
    await write('code_predictor', prepared.model, prepared.source);
    const agreement = `logits within ${prepared.difference.exact.toExponential(1)} of the published graph's`;
    const { prepared: moved, sampling } = prepared.difference;
    const int8 = prepared.quantized ? `; int8 activations: logits within ${(moved * 100).toFixed(2)} %, draws ${(sampling * 100).toFixed(2)} % apart` : '';
    say(`  code_predictor: KV-cached, one new row and one head a call (${agreement}${int8}; ${seconds(started)})`);
  } catch (error) {
    if (!(error instanceof UnpreparableGraph)) throw error;
    say(`  code_predictor: kept as published, no KV-cached one can be built from it (${error.message})`);
  }
  started = Date.now();
  const int8Talker = await talkerWithInt8Activations(talker);
  if (int8Talker) {
    await write('talker_cache', onnxProto.onnx.ModelProto.encode(int8Talker.model).finish(), int8Talker.source);
    say(`  talker_cache: 4-bit layers on int8 activations (${seconds(started)})`);
  }
  const decoder = graphFile(files, 'tok_decoder');
  if (decoder) {
    started = Date.now();
    try {
      const prepared = await prepareStreamingDecoder(decoder, await readCodecConfig(files), machineThreads(0), true);
      await prepared.session.release();
      await write('tok_decoder', prepared.model!, prepared.source);
      say(`  tok_decoder: streaming, each frame decoded once (samples within ${prepared.difference.toExponential(1)} of the published graph's; ${seconds(started)})`);
    } catch (error) {
      if (!(error instanceof UnpreparableGraph)) throw error;
      say(`  tok_decoder: kept as published, no streaming one can be built from it (${error.message})`);
    }
  }
  const residual = graphFile(files, 'residual_embed');
  if (residual) {
    started = Date.now();
    try {
      const llama = await prepareLlamaDecoders({ talker, predictor, residual }, config, path.join(dir, 'prepared'), machineThreads(0));
      const written = [
        ['talker_gguf', llama.talker.file, llama.talker.source],
        ['predictor_gguf', llama.predictor.file, llama.predictor.source],
        ['predictor_heads_gguf', llama.predictor.heads, llama.predictor.source],
      ] as const;
      for (const [graph, file, source] of written) {
        recorded[PREPARED_ROLES[graph]] = { name: path.posix.join('prepared', path.basename(file)), size: (await stat(file)).size };
        sources[graph] = source;
      }
      const { talker: t, predictor: p } = llama;
      const within = (a: LlamaAgreement) => `logits within ${(a.logits * 100).toFixed(2)} %, draws ${(a.sampling * 100).toFixed(2)} % apart`;
      say(`  talker and code_predictor: GGUF for llama.cpp (${[...new Set([...t.dims.types, ...p.dims.types])].join(', ')}; talker ${within(t.agreement)}; predictor ${within(p.agreement)}; ${seconds(started)})`);
    } catch (error) {
      // Pull goes on whatever stops the conversion: the loop runs on ONNX Runtime then.
      say(`  talker and code_predictor: kept on ONNX Runtime (${(error as Error).message})`);
    }
  }
  if (!Object.keys(recorded).length) return recorded;
  const sourcesName = path.posix.join('prepared', 'sources.json');
  const sourcesJson = `${JSON.stringify(sources, null, 2)}\n`;
  await writeFileWhole(path.join(dir, sourcesName), sourcesJson);
  recorded[PREPARED_ROLES.sources] = { name: sourcesName, size: Buffer.byteLength(sourcesJson) };
  return recorded;
}

async function prepare(store: ModelStore, installed: InstalledModel, say: (line: string) => void = () => {}): Promise<InstalledModel> {
  if (!graphFile(installed.files, 'code_predictor') || !graphFile(installed.files, 'talker_cache')) return installed;
  say(`Preparing ${installed.id}'s talker, code predictor and codec decoder for the CPU (once):`);
  const dir = store.modelDir(installed.id);
  const recorded = await writePreparedGraphs(installed.files, dir, say);
  if (!Object.keys(recorded).length) return installed;
  const manifest = JSON.parse(await readFile(path.join(dir, MANIFEST), 'utf8')) as Manifest;
  // Roles of an earlier preparation that this one did not write go (a talker no longer rewritten, say).
  for (const role of Object.values(PREPARED_ROLES)) delete manifest.files[role];
  Object.assign(manifest.files, recorded);
  await store.writeManifest(installed.id, manifest);
  return (await store.resolve(installed.id)) ?? installed;
}

export const qwen3TtsPreparer: Preparer = { prepare };
