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
 * A pause the caller can put on the frame loop: the worker finishes the
 * group it is computing, then waits until released (or aborted). Shared
 * memory, so holding and releasing never wait for a message.
 */
export class LoopHold {
  readonly buffer = new SharedArrayBuffer(4);
  private readonly flag = new Int32Array(this.buffer);

  hold(): void {
    Atomics.store(this.flag, 0, 1);
  }

  release(): void {
    Atomics.store(this.flag, 0, 0);
    Atomics.notify(this.flag, 0);
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
