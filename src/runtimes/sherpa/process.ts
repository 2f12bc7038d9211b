import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { LserveError, ModelLoadError, ServerError } from '../../core/errors.js';
import { guarded } from '../../core/guard.js';
import { moduleArgv } from '../launch/module-entry.js';
import type { LifecycleChildMessage, LifecycleParentMessage, ServiceMessage, SherpaProtocol } from './protocol.js';

/**
 * One supervised sherpa-onnx child process and the models loaded into it:
 * the part of the supervisor (supervisor.ts) that runs one process, whatever
 * its service (the streaming recognizer, recognizer.ts; the speech
 * synthesizer, synthesizer.ts). Why a process at all: sherpa-onnx-node ships its
 * own onnxruntime beside onnxruntime-node's, and on a bad model (a missing
 * metadata key, …) it calls _Exit — which must kill the child, never the
 * server.
 *
 * - Models are loaded into the child by key. Work on a model (a stream, a
 *   synthesis) is a job opened with open(), named by an id; a job belongs to
 *   the child it was opened in, and the child's messages for it are handed to it.
 * - If the child dies (killed, crashed, sherpa's _Exit), every job it held
 *   fails with the service's "lost" error; the next open() starts a new child
 *   and loads the model it needs again, lazily. The server never exits with it.
 * - A model whose load kills the child is a load failure naming the model and
 *   quoting sherpa's own message; the same config is then refused at once
 *   for `loadRetryDelayMs` instead of killing a new child on every request.
 *   While jobs are running, a model not yet known to load cleanly is first
 *   tried in a throw-away probe process, so a corrupt model never takes live
 *   work down with it.
 * - The child never keeps the server (or a CLI command) alive by itself: its
 *   handles are referenced only while it has work (a job, a pending load).
 * - With `replaceAfterJobs`, a child that has run that many jobs is replaced
 *   without a pause: a fresh one is started and given every model, then
 *   takes the new jobs, while the old one finishes those it has and is
 *   stopped. That is how memory a native library keeps for good goes back to
 *   the system (see synthesizer.ts).
 */

/** What a kind of child is: the service's part of supervising it. */
export interface SherpaService<ChildMessage> {
  /** What the child is, in logs and errors: "speech recognizer", "speech synthesizer". */
  label: string;
  /** The child's module, by its compiled URL (runtimes/launch starts it, from dist/ or the sources). */
  entry: URL;
  /** The error a job gets when its process dies; `how` says how ("was killed (SIGKILL)"). */
  lostJob: (how: string) => LserveError;
  /** The job a service message is for. */
  jobOf: (message: ServiceMessage<ChildMessage>) => number;
  /** Jobs a process runs before a fresh one takes over (default: never replaced). */
  replaceAfterJobs?: number;
}

/** How processes are run, whatever their service. */
export interface SherpaProcessOptions {
  /** How long a model config whose load killed the process is refused without retrying (default 30 s). */
  loadRetryDelayMs?: number;
  log?: (message: string) => void;
  /** Called with the label when a process is started again to replace one that died (crashed, was killed). */
  onRestart?: (label: string) => void;
  /** The sherpa-onnx-node module the process loads (default: the installed package). */
  sherpaModule?: string;
  /** On the process's command line after its entry, for `ps`: what it serves. */
  args?: readonly string[];
}

/** Work running on a model in a child: a stream, a synthesis. */
export interface ChildJob<ChildMessage> {
  /** Names the job in the messages about it. */
  readonly id: number;
  /** The model's key. */
  readonly key: string;
  /** The process the job runs in. */
  readonly child: ChildHandle;
  /** A message of the job's process about it. */
  receive(message: ServiceMessage<ChildMessage>): void;
  /** Ends the job with `error`; `tellChild` false when the child already forgot it (or is gone). */
  fail(error: LserveError, tellChild: boolean): void;
}

interface PendingLoad<Info> {
  name: string;
  stderrFrom: number;
  resolve: (info: Info | undefined) => void;
  reject: (error: LserveError) => void;
}

/** One child process and what it holds (opaque outside this module). */
export interface ChildHandle {
  readonly pid: number | undefined;
}

