import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import path from 'node:path';
import type { Loader, LoadOptions } from '../../core/loader.js';
import { ModelLoadError, ServerError } from '../../core/errors.js';
import { JobQueue } from '../../core/job-queue.js';
import type { InstalledModel } from '../../core/store.js';
import type { SpeechModelInfo, SpeechRuntime, SynthesisRequest } from '../../core/tasks/speak/synthesizer.js';
import type { SherpaTtsConfig, SherpaTtsInfo } from '../../runtimes/sherpa/protocol.js';
import { estimateSherpaMemory } from '../../runtimes/sherpa/supervisor.js';
import { SherpaSynthesizer, type SynthesizerOptions } from '../../runtimes/sherpa/synthesizer.js';

/**
 * Fast local speech synthesis (kind `tts`, backend `sherpa`): Piper voices
 * (VITS) and Kokoro-82M through sherpa-onnx's OfflineTts, in supervised
 * child processes (runtimes/sherpa: synthesizer.ts for the processes, one
 * per espeak-ng data folder, and why they are replaced every
 * REPLACE_AFTER_SYNTHESES syntheses).
 *
 * Model layouts, by the roles of the model's files (sherpa-onnx's own
 * packaging of each voice: its `vits-piper-*` and `kokoro-*` releases):
 * - Piper: `model` (the .onnx, with sherpa-onnx's metadata), `tokens`, the
 *   voice's `config` (piper's .onnx.json: speaker names) when present;
 * - Kokoro: `model`, `voices` (voices.bin), `tokens`;
 * - both: espeak-ng's data, as `espeak_*` roles inside one espeak-ng-data
 *   folder (the folder of `espeak_phontab` is what sherpa-onnx is given).
 *
 * Synthesis hands over each sentence as sherpa-onnx generates it. `speed` is
 * the model's own (Piper's length scale, Kokoro's speed input). An abort
 * stops the synthesis at the next sentence; the promise rejects at once with
 * the abort reason.
 */

/** The file role whose folder is espeak-ng's data folder. */
export const ESPEAK_DATA_ROLE = 'espeak_phontab';

export interface SherpaTtsLoader extends Loader<SpeechRuntime> {
  /** The synthesizer processes this loader runs (one per espeak-ng data folder in use). */
  readonly synthesizer: SherpaSynthesizer;
}

/** The sherpa-onnx config for an installed voice, from its file roles. */
export function ttsConfig(model: InstalledModel, threads: number): SherpaTtsConfig {
  const files = model.files;
  const kokoro = files.voices !== undefined;
  const required = kokoro ? ['model', 'voices', 'tokens'] : ['model', 'tokens'];
  const missing = required.filter((role) => !files[role]);
  if (missing.length) {
    throw new ModelLoadError(
      `Model '${model.id}' is not a voice sherpa-onnx can run: it has no ${missing.join(', ')} file (a Piper voice needs model and tokens; a Kokoro model model, voices and tokens; both espeak-ng data).`,
    );
  }
  for (const [role, file] of Object.entries(files)) {
    if (!existsSync(file)) throw new ModelLoadError(`Model '${model.id}' could not be loaded: its ${role} file ${file} is missing.`);
  }
  const dataDir = files[ESPEAK_DATA_ROLE] ? path.dirname(files[ESPEAK_DATA_ROLE]) : undefined;
  const common = { tokens: files.tokens!, ...(dataDir ? { dataDir } : {}), ...(files.lexicon ? { lexicon: files.lexicon } : {}) };
  return {
    model: {
      ...(kokoro ? { kokoro: { model: files.model!, voices: files.voices!, ...common } } : { vits: { model: files.model!, ...common } }),
      numThreads: threads,
      provider: 'cpu',
      debug: 0,
    },
    maxNumSentences: 1,
    // sherpa-onnx's own default: pauses longer than 0.2 s inside a block shrink to a fifth.
    silenceScale: 0.2,
  };
}

/**
 * The voice as the speech task sees it: sherpa's sample rate and speaker
 * count, speaker names from the voice's config (piper's speaker_id_map), else
 * the catalog's `defaults.speakers`, else `speaker_0…`; a single-speaker
 * Piper voice offers its one voice under its dataset's name.
 */
