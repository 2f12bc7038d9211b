/**
 * MSB-first bit writer into a growable byte buffer (FLAC's bitstream).
 * Bits gather in a 32-bit accumulator and leave a byte at a time.
 */
export class BitWriter {
  private buf: Uint8Array;
  private pos = 0;
  /** Pending bits, right-aligned; `count` of them (< 8 between calls). */
  private acc = 0;
  private count = 0;

  constructor(capacity = 4096) {
    this.buf = new Uint8Array(capacity);
  }

  /** Bytes completed so far (the writer must be byte-aligned for them to be all of it). */
  get length(): number {
    return this.pos;
  }

  private ensure(more: number): void {
    if (this.pos + more <= this.buf.length) return;
    const next = new Uint8Array(Math.max(this.buf.length * 2, this.pos + more));
    next.set(this.buf.subarray(0, this.pos));
    this.buf = next;
  }

  /** Writes the low `n` bits of `value` (n ≤ 24; the value is masked). */
  write(value: number, n: number): void {
    if (n === 0) return;
    this.acc = (this.acc << n) | (value & ((1 << n) - 1));
    this.count += n;
    if (this.count >= 8) this.drain();
  }

  /** Writes up to 32 bits (two calls). */
  writeWide(value: number, n: number): void {
    if (n > 16) {
      this.write(Math.floor(value / 65536), n - 16);
      this.write(value & 0xffff, 16);
    } else {
      this.write(value, n);
    }
  }

  /** `q` zero bits then a one: the unary part of a Rice code. */
  writeUnary(q: number): void {
    while (q >= 16) {
      this.write(0, 16);
      q -= 16;
    }
    this.write(1, q + 1);
  }

  private drain(): void {
    this.ensure(4);
    while (this.count >= 8) {
      this.count -= 8;
      this.buf[this.pos++] = (this.acc >>> this.count) & 0xff;
    }
    this.acc &= (1 << this.count) - 1;
  }

  /** Pads with zero bits to a byte boundary. */
  align(): void {
    if (this.count > 0) this.write(0, 8 - this.count);
  }

  /** The bytes written (aligned first); a view into the buffer, valid until the next write or reset. */
  bytes(): Uint8Array {
    this.align();
    return this.buf.subarray(0, this.pos);
  }

  reset(): void {
    this.pos = 0;
    this.acc = 0;
    this.count = 0;
  }
}
