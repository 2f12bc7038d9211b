/**
 * PCM16 as the page moves it: bytes ↔ base64 (the Realtime API's audio
 * fields), bytes → Web Audio's floats, a byte stream cut back into whole
 * samples, and where each piece of streamed audio plays on one clock. No DOM
 * here: the unit tests run it under Node.
 */

/** Base64 of `bytes` (btoa takes a binary string; built in slices, as a spread of a long array overflows the stack). */
export function bytesToBase64(bytes: Uint8Array): string {
  let binary = '';
  for (let at = 0; at < bytes.length; at += 0x8000) binary += String.fromCharCode(...bytes.subarray(at, at + 0x8000));
  return btoa(binary);
}

export function base64ToBytes(base64: string): Uint8Array {
  const binary = atob(base64);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** Little-endian PCM16 samples (an even number of bytes) as floats in [-1, 1). */
export function pcm16ToFloat32(bytes: Uint8Array): Float32Array<ArrayBuffer> {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(bytes.byteLength >> 1);
  for (let i = 0; i < out.length; i++) out[i] = view.getInt16(i * 2, true) / 0x8000;
  return out;
}

/**
 * Pieces of a PCM16 byte stream as whole samples: a piece of an HTTP body
 * may end halfway through a sample, whose first byte waits for the next piece.
 */
export class SampleJoiner {
  private carry: number | undefined;

  /** The whole samples that `bytes` completes (possibly none). */
  push(bytes: Uint8Array): Uint8Array {
    let data = bytes;
    if (this.carry !== undefined) {
      data = new Uint8Array(bytes.length + 1);
      data[0] = this.carry;
      data.set(bytes, 1);
      this.carry = undefined;
    }
    if (data.length % 2) {
      this.carry = data[data.length - 1];
      data = data.subarray(0, data.length - 1);
    }
    return data;
  }
}

interface Piece {
  item: string;
  start: number;
  end: number;
}

/**
 * Where pieces of streamed audio play on one clock (an AudioContext's
 * seconds): each right after the one before, so they play gap-free; a piece
 * that arrives when everything scheduled has played starts `lead` seconds
 * from now, so its first samples are not already in the past. Pieces belong
 * to an item (the Realtime API's assistant message), so that an interruption
 * can tell how much of that item was heard. `now` is the clock's time at each
 * call, so it never goes back.
 */
export class PlaybackSchedule {
  private pieces: Piece[] = [];
  /** Seconds of each item's pieces that were dropped from `pieces` after playing. */
  private readonly playedBefore = new Map<string, number>();
  private end = 0;

  constructor(readonly lead = 0.05) {}

  /** Schedules `seconds` of `item`'s audio that arrived at clock time `now`: returns when it starts. */
  add(seconds: number, now: number, item = ''): number {
    this.forget(now);
    const start = this.end > now ? this.end : now + this.lead;
    this.end = start + seconds;
    this.pieces.push({ item, start, end: this.end });
    return start;
  }

  /** Whether audio is still to be heard at `now`. */
  playing(now: number): boolean {
    return this.end > now;
  }

  /** The item whose audio is playing (or next to play) at `now`; undefined when all has been heard. */
  current(now: number): string | undefined {
    return this.pieces.find((p) => p.end > now)?.item;
  }

  /** Seconds of `item`'s audio (without one: of all audio) heard by `now`. */
  played(now: number, item?: string): number {
    let seconds = 0;
    for (const [key, value] of this.playedBefore) if (item === undefined || key === item) seconds += value;
    for (const p of this.pieces) if (item === undefined || p.item === item) seconds += Math.min(Math.max(now - p.start, 0), p.end - p.start);
    return seconds;
  }

  /** Forgets everything scheduled (the caller stops its sources): the next piece starts afresh. */
  clear(): void {
    this.pieces = [];
    this.playedBefore.clear();
    this.end = 0;
  }

  /** Folds the pieces that have played into per-item totals, so a long session keeps a short list. */
  private forget(now: number): void {
    let done = 0;
    while (done < this.pieces.length && this.pieces[done]!.end <= now) {
      const p = this.pieces[done++]!;
      this.playedBefore.set(p.item, (this.playedBefore.get(p.item) ?? 0) + (p.end - p.start));
    }
    if (done) this.pieces.splice(0, done);
  }
}
