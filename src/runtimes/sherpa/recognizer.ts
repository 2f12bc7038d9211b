import { InvalidRequestError, LserveError, OverloadedError, ServerError } from '../../core/errors.js';
import type { RecognitionResult, RecognizerStream, RecognizerStreamEvents, StreamState } from '../../core/tasks/transcribe/streaming.js';
import type { ChildHandle, ChildJob } from './process.js';
import type { RecognizerChildMessage, RecognizerProtocol, ServiceMessage, SherpaRecognizerConfig } from './protocol.js';
import { SherpaSupervisor, type EngineHooks, type SherpaModel, type SupervisorOptions } from './supervisor.js';

/**
 * Streaming speech recognition on the sherpa supervisor (supervisor.ts): one
 * child process (recognizer-child.ts) shared by every streaming model and
 * stream (crash detection, restart, lazy reloads, probing a new model while
 * streams are open, refusing a model that killed it: process.ts).
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

export interface RecognizerOptions extends SupervisorOptions {
  /** Concurrent streams across all streaming models (default 16). */
  maxStreams?: number;
  /** Undecoded audio per stream above which push() returns false until 'drain' (default 2 s). */
  highWaterSeconds?: number;
  /** Undecoded audio per stream beyond which the stream fails with OverloadedError (default 30 s). */
  maxBufferedSeconds?: number;
}

export const DEFAULT_MAX_STREAMS = 16;
const DEFAULTS = { maxStreams: DEFAULT_MAX_STREAMS, highWaterSeconds: 2, maxBufferedSeconds: 30 };
/** Silence appended at finish() so the encoder sees a whole window past the last real sample. */
const TAIL_PADDING_SECONDS = 0.8;

export type { RecognitionResult, RecognizerStream, RecognizerStreamEvents, StreamState } from '../../core/tasks/transcribe/streaming.js';

/** A streaming model loaded into the recognizer process. */
export type RecognizerModel = SherpaModel<RecognizerProtocol>;

export class SherpaRecognizer {
  private readonly options: typeof DEFAULTS;
  private readonly supervisor: SherpaSupervisor<RecognizerProtocol>;

  constructor(options: RecognizerOptions = {}) {
    this.options = {
      maxStreams: options.maxStreams ?? DEFAULTS.maxStreams,
      highWaterSeconds: options.highWaterSeconds ?? DEFAULTS.highWaterSeconds,
      maxBufferedSeconds: options.maxBufferedSeconds ?? DEFAULTS.maxBufferedSeconds,
    };
    this.supervisor = new SherpaSupervisor<RecognizerProtocol>(
      {
        label: 'speech recognizer',
        entry: new URL('./recognizer-child.js', import.meta.url),
        lostJob: (how) => new ServerError(`The speech recognizer process ${how}; this stream was lost. Open a new stream to continue.`),
        jobOf: (message) => message.sid,
      },
      options,
    );
  }

  get maxStreams(): number {
    return this.options.maxStreams;
  }

  /** The recognizer process's pid, while one runs. */
  get pid(): number | undefined {
    return this.supervisor.pids[0];
  }

  /** Streams open now (all models). */
  get activeStreams(): number {
    return this.supervisor.activeJobs;
  }

  /** Loads a model into the shared process. Rejects with ModelLoadError naming `name`. */
  load(name: string, config: SherpaRecognizerConfig, engine: EngineHooks = {}): Promise<RecognizerModel> {
    return this.supervisor.load(name, config, engine);
  }

  /** Opens a stream on a loaded model. Throws OverloadedError when maxStreams are open. */
  open(model: RecognizerModel): RecognizerStream {
    const unloaded = () => new ServerError('This streaming model was unloaded; load it again.');
    if (this.activeStreams >= this.options.maxStreams) {
      throw new OverloadedError(`All ${this.options.maxStreams} streaming speech recognition slots are in use; retry when a stream ends.`);
    }
    const stream = model.open(
      (id, child) =>
        new SherpaStream(id, model, child, {
          highWater: this.options.highWaterSeconds * SAMPLE_RATE,
          cap: this.options.maxBufferedSeconds * SAMPLE_RATE,
          capSeconds: this.options.maxBufferedSeconds,
        }),
      unloaded,
    );
    model.send(stream, { t: 'open', sid: stream.id, key: model.key });
    return stream;
  }

  /** Drops a model; its open streams fail. Stops the process when no model is left. */
  unload(model: RecognizerModel): void {
    model.unload(new ServerError('The streaming model was unloaded while this stream was open.'));
  }

  /** Fails every stream and stops the process (server shutdown). */
  close(): void {
    this.supervisor.close(new ServerError('The server is shutting down.'));
  }
}

/** A stream's listener threw: a caller's bug, reported, never allowed to take the server down. */
function reportListenerError(error: unknown): void {
  process.emitWarning(`a streaming speech recognition listener threw: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
}

interface Limits {
  highWater: number;
  cap: number;
  capSeconds: number;
}

class SherpaStream implements RecognizerStream, ChildJob<RecognizerChildMessage> {
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
    private readonly model: RecognizerModel,
    readonly child: ChildHandle,
    private readonly limits: Limits,
  ) {}

  get key(): string {
    return this.model.key;
  }

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
    this.model.send(this, { t: 'audio', sid: this.id, samples, sampleRate: SAMPLE_RATE });
    this.sent += samples.length;
    if (pending > this.limits.highWater) this.waitingForDrain = true;
    return !this.waitingForDrain;
  }

  finish(): void {
    if (this.current !== 'open') return;
    this.current = 'finishing';
    this.model.send(this, { t: 'finish', sid: this.id, tailPaddingSeconds: TAIL_PADDING_SECONDS });
  }

  close(): void {
    if (this.current !== 'open' && this.current !== 'finishing') return;
    this.current = 'closed';
    this.model.send(this, { t: 'close', sid: this.id });
    this.model.forget(this);
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
        if (!this.listenerFailed) reportListenerError(error);
        this.listenerFailed = true;
      }
    }
  }

  /** @internal A message of the recognizer process about this stream. */
  receive(message: ServiceMessage<RecognizerChildMessage>): void {
    switch (message.t) {
      case 'result':
        this.deliver({ text: message.text, isFinal: message.isFinal, segment: message.segment });
        return;
      case 'progress':
        this.progress(message.consumed);
        return;
      case 'end':
        this.end();
        return;
      case 'error':
        this.fail(new ServerError(`Speech recognition failed: ${message.error}`), false);
        return;
    }
  }

  private deliver(result: RecognitionResult): void {
    if (this.current !== 'open' && this.current !== 'finishing') return;
    this.emit('result', (listener) => listener(result));
  }

  private progress(consumed: number): void {
    this.consumed = consumed;
    if (this.waitingForDrain && this.sent - this.consumed <= this.limits.highWater / 2) {
      this.waitingForDrain = false;
      if (this.current === 'open') this.emit('drain', (listener) => listener());
    }
  }

  private end(): void {
    if (this.current !== 'finishing') return;
    this.current = 'ended';
    this.model.forget(this);
    this.emit('end', (listener) => listener());
  }

  /** @internal Fails the stream; `tellChild` false when the child already forgot it (or is gone). */
  fail(error: LserveError, tellChild = true): void {
    if (this.current !== 'open' && this.current !== 'finishing') return;
    this.current = 'failed';
    if (tellChild) this.model.send(this, { t: 'close', sid: this.id });
    this.model.forget(this);
    this.emit('error', (listener) => listener(error));
  }
}
