import { ModelLoadError, ServerError } from '../../core/errors.js';
import type { ChildHandle, ChildJob } from './process.js';
import type { ServiceMessage, SherpaTtsConfig, SherpaTtsInfo, SynthesizerChildMessage, SynthesizerProtocol } from './protocol.js';
import { SherpaSupervisor, type EngineHooks, type SherpaModel, type SupervisorOptions } from './supervisor.js';

/**
 * Speech synthesis on the sherpa supervisor (supervisor.ts): sherpa-onnx's
 * OfflineTts in child processes (synthesizer-child.ts); a bad model's _Exit
 * or a crash kills the child, never the server, a synthesis the child takes
 * down fails with a 500, and the next one starts a new child (process.ts).
 *
 * espeak-ng is initialised once per process, with the data folder of the
 * first voice loaded; so voices with different data folders (the catalog's
 * voices each carry the few English files they need) get a process each.
 *
 * Synthesis hands over each sentence as sherpa-onnx generates it (one IPC
 * message per block, the samples copied once into it). An abort stops the
 * synthesis at the next sentence; the promise rejects at once with the abort
 * reason.
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

export interface SynthesizerOptions extends SupervisorOptions {
  /** Syntheses a process runs before a fresh one takes over (default REPLACE_AFTER_SYNTHESES). */
  replaceAfterSyntheses?: number;
}

/** ≈ 3 MB of leaked espeak-ng voices (see above) against a process start and a load per voice, in the background. */
export const REPLACE_AFTER_SYNTHESES = 2000;

/** A voice loaded into a synthesizer process. */
export type SynthesizerModel = SherpaModel<SynthesizerProtocol>;

/** One synthesis in a child: it settles exactly once (done, error, abort, the child's death, unload). */
class SynthesisJob implements ChildJob<SynthesizerChildMessage> {
  private settled = false;

  constructor(
    readonly id: number,
    private readonly model: SynthesizerModel,
    readonly child: ChildHandle,
    private readonly onAudio: (samples: Float32Array) => void,
    private readonly settle: (error?: unknown) => void,
  ) {}

  get key(): string {
    return this.model.key;
  }

  receive(message: ServiceMessage<SynthesizerChildMessage>): void {
    switch (message.t) {
      case 'audio':
        this.audio(message.samples);
        return;
      case 'done':
        this.finish(true);
        return;
      case 'error':
        this.fail(new ServerError(`Speech synthesis failed: ${message.error}`), false);
        return;
    }
  }

  fail(error: unknown, tellChild: boolean): void {
    this.finish(tellChild, error);
  }

  private audio(samples: Float32Array): void {
    if (this.settled) return;
    try {
      this.onAudio(samples);
    } catch (error) {
      // The caller's sink failed (a closed response…): stop the synthesis, report its error.
      this.fail(error, true);
    }
  }

  private finish(tellChild: boolean, error?: unknown): void {
    if (this.settled) return;
    this.settled = true;
    if (tellChild && error !== undefined) this.model.send(this, { t: 'abort', id: this.id });
    this.model.forget(this);
    this.settle(error);
  }
}

/** The synthesizer processes, one per espeak-ng data folder, and the syntheses running in them. */
export class SherpaSynthesizer {
  private readonly supervisor: SherpaSupervisor<SynthesizerProtocol>;

  constructor(options: SynthesizerOptions = {}) {
    this.supervisor = new SherpaSupervisor<SynthesizerProtocol>(
      {
        label: 'speech synthesizer',
        entry: new URL('./synthesizer-child.js', import.meta.url),
        lostJob: (how) => new ServerError(`The speech synthesizer process ${how}; this synthesis was lost. Retry the request.`),
        jobOf: (message) => message.id,
        replaceAfterJobs: options.replaceAfterSyntheses ?? REPLACE_AFTER_SYNTHESES,
      },
      options,
    );
  }

  /** Pids of the running synthesizer processes. */
  get pids(): number[] {
    return this.supervisor.pids;
  }

  /** Syntheses running now (all models). */
  get activeSyntheses(): number {
    return this.supervisor.activeJobs;
  }

  /** Loads a voice into the process of its espeak-ng data folder; resolves to it and what sherpa-onnx reports about it. */
  async load(name: string, config: SherpaTtsConfig, engine: EngineHooks = {}): Promise<{ model: SynthesizerModel; info: SherpaTtsInfo }> {
    const dataDir = config.model.vits?.dataDir ?? config.model.kokoro?.dataDir ?? '';
    const model = await this.supervisor.load(name, config, engine, dataDir);
    if (!model.info) {
      model.unload(new ServerError('The speech model did not report its sample rate.'));
      throw new ModelLoadError(`Model '${name}' could not be loaded: sherpa-onnx did not report its sample rate.`);
    }
    return { model, info: model.info };
  }

  /** Runs one synthesis (`speed`: the model's own, Piper's length scale or Kokoro's speed input); resolves when the last block was handed over. */
  synthesize(
    model: SynthesizerModel,
    request: { text: string; sid: number; speed: number },
    onAudio: (samples: Float32Array) => void,
    signal: AbortSignal,
  ): Promise<void> {
    if (signal.aborted) return Promise.reject(signal.reason);
    return new Promise<void>((resolve, reject) => {
      const onAbort = () => job.fail(signal.reason, true);
      const job = model.open(
        (id, child) =>
          new SynthesisJob(id, model, child, onAudio, (error) => {
            signal.removeEventListener('abort', onAbort);
            if (error === undefined) resolve();
            else reject(error);
          }),
        () => new ServerError('This speech model was unloaded; load it again.'),
      );
      signal.addEventListener('abort', onAbort, { once: true });
      model.send(job, { t: 'synth', id: job.id, key: model.key, text: request.text, sid: request.sid, speed: request.speed });
    });
  }

  /** Fails every synthesis and stops every process (server shutdown). */
  close(): void {
    this.supervisor.close(new ServerError('The server is shutting down.'));
  }
}
