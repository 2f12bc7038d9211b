import { InvalidRequestError, LserveError, OverloadedError, ServerError } from '../../core/errors.js';
import type { RecognitionResult, RecognizerStream, RecognizerStreamEvents, StreamState } from '../../core/tasks/transcribe/streaming.js';
import { SherpaProcess, type ChildHandle, type ChildJob } from './process.js';
import type { RecognizerChildMessage, RecognizerParentMessage, SherpaRecognizerConfig } from './protocol.js';
import { RECOGNIZER_CHILD_SOURCE } from './recognizer-child.js';

/**
 * The server-side half of streaming speech recognition: one sherpa-onnx child
 * process (recognizer-child.ts) shared by every streaming model and stream,
 * supervised by process.ts (crash detection, restart, lazy reloads, probing a
 * new model while streams are open, refusing a model that killed it).
 *
 * - Models are loaded into the child by key; streams are multiplexed over its
 *   IPC channel by id. Audio crosses as Float32Array (V8 serialization).
 * - If the child dies (killed, crashed, sherpa's _Exit), every stream it held
 *   gets an `error` event and ends; the next open starts a new child.
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
  /** Called when the recognizer process is started again after it died. */
  onRestart?: (label: string) => void;
  /** The sherpa-onnx-node module the process loads (default: the installed package). */
  sherpaModule?: string;
}

export const DEFAULT_MAX_STREAMS = 16;
const DEFAULTS = { maxStreams: DEFAULT_MAX_STREAMS, highWaterSeconds: 2, maxBufferedSeconds: 30 };
/** Silence appended at finish() so the encoder sees a whole window past the last real sample. */
const TAIL_PADDING_SECONDS = 0.8;

export type { RecognitionResult, RecognizerStream, RecognizerStreamEvents, StreamState } from '../../core/tasks/transcribe/streaming.js';

type RecognizerProcess = SherpaProcess<SherpaRecognizerConfig, never, RecognizerParentMessage, RecognizerChildMessage>;

export class SherpaSupervisor {
  private readonly options: typeof DEFAULTS;
  private readonly process: RecognizerProcess;
  private readonly streams = new Map<number, SherpaStream>();
  private nextStream = 1;

  constructor(options: SupervisorOptions = {}) {
    this.options = {
      maxStreams: options.maxStreams ?? DEFAULTS.maxStreams,
      highWaterSeconds: options.highWaterSeconds ?? DEFAULTS.highWaterSeconds,
      maxBufferedSeconds: options.maxBufferedSeconds ?? DEFAULTS.maxBufferedSeconds,
    };
    this.process = new SherpaProcess({
      label: 'speech recognizer',
      source: RECOGNIZER_CHILD_SOURCE,
      lostJob: (how) => new ServerError(`The speech recognizer process ${how}; this stream was lost. Open a new stream to continue.`),
      onMessage: (message) => this.onMessage(message),
      loadRetryDelayMs: options.loadRetryDelayMs,
      log: options.log,
      onRestart: options.onRestart,
      sherpaModule: options.sherpaModule,
    });
  }

  get maxStreams(): number {
    return this.options.maxStreams;
  }

  /** The recognizer process's pid, while one runs. */
  get pid(): number | undefined {
    return this.process.pid;
  }

  /** Streams open now (all models). */
  get activeStreams(): number {
    return this.streams.size;
  }

  /** Loads a model into the shared process; resolves to its key. Rejects with ModelLoadError naming `name`. */
  async load(name: string, config: SherpaRecognizerConfig): Promise<string> {
    return (await this.process.load(name, config)).key;
  }

  /** Opens a stream on a loaded model. Throws OverloadedError when maxStreams are open. */
  open(key: string): RecognizerStream {
    const unloaded = () => new ServerError('This streaming model was unloaded; load it again.');
    if (this.streams.size >= this.options.maxStreams) {
      throw new OverloadedError(`All ${this.options.maxStreams} streaming speech recognition slots are in use; retry when a stream ends.`);
    }
    const stream = this.process.open(
      key,
      (child) =>
        new SherpaStream(this.nextStream++, key, child, this, {
          highWater: this.options.highWaterSeconds * SAMPLE_RATE,
          cap: this.options.maxBufferedSeconds * SAMPLE_RATE,
          capSeconds: this.options.maxBufferedSeconds,
        }),
      unloaded,
    );
    this.streams.set(stream.id, stream);
    this.send(stream.child, { t: 'open', sid: stream.id, key });
    return stream;
  }

  /** Drops a model; its open streams fail. Stops the process when no model is left. */
  unload(key: string): void {
    this.process.unload(key, new ServerError('The streaming model was unloaded while this stream was open.'));
  }

  /** Fails every stream and stops the process (server shutdown). */
  close(): void {
    this.process.close(new ServerError('The server is shutting down.'));
  }

  // ---- used by SherpaStream ----

  /** @internal */
  send(child: ChildHandle, message: RecognizerParentMessage): void {
    this.process.send(child, message);
  }

  /** @internal A stream's listener threw: a caller's bug, reported, never allowed to take the server down. */
  listenerFailed(error: unknown): void {
    process.emitWarning(`a streaming speech recognition listener threw: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  }

  /** @internal */
  forget(stream: SherpaStream): void {
    if (this.streams.get(stream.id) === stream) this.streams.delete(stream.id);
    this.process.forget(stream);
  }

  private onMessage(message: RecognizerChildMessage): void {
    switch (message.t) {
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
}

interface Limits {
  highWater: number;
  cap: number;
  capSeconds: number;
}

class SherpaStream implements RecognizerStream, ChildJob {
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
