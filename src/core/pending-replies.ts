/**
 * Requests sent over a channel (to a worker thread, between a runner and its
 * server) waiting for their replies. Each request gets an id to send along
 * and a promise that the reply carrying that id settles; a request may also
 * receive updates before its reply (a generation's frames). Once the other
 * side is gone, `failAll` fails every request still waiting and every later
 * one, so no caller waits on a reply that cannot come.
 */

interface Waiting<T, U> {
  resolve(value: T): void;
  reject(error: unknown): void;
  onUpdate?: (update: U) => void;
}

export class PendingReplies<T = unknown, U = never> {
  private nextId = 1;
  private readonly waiting = new Map<number, Waiting<T, U>>();
  private failure: { error: unknown } | undefined;

  /** Requests still waiting for their reply. */
  get size(): number {
    return this.waiting.size;
  }

  /** Whether `failAll` was called: a request added now fails at once, so there is nothing to send. */
  get failed(): boolean {
    return this.failure !== undefined;
  }

  add(onUpdate?: (update: U) => void): { id: number; promise: Promise<T> } {
    const id = this.nextId++;
    if (this.failure) return { id, promise: Promise.reject(this.failure.error) };
    const promise = new Promise<T>((resolve, reject) => this.waiting.set(id, { resolve, reject, onUpdate }));
    return { id, promise };
  }

  /** Hands request `id` an update; it goes on waiting for its reply. */
  update(id: number, update: U): void {
    this.waiting.get(id)?.onUpdate?.(update);
  }

  /** Resolves request `id`; false when no such request is waiting (it ended, or never was). */
  settle(id: number, value: T): boolean {
    const waiting = this.take(id);
    waiting?.resolve(value);
    return waiting !== undefined;
  }

  /** Rejects request `id`; false when no such request is waiting. */
  fail(id: number, error: unknown): boolean {
    const waiting = this.take(id);
    waiting?.reject(error);
    return waiting !== undefined;
  }

  /** The other side is gone: rejects every waiting request, and every later one, with the first such error. */
  failAll(error: unknown): void {
    this.failure ??= { error };
    const waiting = [...this.waiting.values()];
    this.waiting.clear();
    for (const w of waiting) w.reject(this.failure.error);
  }

  private take(id: number): Waiting<T, U> | undefined {
    const waiting = this.waiting.get(id);
    this.waiting.delete(id);
    return waiting;
  }
}
