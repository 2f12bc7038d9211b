import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Engine } from '../../src/compose.js';
import { MANIFEST, type Manifest } from '../../src/core/store.js';
import { syntheticPiperVoice } from '../../test/fixtures/onnx/piper.js';
import { benchWhisperOnnx, benchWhisperOnnxQ8 } from '../asr/models.js';
import { benchChatModel } from '../text/models.js';
import { pulledGraphs, writeBenchModel } from '../tts/model.js';
import { benchWhisperSaysHelloWorld } from './whisper.js';

/**
 * The realtime benchmark's models, registered into a fresh home as `lserve
 * pull <path> --kind` registers them: the Qwen3-0.6B-sized chat model
 * (bench/text/models.ts), a whisper-base-sized one that always says "Hello
 * world." (./whisper.ts) and one voice: the synthetic
 * Piper voice (test/fixtures/onnx/piper.ts: sherpa-onnx's real front end
 * and process, a tone generator for a network) or Qwen3-TTS-12Hz-0.6B-sized
 * with 4-bit weights (bench/tts/model.ts), with the prepared graphs `lserve
 * pull` records, as the server runs it.
 */

export const CHAT = 'qwen3-synth';
export const WHISPER = 'whisper';
export const VOICE = 'voice';

export const VOICES = ['piper', 'qwen3-tts'] as const;
export type VoiceName = (typeof VOICES)[number];

/**
 * The Whisper: fp32 as the catalog's `whisper-base`, or with the encoder's and decoder's MatMuls in int8 as
 * `whisper-base-q8`, named by the session (as `WHISPER`); or `default`: both installed as those catalog
 * entries (a user who pulled both) and the session naming none, so that the server chooses as it does for
 * a voice app that leaves the choice to it.
 */
export const RECOGNIZERS = ['whisper-base', 'whisper-base-q8', 'default'] as const;
export type RecognizerName = (typeof RECOGNIZERS)[number];

export async function registerModels(engine: Engine, voice: VoiceName, recognizer: RecognizerName = 'whisper-base'): Promise<void> {
  await engine.store.registerLocal(benchChatModel(), { kind: 'chat', id: CHAT });
  if (recognizer === 'default') {
    await installAsCatalogModel(engine, 'whisper-base', await benchWhisperSaysHelloWorld(await benchWhisperOnnx()));
    await installAsCatalogModel(engine, 'whisper-base-q8', await benchWhisperSaysHelloWorld(await benchWhisperOnnxQ8()));
  } else {
    const whisper = recognizer === 'whisper-base-q8' ? await benchWhisperOnnxQ8() : await benchWhisperOnnx();
    await engine.store.registerDirectory(await benchWhisperSaysHelloWorld(whisper), { kind: 'asr', id: WHISPER });
  }
  if (voice === 'piper') {
    await engine.store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: VOICE });
    return;
  }
  const model = await writeBenchModel('int4');
  await engine.store.registerDirectory(model.dir, { kind: 'tts', id: VOICE });
  await recordPreparedGraphs(engine, VOICE, await pulledGraphs(model));
}

/**
 * Records the prepared graphs in the model's manifest, as `lserve pull`'s
 * preparation does (engine.prepare), but pointing at the ones bench/tts.ts
 * prepared once beside the bench model instead of writing another 0.5 GB
 * into the home.
 */
async function recordPreparedGraphs(engine: Engine, id: string, graphs: Record<string, string>): Promise<void> {
  const file = path.join(engine.store.modelDir(id), MANIFEST);
  const manifest = JSON.parse(await readFile(file, 'utf8')) as Manifest;
  for (const [role, graph] of Object.entries(graphs)) manifest.files[role] = { name: path.basename(graph), size: (await stat(graph)).size, path: graph };
  await engine.store.writeManifest(id, manifest);
}

/** The model folder `dir` installed as the catalog's entry `id`, as `lserve pull id` leaves it (its manifest naming the files in place). */
async function installAsCatalogModel(engine: Engine, id: string, dir: string): Promise<void> {
  const staged = `${id}-files`;
  const { model } = await engine.store.registerDirectory(dir, { kind: 'asr', id: staged });
  const { files } = JSON.parse(await readFile(path.join(engine.store.modelDir(model.id), MANIFEST), 'utf8')) as Manifest;
  await engine.store.writeManifest(id, { id, source: 'catalog', installedAt: new Date().toISOString(), files });
  await engine.store.remove(staged);
}
