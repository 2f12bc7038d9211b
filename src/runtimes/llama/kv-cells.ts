/**
 * The cells of one unified KV cache (unified-kv.ts) and which sequence
 * holds how many: every sequence may fill the cache, so together they must
 * not overfill it. llama.cpp cannot say it is full before a decode fails,
 * and a failed decode leaves the sequence's cells and node-llama-cpp's idea
 * of them out of step; so every decode is checked here first
 * (decode-gate.ts), and the chat model reserves a prompt's cells before it
 * starts and frees idle sequences' cells when a prompt needs them.
 *
 * A sequence's count is what it holds after its last decode, or what the
 * chat model set (a reservation, a clear, a restore): erasing tokens
 * outside a decode lowers it only at the next set or decode, so the count
 * is never below the truth.
 */

export class KvCacheFullError extends Error {
  constructor() {
    super('the KV cache is full');
  }
}

export class KvCells {
  private readonly held = new Map<number, number>();
  private total = 0;

  constructor(readonly capacity: number) {}

  get used(): number {
    return this.total;
  }

  get free(): number {
    return this.capacity - this.total;
  }

  of(sequence: number): number {
    return this.held.get(sequence) ?? 0;
  }

  /** The sequence holds (or has reserved) exactly `cells` now. */
  set(sequence: number, cells: number): void {
    this.total += cells - this.of(sequence);
    this.held.set(sequence, cells);
  }

  /**
   * A decode of `tokens` tokens at position `first` of the sequence: counted
   * and true when the cache has room for what it adds, else false (and
   * nothing changes).
   */
  tryDecode(sequence: number, first: number, tokens: number): boolean {
    const after = first + tokens;
    const grows = after - this.of(sequence);
    if (grows > 0 && this.total + grows > this.capacity) return false;
    // A reservation made for this prompt already counts its cells: keep the larger.
    if (grows > 0) this.set(sequence, after);
    return true;
  }
}
