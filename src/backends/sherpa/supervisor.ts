import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { InvalidRequestError, LserveError, ModelLoadError, OverloadedError, ServerError } from '../../core/errors.js';
import { CHILD_SOURCE } from './child.js';
import type { ChildMessage, ParentMessage, SherpaRecognizerConfig } from './protocol.js';

/**
 * The server-side half of streaming speech recognition: one sherpa-onnx child
 * process (child.ts) shared by every streaming model and stream, supervised.
 *
 * - Models are loaded into the child by key; streams are multiplexed over its
 *   IPC channel by id. Audio crosses as Float32Array (V8 serialization).
 * - If the child dies (killed, crashed, sherpa's _Exit), every stream it held
 *   gets an `error` event and ends; the next load or open starts a new child
 *   and loads the models it needs again, lazily. The server never exits with it.
 * - A model whose load kills the child is a load failure naming the model and
 *   quoting sherpa's own message; the same model config is then refused at
 *   once for `loadRetryDelayMs` instead of killing a new child on every
 *   request. While streams are open, a model not yet known to load cleanly is
 *   first tried in a throw-away probe process, so a corrupt model never takes
 *   live streams down with it.
 * - At most `maxStreams` streams at once across the server (open() beyond it
 *   throws OverloadedError, 503), and each stream's undecoded audio is
 *   bounded: see RecognizerStream.push.
 */

export const SAMPLE_RATE = 16_000;

export interface SupervisorOptions {
  /** Concurrent streams across all streaming models (default 16). */
  maxStreams?: number;
  /** Undecoded audio per stream above which push() returns false until 'drain' (default 2 s). */
  highWaterSeconds?: number;
  /** Undecoded audio per stream beyond which the stream fails with OverloadedError (default 30 s). */
  maxBufferedSeconds?: number;
  /** How long a model config whose load killed the recognizer process is refused without retrying (default 30 s). */
  loadRetryDelayMs?: number;
  log?: (message: string) => void;
  /** The sherpa-onnx-node module the process loads (default: the installed package). */
  sherpaModule?: string;
}

export const DEFAULT_MAX_STREAMS = 16;
const DEFAULTS = { maxStreams: DEFAULT_MAX_STREAMS, highWaterSeconds: 2, maxBufferedSeconds: 30, loadRetryDelayMs: 30_000 };
/** Silence appended at finish() so the encoder sees a whole window past the last real sample. */
const TAIL_PADDING_SECONDS = 0.8;
const STDERR_TAIL_BYTES = 8192;

export interface RecognitionResult {
  /** Text of the current utterance so far (partial) or of a finished one (final). */
  text: string;
  /** True at an endpoint (a pause, sherpa's endpoint rules) and for the last result after finish(). */
  isFinal: boolean;
  /** Utterance number, from 0; a final closes its utterance, the next partial starts the next. */
  segment: number;
}

export interface RecognizerStreamEvents {
  result: (result: RecognitionResult) => void;
  /** The stream failed (recognizer process died, buffer overflow, model unloaded) and is over. */
  error: (error: LserveError) => void;
  /** After finish(): the last final result was delivered and the stream is over. */
  end: () => void;
  /** push() returned false earlier and the undecoded audio is back under half the high-water mark. */
  drain: () => void;
}

export type StreamState = 'open' | 'finishing' | 'ended' | 'failed' | 'closed';

/**
 * One live recognition: 16 kHz mono float samples in, results out.
 *
 * Buffering is bounded with backpressure first and a hard cap second:
 * push() returns false once more than the high-water mark (2 s) of audio
 * waits to be decoded; a caller should then stop reading its source (e.g.
 * pause the WebSocket, which pushes back on the client over TCP) until
 * 'drain'. A caller that ignores it and gets more than the cap (30 s) ahead
 * fails with OverloadedError: dropping audio silently would corrupt the
 * transcript, and buffering without a bound would let one client exhaust
 * the server's memory. Real-time clients never come near either limit.
 */