interface Child<Info> extends ChildHandle {
  proc: ChildProcess;
  loaded: Set<string>;
  /** Loads awaited by a caller. */
  loads: Map<string, PendingLoad<Info>>;
  /** Loads sent without a waiter (models reloaded into a restarted child on open()). */
  lazyLoads: Set<string>;
  stderr: string;
  /** Bytes of stderr ever received (the string keeps the tail only). */
  stderrTotal: number;
  fatal?: string;
  /** We asked it to exit (unload of the last model, shutdown, end of a probe). */
  stopping: boolean;
  exited: boolean;
  /** Jobs opened in it, for `replaceAfterJobs`. */
  jobsOpened: number;
  /** A fresh process took over: this one finishes its jobs, takes no new ones, and is stopped after the last. */
  retiring: boolean;
}

interface ModelRecord<Config> {
  name: string;
  config: Config;
}

const DEFAULT_LOAD_RETRY_DELAY_MS = 30_000;
const STDERR_TAIL_BYTES = 8192;
const SHERPA_MODULE = createRequire(import.meta.url).resolve('sherpa-onnx-node');

/** Load failures caused by the process dying (sherpa's _Exit on a bad model): not retried for a while. */
const crashes = new WeakSet<LserveError>();
const EXTERNAL_SIGNALS = new Set<NodeJS.Signals>(['SIGKILL', 'SIGTERM', 'SIGINT', 'SIGHUP']);

export class SherpaProcess<P extends SherpaProtocol> {
  private readonly label: string;
  private readonly options: SherpaService<P['child']> & SherpaProcessOptions & { loadRetryDelayMs: number; sherpaModule: string };
  private child: Child<P['info']> | undefined;
  private readonly models = new Map<string, ModelRecord<P['config']>>();
  private readonly jobs = new Map<number, ChildJob<P['child']>>();
  private readonly failedLoads = new Map<string, { error: LserveError; until: number }>();
  /** The fresh process being given the models, before it takes over (`replaceAfterJobs`). */
  private replacement: Child<P['info']> | undefined;
  private nextModel = 1;
  private nextJob = 1;
  private closed = false;
  /** The last process died without being asked to: the next one started is a restart. */
  private died = false;

  constructor(service: SherpaService<P['child']>, options: SherpaProcessOptions = {}) {
    this.label = service.label;
    this.options = {
      ...service,
      ...options,
      loadRetryDelayMs: options.loadRetryDelayMs ?? DEFAULT_LOAD_RETRY_DELAY_MS,
      sherpaModule: options.sherpaModule ?? SHERPA_MODULE,
    };
  }

  /** The process's pid, while one runs. */
  get pid(): number | undefined {
    return this.child && !this.child.exited ? this.child.pid : undefined;
  }

  /** Jobs running now (all models). */
  get activeJobs(): number {
    return this.jobs.size;
  }

  /** Loads a model into the process; resolves to its key and what the child reported. Rejects with ModelLoadError naming `name`. */
  async load(name: string, config: P['config']): Promise<{ key: string; info: P['info'] | undefined }> {
    if (this.closed) throw new ServerError(`The ${this.label} is shut down.`);
    const configKey = JSON.stringify(config);
    const failed = this.failedLoads.get(configKey);
    if (failed && failed.until > Date.now()) throw failed.error;
    this.failedLoads.delete(configKey);
    const key = `m${this.nextModel++}`;
    let info: P['info'] | undefined;
    try {
      if (this.jobs.size > 0) {
        // Live work shares the process: try the model where a crash hurts no one.
        const probe = this.spawnChild();
        try {
          await this.loadInto(probe, 'probe', name, config);
        } finally {
          this.stop(probe);
        }
      }
      info = await this.loadInto(this.ensureChild(), key, name, config);
    } catch (error) {
      if (error instanceof LserveError && crashes.has(error)) {
        this.failedLoads.set(configKey, { error, until: Date.now() + this.options.loadRetryDelayMs });
      }
      throw error;
    }
    this.models.set(key, { name, config });
    return { key, info };
  }

