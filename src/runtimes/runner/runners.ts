import type { ModelKind } from '../../core/catalog.js';
import { ModelLoadError, ServerError } from '../../core/errors.js';
import type { EngineEvent } from '../../core/events.js';
import type { LoadedModel, Loader, LoadOptions } from '../../core/loader.js';
import type { InstalledModel } from '../../core/store.js';
import { describeExit, RunnerProcess, type RunnerExit } from './process.js';
import { isRunnerKind, RUNNER_KINDS, type RunnerKind } from './kinds.js';

/**
 * Supervised runner processes, one per loaded model, as Ollama's runners and
 * LocalAI's backends: the server keeps HTTP, scheduling, leases, queues and
 * the store; a runner holds the native runtime (llama.cpp, ONNX Runtime) of
 * one model and serves its task interface over IPC, the server holding a
 * client of that interface for it (kinds/<kind>.ts). So:
 *
 * - unloading a model ends its process, and its memory goes back to the
 *   system whatever the runtime kept;
 * - a native fault (a crash, a CPU feature the machine only claims to have)
 *   ends one runner: the requests it held fail with a 500 naming the model,
 *   one log line says how it ended with its last output, the model manager
 *   forgets it, and the next request starts a new runner — after a backoff
 *   that doubles with each crash in a row, so a model that always crashes
 *   does not spin the machine;
 * - shutdown can always end: `killAll` ends every runner at once, whatever a
 *   native thread is doing.
 *
 * llama.cpp's persistent threadpools spin between decodes; `setBusy` tells
 * each runner whether it may (only while its model is the one thing working).
 */

export interface RunnersOptions {
  /** The lserve home (where the llama.cpp binaries are put). */
  home: string;
  log: (message: string) => void;
  report: (event: EngineEvent) => void;
}

/** First restart delay after a crash; doubled for each further crash in a row, up to MAX_BACKOFF_MS. */
const FIRST_BACKOFF_MS = 250;
const MAX_BACKOFF_MS = 15_000;
/** A runner that ran this long before it died starts its model's crash count afresh. */
const STABLE_MS = 60_000;

/**
 * LSERVE_LLAMA_POLLING: `auto` (the default) lets a llama runner's threadpool
 * spin between decodes only while its model is the only one with requests;
 * `on` always (a machine that does nothing but chat); `off` never.
 */
function pollingMode(value = process.env.LSERVE_LLAMA_POLLING): 'auto' | 'on' | 'off' {
  return value === 'on' || value === 'off' ? value : 'auto';
}

interface CrashRecord {
  /** Crashes in a row. */
  count: number;
  /** When the last one happened (ms since epoch). */
  at: number;
}

interface RunnerState {
  model: string;
  /** A llama.cpp runner: its threadpool may spin (`polling`) while its model is the only one working. */
  llama: boolean;
  polling: boolean;
}

export class Runners {
  private readonly runners = new Map<RunnerProcess, RunnerState>();
  private readonly crashes = new Map<string, CrashRecord>();
  /** Models whose runner died: the next runner started for one is a restart. */
  private readonly restarting = new Set<string>();
  private busy = new Set<string>();

  constructor(private readonly options: RunnersOptions) {}

  /** A loader that loads `${backend}:${kind}` models in runners; undefined for kinds that do not run in them. */
  loader(loaderKey: string, kind: ModelKind): Loader | undefined {
    if (!isRunnerKind(kind)) return undefined;
    return { load: (installed, options) => this.load(loaderKey, kind, installed, options) };
  }

  /** Ends every runner now (SIGKILL), whatever it is doing: the last step of a shutdown that must not wait. */
  killAll(): void {
    for (const runner of this.runners.keys()) runner.kill();
  }

  /**
   * The models with requests on them. llama.cpp's threadpool of a model may
   * spin between decodes only while its model is the only one working: any
   * other work (another model's runner, a sherpa-onnx process) would lose a
   * core to the spinning.
   */
  setBusy(models: Iterable<string>): void {
    this.busy = new Set(models);
    for (const [runner, state] of this.runners) this.updatePolling(runner, state);
  }

