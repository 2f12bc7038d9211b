import { existsSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import path from 'node:path';
import type { Loader, LoadOptions } from '../../core/loader.js';
import { ModelLoadError, ServerError } from '../../core/errors.js';
import { JobQueue } from '../../core/job-queue.js';
import type { InstalledModel } from '../../core/store.js';
import type { SpeechModelInfo, SpeechRuntime, SynthesisRequest } from '../../core/tasks/speak/synthesizer.js';
import { SherpaProcess, type ChildHandle, type ChildJob } from '../../runtimes/sherpa/process.js';
import type { SherpaTtsConfig, SherpaTtsInfo, SynthesizerChildMessage, SynthesizerParentMessage } from '../../runtimes/sherpa/protocol.js';
import { SYNTHESIZER_CHILD_SOURCE } from '../../runtimes/sherpa/synthesizer-child.js';

/**
 * Fast local speech synthesis (kind `tts`, backend `sherpa`): Piper voices
 * (VITS) and Kokoro-82M through sherpa-onnx's OfflineTts, in a supervised
 * child process (process.ts: a bad model's _Exit or a crash kills the child,
 * never the server; a synthesis the child takes down fails with a 500 and the
 * next one starts a new child).
 *
 * Model layouts, by the roles of the model's files (sherpa-onnx's own
 * packaging of each voice: its `vits-piper-*` and `kokoro-*` releases):
 * - Piper: `model` (the .onnx, with sherpa-onnx's metadata), `tokens`, the
 *   voice's `config` (piper's .onnx.json: speaker names) when present;
 * - Kokoro: `model`, `voices` (voices.bin), `tokens`;
 * - both: espeak-ng's data, as `espeak_*` roles inside one espeak-ng-data
 *   folder (the folder of `espeak_phontab` is what sherpa-onnx is given).
 *
 * espeak-ng is initialised once per process, with the data folder of the
 * first voice loaded; so voices with different data folders (the catalog's
 * voices each carry the few English files they need) get a process each.
 *
 * Synthesis hands over each sentence as sherpa-onnx generates it (one IPC
 * message per block, the samples copied once into it). `speed` is the
 * model's own (Piper's length scale, Kokoro's speed input). An abort stops
 * the synthesis at the next sentence; the promise rejects at once with the
 * abort reason.
 *
 * A synthesizer process is replaced by a fresh one every
 * REPLACE_AFTER_SYNTHESES syntheses (process.ts: the fresh one is loaded
 * before it takes over, so no request waits for it). Why: sherpa-onnx's
 * phonemizer (piper-phonemize) sets espeak-ng's voice for every text it
 * phonemizes, and espeak-ng then copies the voice (≈ 1.4 KB) into its wave
 * generator's queue, to be freed when audio is generated — which never
 * happens, as only phonemes are asked for. Measured through the server
 * (bench/speech-memory.ts, bench/speech-memory.md), the process grew ≈ 4.7 KB a
 * request of one or two syntheses without levelling off: the copies, and
 * the heap they keep from being returned.
 */

/** The file role whose folder is espeak-ng's data folder. */
export const ESPEAK_DATA_ROLE = 'espeak_phontab';

export interface SynthesizerOptions {
  /** How long a model config whose load killed the synthesizer process is refused without retrying (default 30 s). */
  loadRetryDelayMs?: number;
  log?: (message: string) => void;
  /** Called when a synthesizer process is started again after it died. */
  onRestart?: (label: string) => void;
  /** The sherpa-onnx-node module the process loads (default: the installed package). */
  sherpaModule?: string;
  /** Syntheses a process runs before a fresh one takes over (default REPLACE_AFTER_SYNTHESES). */
  replaceAfterSyntheses?: number;
}

/** ≈ 3 MB of leaked espeak-ng voices (see above) against a process start and a load per voice, in the background. */
export const REPLACE_AFTER_SYNTHESES = 2000;

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

type SynthProcess = SherpaProcess<SherpaTtsConfig, SherpaTtsInfo, SynthesizerParentMessage, SynthesizerChildMessage>;

/** One synthesis in a child: it settles exactly once (done, error, abort, the child's death, unload). */
class SynthesisJob implements ChildJob {
  private settled = false;

  constructor(
    readonly id: number,
    readonly key: string,
    readonly child: ChildHandle,
    private readonly host: SynthProcess,
    private readonly onAudio: (samples: Float32Array) => void,
    private readonly settle: (error?: unknown) => void,
  ) {}

  audio(samples: Float32Array): void {
    if (this.settled) return;
    try {
      this.onAudio(samples);
    } catch (error) {
      // The caller's sink failed (a closed response…): stop the synthesis, report its error.
      this.fail(error, true);
    }
  }

  done(): void {
    this.finish(true);
  }

  fail(error: unknown, tellChild: boolean): void {
    this.finish(tellChild, error);
  }

  private finish(tellChild: boolean, error?: unknown): void {
    if (this.settled) return;
    this.settled = true;
    if (tellChild && error !== undefined) this.host.send(this.child, { t: 'abort', id: this.id });
    this.host.forget(this);
    this.settle(error);
  }
}

/** The synthesizer processes, one per espeak-ng data folder, and the syntheses running in them. */
export class SherpaSynthesizer {
  private readonly processes = new Map<string, SynthProcess>();
  private readonly jobs = new Map<number, SynthesisJob>();
  private nextId = 1;
  private closed = false;

  constructor(private readonly options: SynthesizerOptions = {}) {}

  /** Pids of the running synthesizer processes. */
  get pids(): number[] {
    return [...this.processes.values()].map((p) => p.pid).filter((pid): pid is number => pid !== undefined);
  }

  /** Syntheses running now (all models). */
  get activeSyntheses(): number {
    return this.jobs.size;
  }

  async load(name: string, config: SherpaTtsConfig): Promise<{ host: SynthProcess; key: string; info: SherpaTtsInfo }> {
    if (this.closed) throw new ServerError('The speech synthesizer is shut down.');
    const host = this.processFor(config.model.vits?.dataDir ?? config.model.kokoro?.dataDir ?? '');
    const { key, info } = await host.load(name, config);
    if (!info) {
      host.unload(key, new ServerError('The speech model did not report its sample rate.'));
      throw new ModelLoadError(`Model '${name}' could not be loaded: sherpa-onnx did not report its sample rate.`);
    }
    return { host, key, info };
  }

  /** Runs one synthesis; resolves when the last block was handed over. */
  synthesize(
    host: SynthProcess,
    key: string,
    request: { text: string; sid: number; speed: number },
    onAudio: (samples: Float32Array) => void,
    signal: AbortSignal,
  ): Promise<void> {
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise<void>((resolve, reject) => {
      const id = this.nextId++;
      const onAbort = () => job.fail(signal.reason, true);
      const job = host.open(
        key,
        (child) =>
          new SynthesisJob(id, key, child, host, onAudio, (error) => {
            signal.removeEventListener('abort', onAbort);
            this.jobs.delete(id);
            if (error === undefined) resolve();
            else reject(error);
          }),
        () => new ServerError('This speech model was unloaded; load it again.'),
      );
      this.jobs.set(id, job);
      signal.addEventListener('abort', onAbort, { once: true });
      host.send(job.child, { t: 'synth', id, key, text: request.text, sid: request.sid, speed: request.speed });
    });
  }

  /** Fails every synthesis and stops every process (server shutdown). */
  close(): void {
    this.closed = true;
    for (const host of this.processes.values()) host.close(new ServerError('The server is shutting down.'));
    this.processes.clear();
  }

  private processFor(dataDir: string): SynthProcess {
    let host = this.processes.get(dataDir);
    if (!host) {
      host = new SherpaProcess({
        label: 'speech synthesizer',
        source: SYNTHESIZER_CHILD_SOURCE,
        lostJob: (how) => new ServerError(`The speech synthesizer process ${how}; this synthesis was lost. Retry the request.`),
        onMessage: (message) => this.onMessage(message),
        loadRetryDelayMs: this.options.loadRetryDelayMs,
        log: this.options.log,
        onRestart: this.options.onRestart,
        sherpaModule: this.options.sherpaModule,
        replaceAfterJobs: this.options.replaceAfterSyntheses ?? REPLACE_AFTER_SYNTHESES,
      });
      this.processes.set(dataDir, host);
    }
    return host;
  }

  private onMessage(message: SynthesizerChildMessage): void {
    switch (message.t) {
      case 'audio':
        this.jobs.get(message.id)?.audio(message.samples);
        return;
      case 'done':
        this.jobs.get(message.id)?.done();
        return;
      case 'error':
        this.jobs.get(message.id)?.fail(new ServerError(`Speech synthesis failed: ${message.error}`), false);
        return;
    }
  }
}

/** A loader with its own synthesizer processes (one per server: the default export below, or one per test). */
export function createTtsLoader(options: SynthesizerOptions = {}): SherpaTtsLoader {
  let synthesizer: SherpaSynthesizer | undefined;
  // Without a log of its own, the process reports (restarts, sherpa's stderr) go to the engine's, from LoadOptions.
  let engineLog: ((message: string) => void) | undefined;
  const log = options.log ?? ((message: string) => engineLog?.(message));
  // Restarts of a process go to the engine's events (the server's /metrics), from LoadOptions too.
  let engineReport: LoadOptions['report'];
  const onRestart = (label: string) => {
    options.onRestart?.(label);
    engineReport?.({ type: 'restart', process: `sherpa-onnx ${label}` });
  };
  const get = () => (synthesizer ??= new SherpaSynthesizer({ ...options, log, onRestart }));
  return {
    get synthesizer() {
      return get();
    },
    async load(model: InstalledModel, loadOptions: LoadOptions): Promise<SpeechRuntime> {
      const started = Date.now();
      // The speech task runs one synthesis per model at a time: give it the cores (ONNX Runtime's intra-op threads).
      const threads = loadOptions.threads > 0 ? loadOptions.threads : Math.min(4, availableParallelism());
      const config = ttsConfig(model, threads);
      if (loadOptions.log) engineLog = loadOptions.log;
      if (loadOptions.report) engineReport = loadOptions.report;
      const shared = get();
      const { host, key, info: reported } = await shared.load(model.id, config);
      let info: SpeechModelInfo;
      try {
        info = speechInfo(model, reported);
      } catch (error) {
        host.unload(key, new ServerError('The speech model could not be described.'));
        throw error;
      }
      loadOptions.log?.(
        `${model.id}: sherpa-onnx voice loaded in ${Date.now() - started} ms (${info.sampleRate} Hz, ${info.speakers.length} speaker(s), ${threads} threads, process ${host.pid})`,
      );
      let disposed = false;
      return {
        info,
        memoryBytes: estimateMemory(model),
        queue: new JobQueue(loadOptions.maxQueue ?? 16, `Speech synthesis model '${model.id}'`),
        async synthesize(request: SynthesisRequest, onAudio: (samples: Float32Array) => void, signal: AbortSignal): Promise<{ frames: number }> {
          if (disposed) throw new ServerError(`Model '${model.id}' was unloaded; load it again.`);
          const sid = request.speaker === undefined ? 0 : Math.max(0, info.speakers.indexOf(request.speaker));
          await shared.synthesize(host, key, { text: request.text, sid, speed: request.speed }, onAudio, signal);
          // No codec frames: the `frames` cap does not apply to these models.
          return { frames: 0 };
        },
        async dispose() {
          if (disposed) return;
          disposed = true;
          host.unload(key, new ServerError(`Model '${model.id}' was unloaded while synthesising.`));
        },
      };
    },
    estimateMemory,
  };
}

/** Weights as ONNX Runtime holds them, plus the synthesizer process itself (~50 MB). */
function estimateMemory(model: InstalledModel): number {
  return Math.round(model.sizeBytes * 1.5) + 50 * 1024 * 1024;
}

export const sherpaTtsLoader: SherpaTtsLoader = createTtsLoader();
