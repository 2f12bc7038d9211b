import type { Worker } from 'node:worker_threads';
import { PendingReplies } from '../../core/pending-replies.js';

/**
 * Calls into a worker thread that answers each request message, tagged with
 * its id, by one reply: `{ id, ok: true, result? }` or `{ id, ok: false,
 * error, param? }`, with any number of `{ id, update }` before it (a
 * generation's frames). The worker keeps the process alive only while a call
 * is in flight, and when it fails or exits every call waiting on it fails,
 * as does every later one.
 */

export type WorkerReply =
  | { id: number; ok: true; result?: unknown }
  | { id: number; ok: false; error: string; param?: string }
  | { id: number; update: unknown };

export interface WorkerCallsOptions {
  /** What a call learns when the worker exits: "the Silero VAD worker exited". */
  exited: string;
  /** The error a call rejects with, from the worker's message (and the request field at fault, when it names one). */
  error: (message: string, param?: string) => Error;
}

export class WorkerCalls {
  private readonly pending = new PendingReplies<unknown, unknown>();

  constructor(
    private readonly worker: Worker,
    options: WorkerCallsOptions,
  ) {
    worker.on('message', (reply: WorkerReply) => {
      if ('update' in reply) {
        this.pending.update(reply.id, reply.update);
        return;
      }
      if (reply.ok) this.pending.settle(reply.id, reply.result);
      else this.pending.fail(reply.id, options.error(reply.error, reply.param));
      this.unrefWhenIdle();
    });
    worker.on('error', (error) => this.pending.failAll(options.error(error.message)));
    worker.on('exit', () => this.pending.failAll(options.error(options.exited)));
  }

  /**
   * Sends `message` (with `transfer`'s buffers moved, not copied) and resolves
   * with the worker's result; `onUpdate` receives the call's updates. What
   * both are is the worker's protocol, which the caller knows.
   */
  call<T, U = never>(message: Record<string, unknown>, transfer: readonly ArrayBuffer[] = [], onUpdate?: (update: U) => void): Promise<T> {
    const { id, promise } = this.pending.add(onUpdate as ((update: unknown) => void) | undefined);
    if (this.pending.failed) return promise as Promise<T>;
    try {
      // Keep the process alive only while a call is in flight.
      this.worker.ref();
      this.worker.postMessage({ ...message, id }, transfer);
    } catch (error) {
      // A message that cannot be cloned: this call's error, not a call left waiting.
      this.pending.fail(id, error);
      this.unrefWhenIdle();
    }
    return promise as Promise<T>;
  }

  /** Sends the worker its last message (what frees its resources), then ends the thread, whether that call succeeded or not. */
  async close(last: Record<string, unknown>): Promise<void> {
    try {
      await this.call(last);
    } finally {
      await this.worker.terminate();
    }
  }

  /** Ends the thread at once (a worker whose first call failed). */
  async terminate(): Promise<void> {
    await this.worker.terminate();
  }

  private unrefWhenIdle(): void {
    if (this.pending.size === 0) this.worker.unref();
  }
}
