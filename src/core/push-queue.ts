/**
 * Turns callbacks into an async iterator: a producer pushes items as they
 * arrive (node-llama-cpp's tokens, a runner's streamed results), the consumer
 * pulls them. A pending pull is resolved directly (no buffering once the
 * consumer keeps up), so an item leaves as soon as it is produced.
 */
export class PushQueue<T> implements AsyncIterator<T> {
  private readonly items: T[] = [];
  private pending: { resolve: (r: IteratorResult<T>) => void; reject: (e: unknown) => void } | undefined;
  private ended = false;
  private error: unknown;
  private failed = false;

  push(item: T): void {
    if (this.ended) return;
    const waiting = this.pending;
    if (waiting) {
      this.pending = undefined;
      waiting.resolve({ value: item, done: false });
    } else {
      this.items.push(item);
    }
  }

  end(): void {
    this.ended = true;
    this.settlePending();
  }

  fail(error: unknown): void {
    if (this.ended) return;
    this.failed = true;
    this.error = error;
    this.ended = true;
    this.settlePending();
  }

  next(): Promise<IteratorResult<T>> {
    const item = this.items.shift();
    if (item !== undefined) return Promise.resolve({ value: item, done: false });
    if (this.failed) return Promise.reject(this.error);
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
    });
  }

  private settlePending(): void {
    const waiting = this.pending;
    if (!waiting || this.items.length > 0) return;
    this.pending = undefined;
    if (this.failed) waiting.reject(this.error);
    else waiting.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return this;
  }
}
