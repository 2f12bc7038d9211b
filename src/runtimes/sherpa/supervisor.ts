import type { LserveError } from '../../core/errors.js';
import { ServerError } from '../../core/errors.js';
import type { LoadOptions } from '../../core/loader.js';
import { SherpaProcess, type ChildHandle, type ChildJob, type SherpaService } from './process.js';
import type { SherpaProtocol } from './protocol.js';

/**
 * The one supervisor of sherpa-onnx child processes, whatever they serve:
 * streaming recognition (recognizer.ts) and speech synthesis
 * (synthesizer.ts) are services on it, each a kind of job with its child
 * module (recognizer-child.ts, synthesizer-child.ts) and its messages
 * (protocol.ts).
 *
 * - Processes by group: a service that needs no more runs one; the speech
 *   synthesizer runs one per espeak-ng data folder. Each is a SherpaProcess
 *   (process.ts: crashes, restarts, probes, refusing a model that killed its
 *   process, replacing a process after so many jobs).
 * - Its reports go where the service's options say, else to the engine's,
 *   from the LoadOptions of the loads: its log lines (sherpa's stderr
 *   included), and each restart of a process as an engine event (the
 *   server's /metrics).
 * - A loaded model is a SherpaModel: the jobs opened on it run in its
 *   group's process, which hands them the child's messages by job id.
 */

export interface SupervisorOptions {
  /** How long a model config whose load killed its process is refused without retrying (default 30 s). */
  loadRetryDelayMs?: number;
  /** Where the processes' reports go (default: the engine's log, from the loads). */
  log?: (message: string) => void;
  /** Called when a process is started again after it died. */
  onRestart?: (label: string) => void;
  /** The sherpa-onnx-node module the processes load (default: the installed package). */
  sherpaModule?: string;
}

/** What a load passes on from the engine: its log and its events. */
export type EngineHooks = Pick<LoadOptions, 'log' | 'report'>;

/** Memory a sherpa-onnx model holds: its weights as ONNX Runtime holds them, plus its process itself (~50 MB). */
export function estimateSherpaMemory(sizeBytes: number): number {
  return Math.round(sizeBytes * 1.5) + 50 * 1024 * 1024;
}

export class SherpaSupervisor<P extends SherpaProtocol> {
  private readonly processes = new Map<string, SherpaProcess<P>>();
  private engineLog: EngineHooks['log'];
  private engineReport: EngineHooks['report'];
  private closed = false;

  constructor(
    private readonly service: SherpaService<P['child']>,
    private readonly options: SupervisorOptions = {},
  ) {}

  /** Pids of the running processes. */
  get pids(): number[] {
    return [...this.processes.values()].map((p) => p.pid).filter((pid): pid is number => pid !== undefined);
  }

  /** Jobs running now (all models, all processes). */
  get activeJobs(): number {
    let jobs = 0;
    for (const host of this.processes.values()) jobs += host.activeJobs;
    return jobs;
  }

  /** Loads a model into the process of `group`. Rejects with ModelLoadError naming `name`. */
  async load(name: string, config: P['config'], engine: EngineHooks = {}, group = ''): Promise<SherpaModel<P>> {
    if (this.closed) throw new ServerError(`The ${this.service.label} is shut down.`);
    if (engine.log) this.engineLog = engine.log;
    if (engine.report) this.engineReport = engine.report;
    const host = this.processFor(group);
    const { key, info } = await host.load(name, config);
    return new SherpaModel(host, key, info);
  }

  /** Fails every job with `error` and stops every process (server shutdown). */
  close(error: LserveError): void {
    this.closed = true;
    for (const host of this.processes.values()) host.close(error);
    this.processes.clear();
  }

  private processFor(group: string): SherpaProcess<P> {
    let host = this.processes.get(group);
    if (!host) {
      host = new SherpaProcess(this.service, {
        loadRetryDelayMs: this.options.loadRetryDelayMs,
        sherpaModule: this.options.sherpaModule,
        // `ps` shows what a process of a group serves (a voice's espeak-ng data folder).
        args: group ? [group] : [],
        log: (message) => (this.options.log ?? this.engineLog)?.(message),
        onRestart: (label) => {
          this.options.onRestart?.(label);
          this.engineReport?.({ type: 'restart', process: `sherpa-onnx ${label}` });
        },
      });
      this.processes.set(group, host);
    }
    return host;
  }
}

/** A model loaded into a supervised process, and the jobs on it. */
export class SherpaModel<P extends SherpaProtocol> {
  constructor(
    private readonly host: SherpaProcess<P>,
    /** The model's key in its process. */
    readonly key: string,
    /** What the child reported when it loaded the model. */
    readonly info: P['info'] | undefined,
  ) {}

  /** Its process's pid, while one runs. */
  get pid(): number | undefined {
    return this.host.pid;
  }

  /**
   * Starts a job on the model (in a new process if its process died: the
   * model is loaded into it first). `create` builds the job with its id, in
   * its process; the caller sends the job's first message. Throws
   * `unloaded()` once the model is gone.
   */
  open<J extends ChildJob<P['child']>>(create: (id: number, child: ChildHandle) => J, unloaded: () => LserveError): J {
    return this.host.open(this.key, create, unloaded);
  }

  /** Sends a service message to the process a job runs in (dropped if that process is gone). */
  send(job: ChildJob<P['child']>, message: P['parent']): void {
    this.host.send(job.child, message);
  }

  /** A job is over (ended, failed or abandoned). */
  forget(job: ChildJob<P['child']>): void {
    this.host.forget(job);
  }

  /** Drops the model; its jobs fail with `error`. Its process stops when no model is left in it. */
  unload(error: LserveError): void {
    this.host.unload(this.key, error);
  }
}