  /**
   * Starts a job on a loaded model in the current process (a new one if it
   * died: the model is loaded into it first, in message order). `create`
   * builds the job for that process; `unloaded` is thrown when the model is
   * gone. The caller sends the job's first message.
   */
  open<J extends ChildJob<P['child']>>(key: string, create: (id: number, child: ChildHandle) => J, unloaded: () => LserveError): J {
    const model = this.models.get(key);
    if (!model || this.closed) throw unloaded();
    const child = this.ensureChild();
    if (!child.loaded.has(key) && !child.loads.has(key) && !child.lazyLoads.has(key)) {
      // A restarted process: load the model again before the job (messages are handled in order).
      child.lazyLoads.add(key);
      this.sendTo(child, { t: 'load', key, config: model.config });
    }
    const job = create(this.nextJob++, child);
    this.jobs.set(job.id, job);
    child.jobsOpened++;
    this.updateRef(child);
    const limit = this.options.replaceAfterJobs;
    if (limit !== undefined && child.jobsOpened >= limit && !this.replacement) {
      this.replace(child).catch((error: unknown) => this.options.log?.(`error replacing the sherpa-onnx ${this.label} process: ${(error as Error)?.stack ?? String(error)}`));
    }
    return job;
  }

  /** A job is over (ended, failed or abandoned): it no longer keeps the process referenced, and a replaced process's last one stops it. */
  forget(job: ChildJob<P['child']>): void {
    if (this.jobs.get(job.id) === job) this.jobs.delete(job.id);
    const child = job.child as Child<P['info']>;
    this.updateRef(child);
    this.stopIfRetired(child);
  }

  /** Sends a service message to the process a job runs in (dropped if that process is gone). */
  send(child: ChildHandle, message: P['parent']): void {
    this.sendTo(child as Child<P['info']>, message);
  }

  /** Drops a model; its jobs fail with `error`. Stops the process when no model is left. */
  unload(key: string, error: LserveError): void {
    if (!this.models.delete(key)) return;
    for (const job of [...this.jobs.values()]) if (job.key === key) job.fail(error, true);
    const child = this.child;
    if (!child) return;
    child.loaded.delete(key);
    child.lazyLoads.delete(key);
    if (this.models.size === 0 && child.loads.size === 0) {
      this.stop(child);
      this.child = undefined;
    } else {
      this.sendTo(child, { t: 'unload', key });
    }
  }

  /** Fails every job with `error` and stops the process (server shutdown). */
  close(error: LserveError): void {
    this.closed = true;
    for (const job of [...this.jobs.values()]) job.fail(error, false);
    this.models.clear();
    if (this.child) this.stop(this.child);
    if (this.replacement) this.stop(this.replacement);
    this.child = undefined;
  }

  /**
   * Starts a fresh process, loads every model into it (the old one keeps
   * taking jobs meanwhile), then makes it the current one; the old one is
   * stopped once its last job ends. A model loaded or unloaded meanwhile is
   * settled at the swap (open() loads what the fresh process lacks). If the
   * fresh one fails, the old one stays, to be tried again after as many jobs.
   */
  private async replace(old: Child<P['info']>): Promise<void> {
    const fresh = this.spawnChild();
    this.replacement = fresh;
    this.options.log?.(`replacing the sherpa-onnx ${this.label} process (pid ${old.pid}) after ${old.jobsOpened} jobs with pid ${fresh.pid}`);
    try {
      for (const [key, model] of this.models) await this.loadInto(fresh, key, model.name, model.config);
    } catch (error) {
      if (!this.closed) this.options.log?.(`the sherpa-onnx ${this.label} process was not replaced: ${(error as Error).message}`);
      old.jobsOpened = 0;
      this.stop(fresh);
      return;
    } finally {
      this.replacement = undefined;
    }
    if (this.closed || this.child !== old || fresh.exited) {
      // Stopped, or the old one died meanwhile (the next job starts a process of its own, counted as a restart).
      this.stop(fresh);
      return;
    }
    for (const key of fresh.loaded) {
      if (this.models.has(key)) continue;
      fresh.loaded.delete(key);
      this.sendTo(fresh, { t: 'unload', key });
    }
    this.child = fresh;
    old.retiring = true;
    this.stopIfRetired(old);
  }

