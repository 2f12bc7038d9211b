import { startModuleWorker } from '../launch/module-entry.js';
import { WorkerCalls } from '../worker/worker-calls.js';
import { VIEWS, type Described, type RunResult, type SessionRequest, type Shape, type TensorType, type WireTensor } from './tensor-wire.js';
import { machineThreads } from './threads.js';

export type { TensorType } from './tensor-wire.js';

/**
 * The one place ONNX Runtime sessions are made, so every ONNX model in lserve
 * gets the same settings: full graph optimisation, intra-op threads from the
 * machine's one plan (threads.ts), one run at a time per session, and
 * inference off the main thread. onnxruntime-node's `run()` returns a
 * promise but computes synchronously on the calling thread (measured: a
 * 430 ms detector run froze the event loop for all of it), so each session
 * lives in its own worker thread and tensors cross by transfer, not copy.
 */

export interface OnnxSessionOptions {
  /** Intra-op threads; 0 for the machine's budget (threads.ts: the thread plan). */
  threads: number;
  /**
   * ONNX Runtime's memory pattern (default on): from the second run with the
   * same shapes, the whole run's activations are allocated as one planned
   * block. In the CPU arena that block comes on top of what the first run
   * left there, so repeated runs hold up to twice the activations (an SD
   * UNet at 512×512: +0.77 GB, its VAE decoder +1 GB).
   */
  memoryPattern?: boolean;
}

/** The typed array each element type travels in (float16 as raw bits, bool as bytes). */
export interface TensorData {
  float32: Float32Array;
  float16: Uint16Array;
  int64: BigInt64Array;
  int32: Int32Array;
  bool: Uint8Array;
  uint8: Uint8Array;
}

export interface Tensor<T extends TensorType = TensorType> {
  type: T;
  data: TensorData[T];
  dims: readonly number[];
}

/** A float32 output. */
export interface TensorOutput {
  data: Float32Array;
  dims: readonly number[];
}

/** An input: a tensor sent from here, or one a previous run kept in the worker. */
export type Feed = Tensor | { kept: string };

export interface RunOptions {
  /** Outputs to send back. */
  fetch: readonly string[];
  /**
   * Outputs to keep in the worker under a name, for a later run to feed back
   * without crossing threads (a decoder's KV cache: present.* → past.*).
   * Kept tensors with the same name are replaced.
   */
  keep?: Readonly<Record<string, string>>;
  /** Inputs to keep likewise (a decoder's encoder states, sent once per window). */
  keepInputs?: Readonly<Record<string, string>>;
  /**
   * Positions to send back of a fetched `[1, sequence, …]` output (batch 1), by
   * output name (a decoder's logits: only the rows it samples from, not
   * sequence × vocabulary floats).
   */
  rows?: Readonly<Record<string, readonly number[]>>;
}



/**
 * ONNX Runtime session options every lserve session uses, for code that owns
 * its sessions in a worker of its own (a generation loop that would otherwise
 * cross threads once per step).
 */
export function ortSessionOptions(options: OnnxSessionOptions) {
  return {
    graphOptimizationLevel: 'all' as const,
    executionMode: 'sequential' as const,
    interOpNumThreads: 1,
    intraOpNumThreads: machineThreads(options.threads),
    logSeverityLevel: 3 as const,
    ...(options.memoryPattern === false ? { enableMemPattern: false } : {}),
    // Idle ORT threads would otherwise spin after each run, taking cores
    // from llama.cpp and other requests in the same process.
    extra: { session: { intra_op: { allow_spinning: '0' } } },
  };
}

/** One session per path; a path that may be undefined may give none. */
type Sessions<P> = { [K in keyof P]: undefined extends P[K] ? OnnxSession | undefined : OnnxSession };

