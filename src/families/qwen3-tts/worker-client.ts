import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { guarded } from '../../core/guard.js';
import type { GenerateRequest, GeneratorInit, ReferenceCodes, StopReason } from './generator.js';

/**
 * The main thread's handle on the generator worker (worker.ts). One worker
 * per loaded model runs the whole frame loop. Measured (2 shared cores): a
 * message round trip to a session worker costs ≈ 200 µs, against ≈ 65 µs for
 * a code-predictor call at the test model's size and ≈ 80 ms at 0.6B's; a
 * frame takes 17 calls. So the hop is noise at the real size, but each one
 * also waits for the main thread's event loop: in one worker the loop never
 * waits on a busy server, the KV cache and the draws stay beside the graphs,
 * and only finished frames (16 codes) cross back.
 */

export class GeneratorError extends Error {
  constructor(
    message: string,
    /** The request field at fault, when the input was (an unknown language, speaker, empty text). */
    readonly param?: string,
  ) {
    super(message);
  }
}

type Reply = { id: number; ok: true; result?: unknown } | { id: number; ok: false; error: string; param?: string } | { id: number; frame: Int32Array };

interface Pending {
  settle: (reply: Extract<Reply, { ok: boolean }>) => void;
  onFrame?: (codes: Int32Array) => void;
}

/** The compiled worker beside this module, or — under the TypeScript sources (tests, tsx) — worker.ts through tsx's loader. */
function startWorker(): Worker {
  const compiled = new URL('./worker.js', import.meta.url);
  if (existsSync(fileURLToPath(compiled))) return new Worker(compiled);
  const source = new URL('./worker.ts', import.meta.url).href;
  const tsx = pathToFileURL(path.join(path.dirname(createRequire(import.meta.url).resolve('tsx/package.json')), 'dist/esm/api/index.mjs')).href;
  return new Worker(`import(${JSON.stringify(tsx)}).then(({ register }) => { register(); return import(${JSON.stringify(source)}); })`, { eval: true });
}

export class GeneratorWorker {
  private nextId = 0;
  private readonly pending = new Map<number, Pending>();
  private failure: string | undefined;

  private constructor(private readonly worker: Worker) {
    worker.on('message', (reply: Reply) => {
      const pending = this.pending.get(reply.id);
      if (!pending) return;
      if ('frame' in reply) {
        pending.onFrame?.(reply.frame);
        return;
      }
      this.pending.delete(reply.id);
      if (this.pending.size === 0) worker.unref();
      pending.settle(reply);
    });
    worker.on('error', (error) => this.failAll(error.message));
    worker.on('exit', () => this.failAll('the Qwen3-TTS generator worker exited'));
  }

  static async start(init: GeneratorInit): Promise<GeneratorWorker> {
    const client = new GeneratorWorker(startWorker());
    try {
      await client.call({ type: 'init', init });
    } catch (error) {
      await client.worker.terminate();
      throw error;
    }
    return client;
  }

  /** x-vector (and codes, for in-context cloning) of a 24 kHz reference voice. */
  encodeReference(samples: Float32Array, withCodes: boolean): Promise<ReferenceCodes> {
    return this.call({ type: 'reference', samples, withCodes }) as Promise<ReferenceCodes>;
  }

  /**
   * Runs one generation; `onFrame` receives each frame's codes as it is made.
   * On abort the loop stops at its next frame and the promise resolves with
   * reason 'aborted' (the caller decides what an abort means to its caller).
   */
  async generate(request: GenerateRequest, onFrame: (codes: Int32Array) => void, signal: AbortSignal): Promise<{ frames: number; reason: StopReason }> {
    const abort = new SharedArrayBuffer(4);
    const flag = new Int32Array(abort);
    const stop = () => Atomics.store(flag, 0, 1);
    if (signal.aborted) stop();
    signal.addEventListener('abort', stop, { once: true });
    // onFrame runs in the worker's message event: what it throws stops this generation and becomes its error.
    let fault: { error: unknown } | undefined;
    const frame = guarded(onFrame, (error) => {
      fault ??= { error };
      stop();
    });
    try {
      const result = (await this.call({ type: 'generate', request, abort }, (codes) => {
        if (!fault) frame(codes);
      })) as { frames: number; reason: StopReason };
      if (fault) throw fault.error;
      return result;
    } finally {
      signal.removeEventListener('abort', stop);
    }
  }

  async release(): Promise<void> {
    try {
      await this.call({ type: 'release' });
    } finally {
      await this.worker.terminate();
    }
  }

  private call(message: Record<string, unknown>, onFrame?: (codes: Int32Array) => void): Promise<unknown> {
    if (this.failure) return Promise.reject(new GeneratorError(this.failure));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, {
        onFrame,
        settle: (reply) => (reply.ok ? resolve(reply.result) : reject(new GeneratorError(reply.error, reply.param))),
      });
      // Keep the process alive only while a call is in flight.
      this.worker.ref();
      this.worker.postMessage({ ...message, id });
    });
  }

  private failAll(message: string): void {
    this.failure ??= message;
    for (const pending of this.pending.values()) pending.settle({ id: -1, ok: false, error: message });
    this.pending.clear();
  }
}