export interface RecognizerStream {
  readonly id: number;
  readonly state: StreamState;
  /** Queues samples (16 kHz, [-1, 1]); false asks the caller to wait for 'drain'. Ignored once the stream failed or was closed. */
  push(samples: Float32Array): boolean;
  /** No more audio: the rest is decoded, the last final result arrives, then 'end'. */
  finish(): void;
  /** Abandons the stream at once; no further events. */
  close(): void;
  /** Subscribes; returns the unsubscribe function. Errors are events, never thrown. */
  on<E extends keyof RecognizerStreamEvents>(event: E, listener: RecognizerStreamEvents[E]): () => void;
}

interface PendingLoad {
  name: string;
  stderrFrom: number;
  resolve: () => void;
  reject: (error: LserveError) => void;
}

/** One child process and what it holds. */
interface ChildHandle {
  proc: ChildProcess;
  pid: number | undefined;
  loaded: Set<string>;
  /** Loads awaited by a caller. */
  loads: Map<string, PendingLoad>;
  /** Loads sent without a waiter (models reloaded into a restarted child on open()). */
  lazyLoads: Set<string>;
  stderr: string;
  /** Bytes of stderr ever received (the string keeps the tail only). */
  stderrTotal: number;
  fatal?: string;
  /** We asked it to exit (unload of the last model, shutdown, end of a probe). */
  stopping: boolean;
  exited: boolean;
}

interface ModelRecord {
  name: string;
  config: SherpaRecognizerConfig;
}

const SHERPA_MODULE = createRequire(import.meta.url).resolve('sherpa-onnx-node');

/** Load failures caused by the process dying (sherpa's _Exit on a bad model): not retried for a while. */
const crashes = new WeakSet<LserveError>();
const EXTERNAL_SIGNALS = new Set<NodeJS.Signals>(['SIGKILL', 'SIGTERM', 'SIGINT', 'SIGHUP']);

export class SherpaSupervisor {
  private readonly options: typeof DEFAULTS & Pick<SupervisorOptions, 'log'> & { sherpaModule: string };
  private child: ChildHandle | undefined;
  private readonly models = new Map<string, ModelRecord>();
  private readonly streams = new Map<number, SherpaStream>();
  private readonly failedLoads = new Map<string, { error: LserveError; until: number }>();
  private nextModel = 1;
  private nextStream = 1;
  private closed = false;

  constructor(options: SupervisorOptions = {}) {
    this.options = {
      maxStreams: options.maxStreams ?? DEFAULTS.maxStreams,
      highWaterSeconds: options.highWaterSeconds ?? DEFAULTS.highWaterSeconds,
      maxBufferedSeconds: options.maxBufferedSeconds ?? DEFAULTS.maxBufferedSeconds,
      loadRetryDelayMs: options.loadRetryDelayMs ?? DEFAULTS.loadRetryDelayMs,
      log: options.log,
      sherpaModule: options.sherpaModule ?? SHERPA_MODULE,
    };
  }

  get maxStreams(): number {
    return this.options.maxStreams;
  }

  /** The recognizer process's pid, while one runs. */
  get pid(): number | undefined {
    return this.child && !this.child.exited ? this.child.pid : undefined;
  }

  /** Streams open now (all models). */
  get activeStreams(): number {
    return this.streams.size;
  }

  /** Loads a model into the shared process; resolves to its key. Rejects with ModelLoadError naming `name`. */
  async load(name: string, config: SherpaRecognizerConfig): Promise<string> {
    if (this.closed) throw new ServerError('The streaming speech recognizer is shut down.');
    const configKey = JSON.stringify(config);
    const failed = this.failedLoads.get(configKey);
    if (failed && failed.until > Date.now()) throw failed.error;
    this.failedLoads.delete(configKey);
    const key = `m${this.nextModel++}`;
    try {
      if (this.streams.size > 0) {
        // Live streams share the process: try the model where a crash hurts no one.
        const probe = this.spawnChild();
        try {
          await this.loadInto(probe, 'probe', name, config);
        } finally {
          this.stop(probe);
        }
      }
      await this.loadInto(this.ensureChild(), key, name, config);
    } catch (error) {
      if (error instanceof LserveError && crashes.has(error)) {
        this.failedLoads.set(configKey, { error, until: Date.now() + this.options.loadRetryDelayMs });
      }
      throw error;
    }
    this.models.set(key, { name, config });
    return key;
  }

