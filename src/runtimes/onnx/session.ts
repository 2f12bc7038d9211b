import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { WorkerCalls } from '../worker/worker-calls.js';
import { machineThreads } from './threads.js';

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

export type TensorType = 'float32' | 'float16' | 'int64' | 'int32' | 'bool' | 'uint8';

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

type Shape = ReadonlyArray<number | string | undefined>;

interface Described {
  inputNames: string[];
  outputNames: string[];
  inputShapes: Shape[];
  outputShapes: Shape[];
  /** Element type of each input and output as ORT names it ('float16', 'int64', …); '' for non-tensors. */
  inputTypes: string[];
  outputTypes: string[];
}

interface WireTensor {
  type: TensorType;
  buffer: ArrayBuffer;
  byteOffset: number;
  length: number;
  dims: number[];
}

/** What a run sends back: its fetched outputs. */
type RunResult = { outputs: Record<string, WireTensor> };

const VIEWS = { float32: Float32Array, float16: Uint16Array, int64: BigInt64Array, int32: Int32Array, bool: Uint8Array, uint8: Uint8Array } as const;

/**
 * Worker body, kept as a CommonJS string so it runs the same from dist/ and
 * from TypeScript sources under the test runner (which cannot start a .ts
 * worker file). It only loads ORT, runs, and posts results back.
 */
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const ort = require(workerData.ort);
let session;
const kept = new Map();
const shapes = (meta) => meta.map((m) => (m && m.isTensor ? Array.from(m.shape) : []));
const types = (meta) => meta.map((m) => (m && m.isTensor ? String(m.type) : ''));
const VIEWS = { float32: Float32Array, float16: Uint16Array, int64: BigInt64Array, int32: Int32Array, bool: Uint8Array, uint8: Uint8Array };
const toTensor = (t) => new ort.Tensor(t.type, new VIEWS[t.type](t.buffer, t.byteOffset, t.length), t.dims);
parentPort.on('message', async (msg) => {
  try {
    if (msg.type === 'create') {
      session = await ort.InferenceSession.create(msg.path, msg.options);
      parentPort.postMessage({ id: msg.id, ok: true, result: { inputNames: [...session.inputNames], outputNames: [...session.outputNames],
        inputShapes: shapes(session.inputMetadata), outputShapes: shapes(session.outputMetadata),
        inputTypes: types(session.inputMetadata), outputTypes: types(session.outputMetadata) } });
    } else if (msg.type === 'run') {
      const feeds = {};
      for (const [name, feed] of Object.entries(msg.feeds)) {
        if (feed.kept === undefined) feeds[name] = toTensor(feed);
        else if (kept.has(feed.kept)) feeds[name] = kept.get(feed.kept);
        else throw new Error('no kept tensor named ' + feed.kept);
      }
      const results = await session.run(feeds);
      for (const [output, name] of Object.entries(msg.keep)) kept.set(name, results[output]);
      for (const [input, name] of Object.entries(msg.keepInputs)) kept.set(name, feeds[input]);
      const outputs = {};
      const transfer = [];
      for (const name of msg.fetch) {
        const out = results[name];
        if (!out) throw new Error('the model has no output named ' + name);
        const dims = Array.from(out.dims);
        let data;
        const rows = msg.rows[name];
        if (rows) {
          const size = dims.slice(2).reduce((a, b) => a * b, 1);
          data = new VIEWS[out.type](rows.length * size);
          rows.forEach((row, i) => data.set(out.data.subarray(row * size, (row + 1) * size), i * size));
          dims[1] = rows.length;
        } else {
          // A kept output may be fed again: send a copy, keep the original.
          data = msg.keep[name] === undefined ? out.data : out.data.slice();
        }
        outputs[name] = { type: out.type, buffer: data.buffer, byteOffset: data.byteOffset, length: data.length, dims };
        if (!transfer.includes(data.buffer)) transfer.push(data.buffer);
      }
      parentPort.postMessage({ id: msg.id, ok: true, result: { outputs } }, transfer);
    } else if (msg.type === 'drop') {
      for (const name of [...kept.keys()]) if (name.startsWith(msg.prefix)) kept.delete(name);
      parentPort.postMessage({ id: msg.id, ok: true });
    } else if (msg.type === 'release') {
      kept.clear();
      await session.release();
      parentPort.postMessage({ id: msg.id, ok: true });
    }
  } catch (error) {
    parentPort.postMessage({ id: msg.id, ok: false, error: String((error && error.message) || error) });
  }
});
`;

const ORT_PATH = createRequire(import.meta.url).resolve('onnxruntime-node');

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

  static async create(path: string, options: OnnxSessionOptions): Promise<OnnxSession> {
    const worker = new WorkerCalls(new Worker(WORKER, { eval: true, workerData: { ort: ORT_PATH } }), {
      exited: 'the ONNX Runtime worker exited',
      error: (message) => new Error(`${path}: ${message}`),
    });
    try {
      return new OnnxSession(worker, path, await worker.call<Described>({ type: 'create', path, options: ortSessionOptions(options) }));
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
      const reply = await this.worker.call<RunResult>({ type: 'run', feeds: wire, fetch: [...options.fetch], keep: { ...options.keep }, keepInputs: { ...options.keepInputs }, rows: { ...options.rows } }, transfer);
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
    const next = this.queue.then(() => this.worker.call({ type: 'drop', prefix }));
    this.queue = next.catch(() => undefined);
    await next;
  }

  async release(): Promise<void> {
    await this.queue;
    await this.worker.close({ type: 'release' });
  }
}
