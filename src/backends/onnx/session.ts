import * as ort from 'onnxruntime-node';

/**
 * The one place ONNX Runtime sessions are made, so every ONNX model in lserve
 * gets the same settings: full graph optimisation, a configurable intra-op
 * thread count, and one run at a time per session (concurrent runs on one
 * session would only fight over the same cores and make latency erratic).
 */

export interface OnnxSessionOptions {
  /** Intra-op threads; 0 lets ONNX Runtime use every core. */
  threads: number;
}

export interface TensorOutput {
  data: Float32Array;
  dims: readonly number[];
}

export class OnnxSession {
  private queue: Promise<unknown> = Promise.resolve();

  private constructor(
    readonly session: ort.InferenceSession,
    readonly path: string,
  ) {}

  static async create(path: string, options: OnnxSessionOptions): Promise<OnnxSession> {
    const session = await ort.InferenceSession.create(path, {
      graphOptimizationLevel: 'all',
      executionMode: 'sequential',
      interOpNumThreads: 1,
      ...(options.threads > 0 ? { intraOpNumThreads: options.threads } : {}),
      logSeverityLevel: 3,
    });
    return new OnnxSession(session, path);
  }

  get inputName(): string {
    return this.session.inputNames[0]!;
  }

  get outputName(): string {
    return this.session.outputNames[0]!;
  }

  /** Static input shape as declared by the model (strings/undefined for dynamic axes). */
  inputShape(): ReadonlyArray<number | string | undefined> {
    const meta = this.session.inputMetadata[0];
    return meta && meta.isTensor ? meta.shape : [];
  }

  outputShape(): ReadonlyArray<number | string | undefined> {
    const meta = this.session.outputMetadata[0];
    return meta && meta.isTensor ? meta.shape : [];
  }

  /** Runs the model on one float32 input and returns its first output. Runs are serialised per session. */
  run(input: Float32Array, dims: readonly number[]): Promise<TensorOutput> {
    const next = this.queue.then(async () => {
      const feeds = { [this.inputName]: new ort.Tensor('float32', input, dims) };
      const results = await this.session.run(feeds);
      const out = results[this.outputName]!;
      if (out.type !== 'float32') throw new Error(`${this.path}: expected a float32 output, got ${out.type}`);
      return { data: out.data as Float32Array, dims: out.dims };
    });
    this.queue = next.catch(() => undefined);
    return next;
  }

  async release(): Promise<void> {
    await this.queue;
    await this.session.release();
  }
}