  /** Opens a stream on a loaded model. Throws OverloadedError when maxStreams are open. */
  open(key: string): RecognizerStream {
    const model = this.models.get(key);
    if (!model || this.closed) throw new ServerError('This streaming model was unloaded; load it again.');
    if (this.streams.size >= this.options.maxStreams) {
      throw new OverloadedError(`All ${this.options.maxStreams} streaming speech recognition slots are in use; retry when a stream ends.`);
    }
    const child = this.ensureChild();
    if (!child.loaded.has(key) && !child.loads.has(key) && !child.lazyLoads.has(key)) {
      // A restarted process: load the model again before the stream (messages are handled in order).
      child.lazyLoads.add(key);
      this.send(child, { t: 'load', key, config: model.config });
    }
    const stream = new SherpaStream(this.nextStream++, key, child, this, {
      highWater: this.options.highWaterSeconds * SAMPLE_RATE,
      cap: this.options.maxBufferedSeconds * SAMPLE_RATE,
      capSeconds: this.options.maxBufferedSeconds,
    });
    this.streams.set(stream.id, stream);
    this.send(child, { t: 'open', sid: stream.id, key });
    this.updateRef(child);
    return stream;
  }

  /** Drops a model; its open streams fail. Stops the process when no model is left. */
  unload(key: string): void {
    if (!this.models.delete(key)) return;
    for (const stream of [...this.streams.values()]) {
      if (stream.key === key) stream.fail(new ServerError('The streaming model was unloaded while this stream was open.'));
    }
    const child = this.child;
    if (!child) return;
    child.loaded.delete(key);
    child.lazyLoads.delete(key);
    if (this.models.size === 0 && child.loads.size === 0) {
      this.stop(child);
      this.child = undefined;
    } else {
      this.send(child, { t: 'unload', key });
    }
  }

  /** Fails every stream and stops the process (server shutdown). */
  close(): void {
    this.closed = true;
    for (const stream of [...this.streams.values()]) stream.fail(new ServerError('The server is shutting down.'));
    this.models.clear();
    if (this.child) this.stop(this.child);
    this.child = undefined;
  }

  // ---- used by SherpaStream ----

  /** @internal */
  send(child: ChildHandle, message: ParentMessage): void {
    if (child.exited || !child.proc.connected) return;
    try {
      child.proc.send(message);
    } catch {
      // The channel closed under us: the exit handler reports it.
    }
  }

