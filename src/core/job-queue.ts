import { OverloadedError } from './errors.js';

/**
 * One job at a time per model, first come first served, with a bounded line:
 * a diffusion model computes one image, a Whisper model one transcription, at
 * full CPU; running two at once only makes both slower (and, unbounded, lets
 * requests pile up without limit). A job beyond `maxWaiting` is refused at once with
 * OverloadedError (503); a waiting job whose signal aborts (its client left)
 * leaves the line without running. Work done in turns (speech, piece by
 * piece, requests taking turns) is let in once with admit(), before its
 * response starts, and its parts then wait however long the line.
 */
export class JobQueue {
  private running = false;
  private readonly waiting: Array<{ start: () => void; cancel: (reason: unknown) => void }> = [];

  constructor(
    private readonly maxWaiting: number,
    private readonly what: string,
  ) {}

  /** Jobs waiting behind the running one. */
  get length(): number {
    return this.waiting.length;
  }

  get busy(): boolean {
    return this.running;
  }

  /** Refuses (OverloadedError) when a job arriving now would be refused. */
  admit(): void {
    if (this.running && this.waiting.length >= this.maxWaiting) {
      throw new OverloadedError(`${this.what} is busy with ${this.waiting.length + 1} requests (${this.maxWaiting} may wait). Retry later.`);
    }
  }

  /** Runs `job` in its turn; `admitted`: it is part of work admit() already let in, and is never refused. */
  async run<T>(job: () => Promise<T>, signal?: AbortSignal, admitted = false): Promise<T> {
    signal?.throwIfAborted();
    if (this.running) {
      if (!admitted) this.admit();
      await new Promise<void>((resolve, reject) => {
        const entry = {
          start: () => {
            signal?.removeEventListener('abort', onAbort);
            resolve();
          },
          cancel: reject,
        };
        const onAbort = () => {
          const index = this.waiting.indexOf(entry);
          if (index >= 0) this.waiting.splice(index, 1);
          reject(signal!.reason);
        };
        signal?.addEventListener('abort', onAbort, { once: true });
        this.waiting.push(entry);
      });
    }
    this.running = true;
    try {
      return await job();
    } finally {
      const next = this.waiting.shift();
      if (next) next.start();
      else this.running = false;
    }
  }

  /** Fails every waiting job (the model is being unloaded). */
  rejectWaiting(reason: unknown): void {
    for (const entry of this.waiting.splice(0)) entry.cancel(reason);
  }
}
