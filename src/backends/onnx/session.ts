import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

/**
 * The one place ONNX Runtime sessions are made, so every ONNX model in lserve
 * gets the same settings: full graph optimisation, a configurable intra-op
 * thread count, one run at a time per session, and inference off the main
 * thread. onnxruntime-node's `run()` returns a promise but computes
 * synchronously on the calling thread (measured: a 430 ms detector run froze
 * the event loop for all of it), so each session lives in its own worker
 * thread and tensors cross by transfer, not copy.
 */

export interface OnnxSessionOptions {
  /** Intra-op threads; 0 lets ONNX Runtime use every core. */
  threads: number;
}

export interface TensorOutput {
  data: Float32Array;
  dims: readonly number[];
}

type Shape = ReadonlyArray<number | string | undefined>;

interface Described {
  inputNames: string[];
  outputNames: string[];
  inputShapes: Shape[];
  outputShapes: Shape[];
}

type Reply = ({ ok: true } & Partial<Described> & { buffer?: ArrayBuffer; byteOffset?: number; length?: number; dims?: number[]; type?: string }) | { ok: false; error: string };

/**
 * Worker body, kept as a CommonJS string so it runs the same from dist/ and
 * from TypeScript sources under the test runner (which cannot start a .ts
 * worker file). It only loads ORT, runs, and posts results back.
 */
const WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const ort = require(workerData.ort);
let session;
const shapes = (meta) => meta.map((m) => (m && m.isTensor ? Array.from(m.shape) : []));
parentPort.on('message', async (msg) => {
  try {
    if (msg.type === 'create') {
      session = await ort.InferenceSession.create(msg.path, msg.options);
      parentPort.postMessage({ id: msg.id, ok: true, inputNames: [...session.inputNames], outputNames: [...session.outputNames],
        inputShapes: shapes(session.inputMetadata), outputShapes: shapes(session.outputMetadata) });
    } else if (msg.type === 'run') {
      const input = new Float32Array(msg.buffer, msg.byteOffset, msg.length);
      const results = await session.run({ [msg.input]: new ort.Tensor('float32', input, msg.dims) });
      const out = results[msg.output];
      const data = out.data;
      parentPort.postMessage({ id: msg.id, ok: true, type: out.type, buffer: data.buffer, byteOffset: data.byteOffset, length: data.length, dims: Array.from(out.dims) }, [data.buffer]);
    } else if (msg.type === 'release') {
      await session.release();
      parentPort.postMessage({ id: msg.id, ok: true });
    }
  } catch (error) {
    parentPort.postMessage({ id: msg.id, ok: false, error: String((error && error.message) || error) });
  }
});
`;

const ORT_PATH = createRequire(import.meta.url).resolve('onnxruntime-node');

export class OnnxSession {
  private queue: Promise<unknown> = Promise.resolve();
  private nextId = 0;
  private readonly pending = new Map<number, (reply: Reply) => void>();

  private constructor(
    private readonly worker: Worker,
    readonly path: string,
    private readonly described: Described,
  ) {}

  static async create(path: string, options: OnnxSessionOptions): Promise<OnnxSession> {
    const worker = new Worker(WORKER, { eval: true, workerData: { ort: ORT_PATH } });
    const sessionOptions = {
      graphOptimizationLevel: 'all',
      executionMode: 'sequential',
      interOpNumThreads: 1,
      ...(options.threads > 0 ? { intraOpNumThreads: options.threads } : {}),
      logSeverityLevel: 3,
      // Idle ORT threads would otherwise spin after each run, taking cores
      // from llama.cpp and other requests in the same process.
      extra: { session: { intra_op: { allow_spinning: '0' } } },
    };
    const session = new OnnxSession(worker, path, { inputNames: [], outputNames: [], inputShapes: [], outputShapes: [] });
    worker.on('message', (reply: Reply & { id: number }) => {
      session.pending.get(reply.id)?.(reply);
      session.pending.delete(reply.id);
      if (session.pending.size === 0) worker.unref();
    });
    worker.on('error', (error) => session.failAll(error.message));
    worker.on('exit', () => session.failAll('the ONNX Runtime worker exited'));
    try {
      const reply = await session.call({ type: 'create', path, options: sessionOptions });
      Object.assign(session.described, reply);
    } catch (error) {
      await worker.terminate();
      throw error;
    }
    return session;
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

  /**
   * Runs the model on one float32 input and returns its first output. Runs
   * are serialised per session. `input`'s buffer is transferred to the
   * worker: the caller must not use it afterwards.
   */
  run(input: Float32Array, dims: readonly number[]): Promise<TensorOutput> {
    const next = this.queue.then(async () => {
      const reply = await this.call(
        { type: 'run', input: this.inputName, output: this.outputName, buffer: input.buffer, byteOffset: input.byteOffset, length: input.length, dims: [...dims] },
        [input.buffer as ArrayBuffer],
      );
      if (reply.type !== 'float32' || !reply.buffer) throw new Error(`${this.path}: expected a float32 output, got ${reply.type}`);
      return { data: new Float32Array(reply.buffer, reply.byteOffset, reply.length), dims: reply.dims ?? [] };
    });
    this.queue = next.catch(() => undefined);
    return next;
  }

  async release(): Promise<void> {
    await this.queue;
    try {
      await this.call({ type: 'release' });
    } finally {
      await this.worker.terminate();
    }
  }

  private call(message: Record<string, unknown>, transfer: ArrayBuffer[] = []): Promise<Extract<Reply, { ok: true }>> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, (reply) => (reply.ok ? resolve(reply) : reject(new Error(`${this.path}: ${reply.error}`))));
      // Keep the process alive only while a call is in flight.
      this.worker.ref();
      this.worker.postMessage({ ...message, id }, transfer);
    });
  }

  private failAll(message: string): void {
    for (const settle of this.pending.values()) settle({ ok: false, error: message });
    this.pending.clear();
  }
}