  private updatePolling(runner: RunnerProcess, state: RunnerState): void {
    const mode = pollingMode();
    const polling = state.llama && (mode === 'on' || (mode === 'auto' && this.busy.size === 1 && this.busy.has(state.model)));
    if (polling === state.polling) return;
    state.polling = polling;
    runner.send({ t: 'polling', on: polling });
  }

  private async load(loaderKey: string, kind: RunnerKind, installed: InstalledModel, options: LoadOptions): Promise<LoadedModel> {
    await this.backoff(installed.id);
    const log = options.log ?? this.options.log;
    const started = Date.now();
    let loaded = false;
    const runner: RunnerProcess = new RunnerProcess({
      model: installed.id,
      log,
      lostCall: (how) =>
        loaded
          ? new ServerError(`Model '${installed.id}' stopped while serving this request: its runner process ${how}. It is started again on the next request.`, { code: 'runner_crashed' })
          : new ModelLoadError(`Model '${installed.id}' could not be loaded: its runner process ${how} while loading it.`),
      onExit: (exit) => {
        this.runners.delete(runner);
        if (!exit.expected) this.crashed(runner, installed.id, exit, started, loaded, log);
        if (!exit.expected && loaded) options.onLost?.();
      },
    });
    // Runners start with polling off (runner.ts): it is turned on when their model is all that works.
    this.runners.set(runner, { model: installed.id, llama: installed.entry.backend === 'llama', polling: false });
    if (this.restarting.delete(installed.id)) this.options.report({ type: 'restart', process: `runner ${installed.id}` });
    try {
      const ready = await runner.request({ t: 'init', loaderKey, installed, home: this.options.home }, 'ready');
      if (ready.estimate !== undefined) await options.reserve?.(ready.estimate);
      const wireOptions = {
        threads: options.threads,
        parallel: options.parallel,
        maxQueue: options.maxQueue,
        contextSizes: options.contextSizes,
        memoryBudgetBytes: options.memoryBudgetBytes,
        cacheRamBytes: options.cacheRamBytes,
        kvCacheType: options.kvCacheType,
      };
      const model = await runner.request({ t: 'load', options: wireOptions, kind }, 'loaded');
      loaded = true;
      const state = this.runners.get(runner);
      if (state) this.updatePolling(runner, state);
      // The server's handle on the model: its kind's task interface, each method a call to the runner.
      return RUNNER_KINDS[kind].client(runner, model, { maxWaiting: options.maxQueue ?? 16, model: installed.id });
    } catch (error) {
      runner.kill();
      await runner.whenExited();
      throw error;
    }
  }

  /** Waits out the backoff after a model's last crashes. */
  private async backoff(model: string): Promise<void> {
    const crash = this.crashes.get(model);
    if (!crash) return;
    const delay = Math.min(FIRST_BACKOFF_MS * 2 ** (crash.count - 1), MAX_BACKOFF_MS) - (Date.now() - crash.at);
    if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
  }

  /** A runner ended without being asked to: counted for the backoff, and said once, with how and its last output. */
  private crashed(runner: RunnerProcess, model: string, exit: RunnerExit, started: number, loaded: boolean, log: (message: string) => void): void {
    const previous = this.crashes.get(model);
    const stable = Date.now() - started > STABLE_MS;
    this.crashes.set(model, { count: stable || !previous ? 1 : previous.count + 1, at: Date.now() });
    this.restarting.add(model);
    const what = loaded ? `${exit.lostCalls} request${exit.lostCalls === 1 ? '' : 's'} in flight failed` : 'while loading';
    const output = exit.output.length ? `; its last output: ${exit.output.slice(-5).join(' | ')}` : '';
    log(`the runner of ${model} (pid ${runner.pid}) ${describeExit(exit.code, exit.signal)}: ${what}; it is started again on the next request${output}`);
  }
}