  /** A replaced process goes once nothing runs in it: no job, and no load a caller awaits (started before the swap). */
  private stopIfRetired(child: Child<P['info']>): void {
    if (child.retiring && child.loads.size === 0 && !this.hasJobs(child)) this.stop(child);
  }

  // ---- process management ----

  private sendTo(child: Child<P['info']>, message: P['parent'] | LifecycleParentMessage<P['config']>): void {
    if (child.exited || !child.proc.connected) return;
    try {
      child.proc.send(message);
    } catch {
      // The channel closed under us: the exit handler reports it.
    }
  }

  private ensureChild(): Child<P['info']> {
    if (!this.child || this.child.exited) {
      this.child = this.spawnChild();
      if (this.died) {
        this.died = false;
        this.options.onRestart?.(this.label);
      }
    }
    return this.child;
  }

  private spawnChild(): Child<P['info']> {
    // --expose-gc: a child collects once it drops a model (child.ts).
    const proc = spawn(process.execPath, moduleArgv(this.options.entry, this.options.args, ['--expose-gc']), {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      serialization: 'advanced',
      env: { ...process.env, LSERVE_SHERPA_MODULE: this.options.sherpaModule },
      windowsHide: true,
    });
    const child: Child<P['info']> = { proc, pid: proc.pid, loaded: new Set(), loads: new Map(), lazyLoads: new Set(), stderr: '', stderrTotal: 0, stopping: false, exited: false, jobsOpened: 0, retiring: false };
    proc.stderr?.setEncoding('utf8');
    proc.stderr?.on('data', (chunk: string) => {
      child.stderrTotal += chunk.length;
      child.stderr = (child.stderr + chunk).slice(-STDERR_TAIL_BYTES);
      for (const line of chunk.split('\n')) if (line.trim()) this.options.log?.(`sherpa-onnx[${child.pid}]: ${line.trim()}`);
    });
    // A fault in handling one message is a bug to log, not a reason to take the server down.
    const guard = <A extends unknown[]>(handler: (...args: A) => void) =>
      guarded(handler, (error) => this.options.log?.(`error in the sherpa-onnx ${this.label} supervisor: ${(error as Error)?.stack ?? String(error)}`));
    proc.on('message', guard((message: LifecycleChildMessage<P['info']> | P['child']) => this.onMessage(child, message)));
    proc.on('error', guard((error: Error) => {
      child.fatal ??= `the ${this.label} process could not be started: ${error.message}`;
      this.onExit(child, null, null);
    }));
    // 'close', not 'exit': it comes after the IPC channel and stderr are drained, so
    // every message the child sent (a 'fatal', sherpa's last log lines) is in by then.
    proc.on('close', guard((code: number | null, signal: NodeJS.Signals | null) => this.onExit(child, code, signal)));
    this.options.log?.(`started the sherpa-onnx ${this.label} process (pid ${proc.pid})`);
    this.updateRef(child);
    return child;
  }

  /** Asks a process to exit (it does when its IPC channel closes), with a kill as a backstop. */
  private stop(child: Child<P['info']>): void {
    if (child.exited) return;
    child.stopping = true;
    if (child.proc.connected) child.proc.disconnect();
    const timer = setTimeout(() => {
      if (!child.exited) child.proc.kill('SIGKILL');
    }, 5000);
    timer.unref();
  }

  private loadInto(child: Child<P['info']>, key: string, name: string, config: P['config']): Promise<P['info'] | undefined> {
    return new Promise<P['info'] | undefined>((resolve, reject) => {
      child.loads.set(key, { name, stderrFrom: child.stderrTotal, resolve, reject });
      this.updateRef(child);
      this.sendTo(child, { t: 'load', key, config });
    });
  }