export class OnnxSession {
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly worker: WorkerCalls,
    readonly path: string,
    private readonly described: Described,
  ) {}

  /** A session of the model at `path`, or of `model`'s bytes (built in memory; `path` names it in errors), which are transferred. */
  static async create(path: string, options: OnnxSessionOptions, model?: Uint8Array): Promise<OnnxSession> {
    const worker = new WorkerCalls(startModuleWorker(new URL('./session-worker.js', import.meta.url)), {
      exited: 'the ONNX Runtime worker exited',
      error: (message) => new Error(`${path}: ${message}`),
    });
    try {
      // Only a view of a whole buffer of its own is transferred: a Node Buffer may share its memory with others.
      const owned = model && (model.byteOffset !== 0 || model.byteLength !== model.buffer.byteLength) ? Uint8Array.prototype.slice.call(model) : model;
      const request = { type: 'create', path, ...(owned ? { model: owned } : {}), options: ortSessionOptions(options) } satisfies SessionRequest;
      return new OnnxSession(worker, path, await worker.call<Described>(request, owned ? [owned.buffer as ArrayBuffer] : []));
    } catch (error) {
      await worker.terminate();
      throw error;
    }
  }

  /**
   * Creates one session per path, all at once; if any fails, the ones that
   * were created are released (no worker thread left behind) and the first
   * failure is thrown.
   */
  static async createAll<P extends Record<string, string | undefined>>(paths: P, options: OnnxSessionOptions): Promise<Sessions<P>> {
    const entries = Object.entries(paths).filter((e): e is [string, string] => e[1] !== undefined);
    const settled = await Promise.allSettled(entries.map(([, path]) => OnnxSession.create(path, options)));
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      await Promise.all(settled.map((r) => (r.status === 'fulfilled' ? r.value.release() : undefined)));
      throw failed.reason;
    }
    return Object.fromEntries(entries.map(([key], i) => [key, (settled[i] as PromiseFulfilledResult<OnnxSession>).value])) as Sessions<P>;
  }

  get inputName(): string {
    return this.described.inputNames[0]!;
  }

  get outputName(): string {
    return this.described.outputNames[0]!;
  }

  /** Static input shape as declared by the model (strings for dynamic axes). */
  inputShape(): Shape {
    return this.described.inputShapes[0] ?? [];
  }

  outputShape(): Shape {
    return this.described.outputShapes[0] ?? [];
  }

  /** Declared shape and element type of a named input or output (graphs whose tensors differ in type by export: fp16 or fp32). */
  describe(name: string): { shape: Shape; type: string } | undefined {
    const d = this.described;
    const i = d.inputNames.indexOf(name);
    if (i >= 0) return { shape: d.inputShapes[i] ?? [], type: d.inputTypes[i] ?? '' };
    const o = d.outputNames.indexOf(name);
    if (o >= 0) return { shape: d.outputShapes[o] ?? [], type: d.outputTypes[o] ?? '' };
    return undefined;
  }

  /** Names of the model's inputs and outputs, in graph order. */
  get inputNames(): readonly string[] {
    return this.described.inputNames;
  }

  get outputNames(): readonly string[] {
    return this.described.outputNames;
  }

  /**
   * Runs the model on one float32 input and returns its first output. Runs
   * are serialised per session. `input`'s buffer is transferred to the
   * worker: the caller must not use it afterwards.
   */
  async run(input: Float32Array, dims: readonly number[]): Promise<TensorOutput> {
    const outputs = await this.runWith({ [this.inputName]: { type: 'float32', data: input, dims } }, { fetch: [this.outputName] });
    const out = outputs[this.outputName]!;
    if (out.type !== 'float32') throw new Error(`${this.path}: expected a float32 output, got ${out.type}`);
    return { data: out.data as Float32Array, dims: out.dims };
  }

  /**
   * Runs the model on named inputs and returns the outputs asked for. Runs
   * are serialised per session. Every sent tensor's buffer is transferred to
   * the worker: the caller must not use it afterwards.
   */
  runWith(feeds: Readonly<Record<string, Feed>>, options: RunOptions): Promise<Record<string, Tensor>> {
    const wire: Record<string, WireTensor | { kept: string }> = {};
    const transfer: ArrayBuffer[] = [];
    for (const [name, feed] of Object.entries(feeds)) {
      if ('kept' in feed) {
        wire[name] = feed;
        continue;
      }
      const { buffer, byteOffset, length } = feed.data;
      wire[name] = { type: feed.type, buffer: buffer as ArrayBuffer, byteOffset, length, dims: [...feed.dims] };
      if (!transfer.includes(buffer as ArrayBuffer)) transfer.push(buffer as ArrayBuffer);
    }
    const next = this.queue.then(async () => {
      const reply = await this.worker.call<RunResult>(
        { type: 'run', feeds: wire, fetch: [...options.fetch], keep: { ...options.keep }, keepInputs: { ...options.keepInputs }, rows: { ...options.rows } } satisfies SessionRequest,
        transfer,
      );
      const outputs: Record<string, Tensor> = {};
      for (const [name, t] of Object.entries(reply.outputs)) {
        outputs[name] = { type: t.type, data: new VIEWS[t.type](t.buffer, t.byteOffset, t.length), dims: t.dims } as Tensor;
      }
      return outputs;
    });
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Forgets the tensors kept in the worker whose names start with `prefix` (the end of one decode), or all of them. */
  async dropKept(prefix = ''): Promise<void> {
    const next = this.queue.then(() => this.worker.call({ type: 'drop', prefix } satisfies SessionRequest));
    this.queue = next.catch(() => undefined);
    await next;
  }

  async release(): Promise<void> {
    await this.queue;
    await this.worker.close({ type: 'release' } satisfies SessionRequest);
  }
}