  /** @internal A stream's listener threw: a caller's bug, reported, never allowed to take the server down. */
  listenerFailed(error: unknown): void {
    process.emitWarning(`a streaming speech recognition listener threw: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  }

  /** @internal */
  forget(stream: SherpaStream): void {
    if (this.streams.get(stream.id) === stream) this.streams.delete(stream.id);
    this.updateRef(stream.child);
  }

  // ---- process management ----

  private ensureChild(): ChildHandle {
    if (!this.child || this.child.exited) this.child = this.spawnChild();
    return this.child;
  }

  private spawnChild(): ChildHandle {
    const proc = spawn(process.execPath, ['--expose-gc', '-e', CHILD_SOURCE], {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
      serialization: 'advanced',
      env: { ...process.env, LSERVE_SHERPA_MODULE: this.options.sherpaModule },
      windowsHide: true,
    });
    const child: ChildHandle = { proc, pid: proc.pid, loaded: new Set(), loads: new Map(), lazyLoads: new Set(), stderr: '', stderrTotal: 0, stopping: false, exited: false };
    proc.stderr?.setEncoding('utf8');
    proc.stderr?.on('data', (chunk: string) => {
      child.stderrTotal += chunk.length;
      child.stderr = (child.stderr + chunk).slice(-STDERR_TAIL_BYTES);
      for (const line of chunk.split('\n')) if (line.trim()) this.options.log?.(`sherpa-onnx[${child.pid}]: ${line.trim()}`);
    });
    proc.on('message', (message: ChildMessage) => this.onMessage(child, message));
    proc.on('error', (error) => {
      child.fatal ??= `the recognizer process could not be started: ${error.message}`;
      this.onExit(child, null, null);
    });
    // 'close', not 'exit': it comes after the IPC channel and stderr are drained, so
    // every message the child sent (a 'fatal', sherpa's last log lines) is in by then.
    proc.on('close', (code: number | null, signal: NodeJS.Signals | null) => this.onExit(child, code, signal));
    this.options.log?.(`started the sherpa-onnx recognizer process (pid ${proc.pid})`);
    this.updateRef(child);
    return child;
  }

  /** Asks a process to exit (it does when its IPC channel closes), with a kill as a backstop. */
  private stop(child: ChildHandle): void {
    if (child.exited) return;
    child.stopping = true;
    if (child.proc.connected) child.proc.disconnect();
    const timer = setTimeout(() => {
      if (!child.exited) child.proc.kill('SIGKILL');
    }, 5000);
    timer.unref();
  }

  private loadInto(child: ChildHandle, key: string, name: string, config: SherpaRecognizerConfig): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      child.loads.set(key, { name, stderrFrom: child.stderrTotal, resolve, reject });
      this.updateRef(child);
      this.send(child, { t: 'load', key, config });
    });
  }

  private onMessage(child: ChildHandle, message: ChildMessage): void {
    switch (message.t) {
      case 'ready':
        this.options.log?.(`sherpa-onnx ${message.version} ready (pid ${child.pid})`);
        return;
      case 'fatal':
        child.fatal = `sherpa-onnx-node could not be loaded: ${message.error.split('\n')[0]}`;
        return;
      case 'loaded': {
        const pending = child.loads.get(message.key);
        child.loads.delete(message.key);
        child.lazyLoads.delete(message.key);
        if (message.ok) {
          child.loaded.add(message.key);
          pending?.resolve();
        } else {
          const detail = sherpaMessages(child.stderr, pending ? child.stderrTotal - pending.stderrFrom : 0);
          const name = pending?.name ?? this.models.get(message.key)?.name ?? message.key;
          const error = new ModelLoadError(`Model '${name}' could not be loaded by sherpa-onnx: ${message.error}${detail ? ` (${detail})` : ''}`);
          if (pending) pending.reject(error);
          for (const stream of [...this.streams.values()]) if (stream.child === child && stream.key === message.key) stream.fail(error);
        }
        this.updateRef(child);
        return;
      }
      case 'result':
        this.streams.get(message.sid)?.deliver({ text: message.text, isFinal: message.isFinal, segment: message.segment });
        return;
      case 'progress':
        this.streams.get(message.sid)?.progress(message.consumed);
        return;
      case 'end':
        this.streams.get(message.sid)?.end();
        return;
      case 'error':
        this.streams.get(message.sid)?.fail(new ServerError(`Speech recognition failed: ${message.error}`), false);
        return;
    }
  }

  private onExit(child: ChildHandle, code: number | null, signal: NodeJS.Signals | null): void {
    if (child.exited) return;
    child.exited = true;
    if (this.child === child) this.child = undefined;
    const how = child.fatal ? `failed (${child.fatal})` : signal ? `was killed (${signal})` : `exited with code ${code}`;
    if (child.loads.size || this.streams.size) this.options.log?.(`the sherpa-onnx recognizer process (pid ${child.pid}) ${how}`);
    for (const pending of child.loads.values()) {
      if (child.fatal || child.stopping) {
        pending.reject(new ServerError(`Model '${pending.name}' could not be loaded: ${child.fatal ?? 'the streaming recognizer was shut down meanwhile'}.`));
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
    for (const stream of [...this.streams.values()]) {
      if (stream.child !== child) continue;
      stream.fail(new ServerError(`The speech recognizer process ${how}; this stream was lost. Open a new stream to continue.`), false);
    }
  }

  /**
   * The process must not keep the server (or a CLI command) alive by itself,
   * but must while it has work: a stream waiting for results, a pending load.
   */
  private updateRef(child: ChildHandle): void {
    if (child.exited) return;
    const busy = child.loads.size > 0 || [...this.streams.values()].some((s) => s.child === child);
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

interface Limits {
  highWater: number;
  cap: number;
  capSeconds: number;
}

class SherpaStream implements RecognizerStream {
  private current: StreamState = 'open';
  private sent = 0;
  private consumed = 0;
  private waitingForDrain = false;
  private listenerFailed = false;
  private readonly listeners: { [E in keyof RecognizerStreamEvents]: Set<RecognizerStreamEvents[E]> } = {
    result: new Set(),
    error: new Set(),
    end: new Set(),
    drain: new Set(),
  };

  constructor(
    readonly id: number,
    readonly key: string,
    readonly child: ChildHandle,
    private readonly supervisor: SherpaSupervisor,
    private readonly limits: Limits,
  ) {}

  get state(): StreamState {
    return this.current;
  }

  push(samples: Float32Array): boolean {
    if (this.current === 'finishing') throw new InvalidRequestError('Audio was pushed after finish().');
    if (this.current !== 'open') return false;
    if (samples.length === 0) return !this.waitingForDrain;
    const pending = this.sent - this.consumed + samples.length;
    if (pending > this.limits.cap) {
      this.fail(
        new OverloadedError(
          `Audio is arriving faster than it can be recognized: more than ${this.limits.capSeconds} s wait to be decoded. Send audio in real time, or wait for 'drain' when push() returns false.`,
        ),
      );
      return false;
    }
    this.supervisor.send(this.child, { t: 'audio', sid: this.id, samples, sampleRate: SAMPLE_RATE });
    this.sent += samples.length;
    if (pending > this.limits.highWater) this.waitingForDrain = true;
    return !this.waitingForDrain;
  }

  finish(): void {
    if (this.current !== 'open') return;
    this.current = 'finishing';
    this.supervisor.send(this.child, { t: 'finish', sid: this.id, tailPaddingSeconds: TAIL_PADDING_SECONDS });
  }

  close(): void {
    if (this.current !== 'open' && this.current !== 'finishing') return;
    this.current = 'closed';
    this.supervisor.send(this.child, { t: 'close', sid: this.id });
    this.supervisor.forget(this);
  }

  on<E extends keyof RecognizerStreamEvents>(event: E, listener: RecognizerStreamEvents[E]): () => void {
    const set = this.listeners[event] as Set<RecognizerStreamEvents[E]>;
    set.add(listener);
    return () => set.delete(listener);
  }

  /** Calls each listener; one that throws is reported (once per stream) and the others still run. */
  private emit<E extends keyof RecognizerStreamEvents>(event: E, call: (listener: RecognizerStreamEvents[E]) => void): void {
    for (const listener of [...(this.listeners[event] as Set<RecognizerStreamEvents[E]>)]) {
      try {
        call(listener);
      } catch (error) {
        // Reported once per stream: a listener that throws on every result must not flood the log.
        if (!this.listenerFailed) this.supervisor.listenerFailed(error);
        this.listenerFailed = true;
      }
    }
  }

  /** @internal */
  deliver(result: RecognitionResult): void {
    if (this.current !== 'open' && this.current !== 'finishing') return;
    this.emit('result', (listener) => listener(result));
  }

  /** @internal */
  progress(consumed: number): void {
    this.consumed = consumed;
    if (this.waitingForDrain && this.sent - this.consumed <= this.limits.highWater / 2) {
      this.waitingForDrain = false;
      if (this.current === 'open') this.emit('drain', (listener) => listener());
    }
  }

  /** @internal */
  end(): void {
    if (this.current !== 'finishing') return;
    this.current = 'ended';
    this.supervisor.forget(this);
    this.emit('end', (listener) => listener());
  }

  /** @internal Fails the stream; `tellChild` false when the child already forgot it (or is gone). */
  fail(error: LserveError, tellChild = true): void {
    if (this.current !== 'open' && this.current !== 'finishing') return;
    this.current = 'failed';
    if (tellChild) this.supervisor.send(this.child, { t: 'close', sid: this.id });
    this.supervisor.forget(this);
    this.emit('error', (listener) => listener(error));
  }
}