  private onMessage(child: Child<P['info']>, message: LifecycleChildMessage<P['info']> | P['child']): void {
    const lifecycle = message as LifecycleChildMessage<P['info']>;
    switch (lifecycle.t) {
      case 'ready':
        this.options.log?.(`sherpa-onnx ${lifecycle.version} ready (pid ${child.pid})`);
        return;
      case 'fatal':
        child.fatal = `sherpa-onnx-node could not be loaded: ${lifecycle.error.split('\n')[0]}`;
        return;
      case 'loaded': {
        const pending = child.loads.get(lifecycle.key);
        child.loads.delete(lifecycle.key);
        child.lazyLoads.delete(lifecycle.key);
        if (lifecycle.ok) {
          child.loaded.add(lifecycle.key);
          pending?.resolve(lifecycle.info);
        } else {
          const detail = sherpaMessages(child.stderr, pending ? child.stderrTotal - pending.stderrFrom : 0);
          const name = pending?.name ?? this.models.get(lifecycle.key)?.name ?? lifecycle.key;
          const error = new ModelLoadError(`Model '${name}' could not be loaded by sherpa-onnx: ${lifecycle.error}${detail ? ` (${detail})` : ''}`);
          if (pending) pending.reject(error);
          for (const job of [...this.jobs.values()]) if (job.child === child && job.key === lifecycle.key) job.fail(error, true);
        }
        this.updateRef(child);
        this.stopIfRetired(child);
        return;
      }
      default: {
        // A late message from a stopped probe or a dead process is for no job of ours; a retiring one finishes its jobs.
        if (child !== this.child && !child.retiring) return;
        const service = message as ServiceMessage<P['child']>;
        const job = this.jobs.get(this.options.jobOf(service));
        if (job?.child === child) job.receive(service);
      }
    }
  }

  private onExit(child: Child<P['info']>, code: number | null, signal: NodeJS.Signals | null): void {
    if (child.exited) return;
    child.exited = true;
    if (this.child === child) {
      this.child = undefined;
      if (!child.stopping && !this.closed) this.died = true;
    }
    const how = child.fatal ? `failed (${child.fatal})` : signal ? `was killed (${signal})` : `exited with code ${code}`;
    // Said when it costs someone something (a load, a job); a stopped probe or replaced process exits quietly.
    if (child.loads.size || this.hasJobs(child)) this.options.log?.(`the sherpa-onnx ${this.label} process (pid ${child.pid}) ${how}`);
    for (const pending of child.loads.values()) {
      if (child.fatal || child.stopping) {
        pending.reject(new ServerError(`Model '${pending.name}' could not be loaded: ${child.fatal ?? `the ${this.label} was shut down meanwhile`}.`));
        continue;
      }
      const detail = sherpaMessages(child.stderr, child.stderrTotal - pending.stderrFrom);
      const error = new ModelLoadError(
        `Model '${pending.name}' could not be loaded: the sherpa-onnx process exited (${signal ?? `code ${code}`}) while loading it${detail ? `: ${detail}` : ''}.`,
      );
      // sherpa's _Exit (code 255) or a native crash (SIGSEGV, SIGABRT…) is the model's doing; a kill from outside is not.
      if (!signal || !EXTERNAL_SIGNALS.has(signal)) crashes.add(error);
      pending.reject(error);
    }
    child.loads.clear();
    for (const job of [...this.jobs.values()]) {
      if (job.child === child) job.fail(this.options.lostJob(how), false);
    }
  }

  private hasJobs(child: Child<P['info']>): boolean {
    for (const job of this.jobs.values()) if (job.child === child) return true;
    return false;
  }

  private updateRef(child: Child<P['info']>): void {
    if (child.exited) return;
    const busy = child.loads.size > 0 || this.hasJobs(child);
    const handles: Array<{ ref(): void; unref(): void } | null | undefined> = [
      child.proc,
      child.proc.channel,
      child.proc.stderr as unknown as { ref(): void; unref(): void } | null,
    ];
    for (const handle of handles) {
      if (!handle) continue;
      if (busy) handle.ref();
      else handle.unref();
    }
  }
}

/** sherpa-onnx's own log lines among the last `bytes` of stderr, without their source-location prefix. */
function sherpaMessages(stderr: string, bytes: number): string {
  if (bytes <= 0) return '';
  return stderr
    .slice(-bytes)
    .split('\n')
    .map((line) => line.trim().replace(/^\S+\.(cc|h|cpp):\w+:\d+\s+/, ''))
    .filter(Boolean)
    .slice(-3)
    .join('; ');
}
