import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Loader, LoadOptions } from '../../core/loader.js';
import { ModelLoadError } from '../../core/errors.js';
import { JobQueue } from '../../core/job-queue.js';
import type { InstalledModel } from '../../core/store.js';
import { machineThreads } from '../../runtimes/onnx/threads.js';
import { CodecDecoder } from './codec.js';
import { readCodecConfig, type CodecConfig } from './codec-config.js';
import { parseTtsConfig, type GenerationConfigJson, type ModelConfigJson } from './config.js';
import type { GraphPaths } from './generator.js';
import { holdFor, Qwen3TtsRuntime } from './runtime.js';
import { GeneratorWorker } from './worker-client.js';
import { graphFile, GRAPHS } from './files.js';
import { preparedFiles } from './prepared/prepare.js';
import { PREPARED_PLAN } from './prepared/open-prepared.js';
import { llamaAddonHome } from '../../runtimes/llama/runtime.js';
import { openCodecDecoder } from './prepared/prepare-decoder.js';

/**
 * Loads a Qwen3-TTS export in the onnx-community layout: the graphs
 * (`cpu_fp32/<graph>.onnx`, roles named after the graphs), config.json,
 * generation_config.json, the tokenizer files and, where it is there, the
 * speech tokenizer's speech_tokenizer/config.json (upstream's decoder
 * geometry without it). The voice mode comes from
 * config.json's tts_model_type (CustomVoice and VoiceDesign exports have the
 * same files).
 */

const CLONE_GRAPHS = ['tok_encoder', 'speaker_encoder'] as const;

async function readJson<T>(file: string | undefined, role: string, id: string): Promise<T> {
  if (!file) throw new ModelLoadError(`Qwen3-TTS model '${id}' has no '${role}' file.`);
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch (error) {
    throw new ModelLoadError(`Qwen3-TTS model '${id}': cannot read ${path.basename(file)}: ${(error as Error).message}`);
  }
}

async function codecConfig(files: Record<string, string>, id: string): Promise<CodecConfig> {
  try {
    return await readCodecConfig(files);
  } catch (error) {
    throw new ModelLoadError(`Qwen3-TTS model '${id}': ${(error as Error).message}`);
  }
}

async function load(installed: InstalledModel, options: LoadOptions): Promise<Qwen3TtsRuntime> {
  const { files, id } = installed;
  const [configJson, generationJson] = await Promise.all([
    readJson<ModelConfigJson>(files.config, 'config', id),
    files.generation_config ? readJson<GenerationConfigJson>(files.generation_config, 'generation_config', id) : Promise.resolve({}),
  ]);
  let config;
  try {
    config = parseTtsConfig(configJson, generationJson);
  } catch (error) {
    throw new ModelLoadError(`Qwen3-TTS model '${id}': ${(error as Error).message}`);
  }
  const needed = config.mode === 'clone' ? [...GRAPHS, ...CLONE_GRAPHS] : [...GRAPHS];
  const paths: Record<string, string> = {};
  for (const graph of needed) {
    const file = graphFile(files, graph);
    if (!file) throw new ModelLoadError(`Qwen3-TTS model '${id}' lacks the ${graph} graph (${graph}.onnx).`);
    paths[graph] = file;
  }
  if (!files.tokenizer && !(files.vocab && files.merges)) throw new ModelLoadError(`Qwen3-TTS model '${id}' has neither tokenizer.json nor vocab.json and merges.txt.`);
  const { tok_decoder: decoderFile, ...generatorPaths } = paths;
  const codec = await codecConfig(files, id);

  const started = Date.now();
  // The thread plan (runtimes/onnx/threads.ts): the frame loop's graphs run one after another and share the
  // budget; the decoder, working beside the loop, has the budget too (measured: a smaller share only delayed the first audio).
  const threads = machineThreads(options.threads);
  const prepared = await preparedFiles(files);
  const [generator, decoder] = await Promise.allSettled([
    GeneratorWorker.start({
      paths: generatorPaths as unknown as GraphPaths,
      threads,
      referenceSamplesPerFrame: codec.encoderSamplesPerFrame,
      config,
      graphs: { ...PREPARED_PLAN, files: prepared },
      llamaHome: llamaAddonHome(),
      tokenizer: { tokenizer: files.tokenizer, vocab: files.vocab, merges: files.merges, tokenizer_config: files.tokenizer_config },
    }),
    openCodecDecoder(decoderFile!, prepared.tok_decoder, codec, threads),
  ]);
  if (generator.status === 'rejected' || decoder.status === 'rejected') {
    await Promise.all([generator.status === 'fulfilled' && generator.value.release(), decoder.status === 'fulfilled' && decoder.value.decoder.release()]);
    const reason = generator.status === 'rejected' ? generator.reason : (decoder as PromiseRejectedResult).reason;
    throw new ModelLoadError(`Qwen3-TTS model '${id}' failed to load: ${(reason as Error).message ?? reason}`);
  }
  const codecDecoder = decoder.value.decoder;
  if (codecDecoder instanceof CodecDecoder && codecDecoder.approximate) {
    options.log?.(
      `qwen3-tts ${id}: tok_decoder takes ${codecDecoder.callFrames} frames a call and its audio depends on ${codecDecoder.lookBack} frames before; ` +
        `streamed blocks get ${codecDecoder.callFrames - codecDecoder.maxBlock}+ frames of history, so their first samples approximate a decode of the whole`,
    );
  }
  // ORT holds the weights plus working buffers and the KV cache: about twice the graphs. On llama.cpp, the
  // GGUF files stand for the talker and predictor graphs (their KV cache, allocated whole, about the talker's size).
  const onLlama = generator.value.loop === 'llama';
  const held = onLlama
    ? [...Object.entries(paths).filter(([graph]) => graph !== 'talker_cache' && graph !== 'code_predictor').map(([, f]) => f), prepared.talker_gguf!.file, prepared.predictor_gguf!.file, prepared.predictor_heads_gguf!.file]
    : Object.values(paths);
  const sizes = await Promise.all(held.map(async (f) => (await stat(f)).size));
  const memoryBytes = 2 * sizes.reduce((a, b) => a + b, 0);
  const notes = [generator.value.graphNotes, decoder.value.note].filter(Boolean).join(', ');
  options.log?.(`qwen3-tts ${id}: ${config.mode} model loaded in ${Date.now() - started} ms; ${notes}`);
  const defaultSpeaker = installed.entry.defaults.default_speaker;
  const queue = new JobQueue(options.maxQueue ?? 16, `Speech synthesis model '${id}'`);
  const runtime = new Qwen3TtsRuntime(generator.value, codecDecoder, config, memoryBytes, queue, typeof defaultSpeaker === 'string' ? defaultSpeaker : undefined, options.log);
  runtime.holdBlocks = holdFor(generator.value.loop, threads, threads);
  return runtime;
}

export const qwen3TtsLoader: Loader<Qwen3TtsRuntime> = { load };
export { Qwen3TtsRuntime } from './runtime.js';