export function speechInfo(model: InstalledModel, reported: SherpaTtsInfo): SpeechModelInfo {
  const defaults = model.entry.defaults;
  const voiceConfig = readVoiceConfig(model);
  const count = Math.max(1, reported.numSpeakers);
  const listed = Array.isArray(defaults.speakers) ? defaults.speakers.filter((s): s is string => typeof s === 'string') : [];
  let speakers: string[];
  const byId = voiceConfig?.speaker_id_map;
  if (byId && typeof byId === 'object' && Object.keys(byId).length === count) {
    speakers = Object.entries(byId as Record<string, unknown>)
      .sort(([, a], [, b]) => Number(a) - Number(b))
      .map(([name]) => name);
  } else if (listed.length === count) {
    speakers = listed;
  } else if (count > 1) {
    speakers = Array.from({ length: count }, (_, i) => `speaker_${i}`);
  } else {
    speakers = [typeof voiceConfig?.dataset === 'string' && voiceConfig.dataset ? voiceConfig.dataset : 'default'];
  }
  const languages = Array.isArray(defaults.languages)
    ? defaults.languages.filter((l): l is string => typeof l === 'string')
    : typeof voiceConfig?.language === 'object' && voiceConfig.language !== null && typeof (voiceConfig.language as { name_english?: unknown }).name_english === 'string'
      ? [(voiceConfig.language as { name_english: string }).name_english]
      : [];
  const preferred = typeof defaults.default_speaker === 'string' ? defaults.default_speaker : undefined;
  return {
    sampleRate: reported.sampleRate,
    mode: 'preset',
    languages,
    speakers,
    defaultSpeaker: preferred && speakers.includes(preferred) ? preferred : speakers[0],
    rateControl: true,
  };
}

/** piper's <voice>.onnx.json: the `config` file, or the one sherpa-onnx ships beside the model. */
function readVoiceConfig(model: InstalledModel): Record<string, unknown> | undefined {
  const file = model.files.config ?? `${model.files.model}.json`;
  if (!existsSync(file)) return undefined;
  try {
    const parsed: unknown = JSON.parse(readFileSync(file, 'utf8'));
    return parsed && typeof parsed === 'object' ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    throw new ModelLoadError(`Model '${model.id}' could not be loaded: its voice config ${file} is not valid JSON.`);
  }
}

/** A loader with its own synthesizer processes (one per server: the default export below, or one per test). */
export function createTtsLoader(options: SynthesizerOptions = {}): SherpaTtsLoader {
  const synthesizer = new SherpaSynthesizer(options);
  const estimateMemory = (model: InstalledModel) => estimateSherpaMemory(model.sizeBytes);
  return {
    synthesizer,
    async load(model: InstalledModel, loadOptions: LoadOptions): Promise<SpeechRuntime> {
      const started = Date.now();
      // The speech task runs one synthesis per model at a time: give it the cores (ONNX Runtime's intra-op threads).
      const threads = loadOptions.threads > 0 ? loadOptions.threads : Math.min(4, availableParallelism());
      const { model: loaded, info: reported } = await synthesizer.load(model.id, ttsConfig(model, threads), loadOptions);
      let info: SpeechModelInfo;
      try {
        info = speechInfo(model, reported);
      } catch (error) {
        loaded.unload(new ServerError('The speech model could not be described.'));
        throw error;
      }
      loadOptions.log?.(
        `${model.id}: sherpa-onnx voice loaded in ${Date.now() - started} ms (${info.sampleRate} Hz, ${info.speakers.length} speaker(s), ${threads} threads, process ${loaded.pid})`,
      );
      let disposed = false;
      return {
        info,
        memoryBytes: estimateMemory(model),
        queue: new JobQueue(loadOptions.maxQueue ?? 16, `Speech synthesis model '${model.id}'`),
        async synthesize(request: SynthesisRequest, onAudio: (samples: Float32Array) => void, signal: AbortSignal): Promise<{ frames: number }> {
          if (disposed) throw new ServerError(`Model '${model.id}' was unloaded; load it again.`);
          const sid = request.speaker === undefined ? 0 : Math.max(0, info.speakers.indexOf(request.speaker));
          await synthesizer.synthesize(loaded, { text: request.text, sid, speed: request.speed }, onAudio, signal);
          // No codec frames: the `frames` cap does not apply to these models.
          return { frames: 0 };
        },
        async dispose() {
          if (disposed) return;
          disposed = true;
          loaded.unload(new ServerError(`Model '${model.id}' was unloaded while synthesising.`));
        },
      };
    },
    estimateMemory,
  };
}

export const sherpaTtsLoader: SherpaTtsLoader = createTtsLoader();
