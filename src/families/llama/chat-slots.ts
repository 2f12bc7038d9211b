/**
 * Hands out a fixed set of slots (a context's sequences) to requests: a free
 * one at once, otherwise a place in a bounded FIFO queue, otherwise an
 * overload error. A waiter whose signal aborts leaves the queue. When several
 * slots are free, `pick` chooses (the chat model prefers the sequence that
 * already holds the longest prefix of the conversation).
 */

export class QueueFullError extends Error {
  constructor() {
    super('queue full');
  }
}

interface Waiter<T> {
  pick: (free: readonly T[]) => T;
  resolve: (slot: T) => void;
  reject: (error: unknown) => void;
  cleanup: () => void;
}

export class SlotPool<T> {
  private readonly free: T[];
  private readonly waiters: Waiter<T>[] = [];

  /** How many slots there are, free or not. */
  readonly size: number;

  constructor(
    slots: readonly T[],
    private readonly maxQueue: number,
  ) {
    this.free = [...slots];
    this.size = slots.length;
  }

  get waiting(): number {
    return this.waiters.length;
  }

  get available(): number {
    return this.free.length;
  }

  acquire(signal: AbortSignal, pick: (free: readonly T[]) => T = (free) => free[0]!): Promise<T> {
    if (signal.aborted) return Promise.reject(signal.reason);
    if (this.free.length > 0 && this.waiters.length === 0) return Promise.resolve(this.take(pick));
    if (this.waiters.length >= this.maxQueue) return Promise.reject(new QueueFullError());
    return new Promise<T>((resolve, reject) => {
      const onAbort = () => {
        const at = this.waiters.indexOf(waiter);
        if (at >= 0) this.waiters.splice(at, 1);
        reject(signal.reason);
      };
      const waiter: Waiter<T> = { pick, resolve, reject, cleanup: () => signal.removeEventListener('abort', onAbort) };
      signal.addEventListener('abort', onAbort, { once: true });
      this.waiters.push(waiter);
    });
  }

  /** Whether `slot` is free now. */
  isFree(slot: T): boolean {
    return this.free.includes(slot);
  }

  /** Takes `slot` out of the pool when it is free and nobody waits (work on an idle slot: give it back with release). */
  takeIdle(slot: T): boolean {
    const at = this.free.indexOf(slot);
    if (at < 0 || this.waiters.length > 0) return false;
    this.free.splice(at, 1);
    return true;
  }

  release(slot: T): void {
    this.free.push(slot);
    const next = this.waiters.shift();
    if (!next) return;
    next.cleanup();
    next.resolve(this.take(next.pick));
  }

  /** Fails every waiter (the model is being unloaded). */
  rejectAll(error: unknown): void {
    for (const waiter of this.waiters.splice(0)) {
      waiter.cleanup();
      waiter.reject(error);
    }
  }

  private take(pick: (free: readonly T[]) => T): T {
    const slot = pick(this.free);
    this.free.splice(this.free.indexOf(slot), 1);
    return slot;
  }
}
