import { guarded } from '../../core/guard.js';
import { startModuleWorker } from '../../runtimes/launch/module-entry.js';
import { WorkerCalls } from '../../runtimes/worker/worker-calls.js';
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

/**
 * How far the frame loop may run ahead of the caller: the loop makes frames
 * while fewer than the allowance are made, then waits (re-reading the abort
 * flag) until the caller raises it. The caller sets the allowance to the
 * frame where its next audio block is cut, so the loop stops exactly there,
 * not a frame or so later when a message would have told it to (a decode
 * beside a running frame is slow on shared cores: bench/tts.md). Shared
 * memory, so it never waits for a message.
 */
export class LoopHold {
  /** No limit: the loop runs freely. */
  static readonly NONE = 2 ** 31 - 1;
  readonly buffer = new SharedArrayBuffer(4);
  private readonly allowance = new Int32Array(this.buffer);

  constructor(frames: number) {
    this.allow(frames);
  }

  /** Lets the loop make frames until `frames` are made (NONE: all). */
  allow(frames: number): void {
    Atomics.store(this.allowance, 0, Math.min(frames, LoopHold.NONE));
    Atomics.notify(this.allowance, 0);
  }
}

export class GeneratorWorker {
  private constructor(
    private readonly worker: WorkerCalls,
    /** Which talker and code predictor graphs the worker runs, and why (the load line). */
    readonly graphNotes: string,
    /** Where the frame loop runs: llama.cpp or ONNX Runtime. */
    readonly loop: 'llama' | 'onnx',
  ) {}

  static async start(init: GeneratorInit): Promise<GeneratorWorker> {
    const worker = new WorkerCalls(startModuleWorker(new URL('./worker.js', import.meta.url)), {
      exited: 'the Qwen3-TTS generator worker exited',
      error: (message, param) => new GeneratorError(message, param),
    });
    let ready: { graphNotes: string; loop: 'llama' | 'onnx' };
    try {
      ready = await worker.call<typeof ready>({ type: 'init', init });
    } catch (error) {
      await worker.terminate();
      throw error;
    }
    return new GeneratorWorker(worker, ready.graphNotes, ready.loop);
  }

  /** x-vector (and codes, for in-context cloning) of a 24 kHz reference voice. */
  encodeReference(samples: Float32Array, withCodes: boolean): Promise<ReferenceCodes> {
    return this.worker.call<ReferenceCodes>({ type: 'reference', samples, withCodes });
  }

  /**
   * Runs one generation; `onFrame` receives each frame's codes as it is made.
   * On abort the loop stops at its next frame and the promise resolves with
   * reason 'aborted' (the caller decides what an abort means to its caller).
   */
  async generate(request: GenerateRequest, onFrame: (codes: Int32Array) => void, signal: AbortSignal, hold?: LoopHold): Promise<{ frames: number; reason: StopReason }> {
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
      const result = await this.worker.call<{ frames: number; reason: StopReason }, Int32Array>({ type: 'generate', request, abort, hold: hold?.buffer }, [], (codes) => {
        if (!fault) frame(codes);
      });
      if (fault) throw fault.error;
      return result;
    } finally {
      signal.removeEventListener('abort', stop);
    }
  }

  async release(): Promise<void> {
    await this.worker.close({ type: 'release' });
  }
}
