import { crc16, crc8 } from '../crc.js';
import { startsWith, u32be } from './bytes.js';
import { missing } from './errors.js';
import { afterId3 } from './mpeg.js';

/**
 * Native FLAC framing: the metadata blocks, then frame after frame, each
 * found by lserve itself so that the decoder (../decoders/flac.ts) gets
 * exactly one whole frame per call.
 *
 * Why not the framing inside @wasm-audio-decoders/flac (codec-parser): when
 * the file ends it merges a last frame of 13 bytes or less (a block of
 * digital silence codes to 12), or one after a stray 0xFF near the end, into
 * the frame before, and libFLAC decodes only the first frame of what it is
 * handed: the last block went missing from valid files.
 *
 * A FLAC frame carries no length. It starts with a header (sync code 0xFFF8
 * or 0xFFF9, then fields guarded by a CRC-8) and ends with a CRC-16 of all
 * its bytes; a 0xFF 0xF8 pair can occur inside coded audio. So a frame ends
 * where the next valid header starts AND the bytes up to it pass the CRC-16
 * (run over a frame and its own CRC-16, the CRC comes out 0) — a false match
 * needs both checks to pass by chance (≈ 2⁻⁴⁰ per byte). The last frame runs
 * to the end of the file; when its CRC-16 fails there, `lastFrame` says
 * whether it could end earlier (a tag follows: libFLAC stops at the frame's
 * end) or not (the file is cut off). A corrupt frame passes no CRC-16: it
 * then ends at the first valid header past it, and libFLAC reports the
 * mismatch.
 */

export interface FlacFrameHeader {
  /** Bytes, the CRC-8 included. */
  length: number;
  /** Samples per channel. */
  blockSize: number;
  channels: number;
  /** 0: "from STREAMINFO". */
  bitsPerSample: number;
}

const BITS: (number | undefined)[] = [0, 8, 12, undefined, 16, 20, 24, 32];

/**
 * The frame header at `at` (sync code with blocking-strategy byte `sync`:
 * 0xF8 fixed or 0xF9 variable, whichever the stream's first frame has), or
 * undefined when there is none there (reserved values, a bad coded number or
 * a CRC-8 mismatch).
 */
export function flacFrameHeader(b: Uint8Array, at: number, sync: number): FlacFrameHeader | undefined {
  if (at + 6 > b.length || b[at] !== 0xff || b[at + 1] !== sync) return undefined;
  const sizeCode = b[at + 2]! >> 4;
  const rateCode = b[at + 2]! & 0x0f;
  const channelCode = b[at + 3]! >> 4;
  const bits = BITS[(b[at + 3]! >> 1) & 0x07];
  if (sizeCode === 0 || rateCode === 0x0f || channelCode > 10 || bits === undefined || b[at + 3]! & 1) return undefined;
  // The frame (fixed) or sample (variable) number, UTF-8 style: 1 to 7 bytes.
  const first = b[at + 4]!;
  const extra = first < 0x80 ? 0 : first < 0xc0 ? -1 : first < 0xe0 ? 1 : first < 0xf0 ? 2 : first < 0xf8 ? 3 : first < 0xfc ? 4 : first < 0xfe ? 5 : first === 0xfe ? 6 : -1;
  if (extra < 0 || (extra === 6 && sync === 0xf8)) return undefined;
  let pos = at + 5;
  for (let i = 0; i < extra; i++, pos++) if (pos >= b.length || (b[pos]! & 0xc0) !== 0x80) return undefined;
  let blockSize = sizeCode === 1 ? 192 : sizeCode <= 5 ? 576 << (sizeCode - 2) : sizeCode >= 8 ? 256 << (sizeCode - 8) : 0;
  if (sizeCode === 6) blockSize = b[pos++]! + 1;
  else if (sizeCode === 7) blockSize = ((b[pos++]! << 8) | b[pos++]!) + 1;
  if (rateCode === 12) pos += 1;
  else if (rateCode === 13 || rateCode === 14) pos += 2;
  if (pos >= b.length || crc8(b, at, pos) !== b[pos]) return undefined; // also catches a block size read past the end (NaN)
  return { length: pos + 1 - at, blockSize, channels: channelCode < 8 ? channelCode + 1 : 2, bitsPerSample: bits };
}

/** Where the frames of a native FLAC file begin, and what its STREAMINFO says. */
export interface FlacLayout {
  /** Byte offset of the first frame header; −1 when the metadata runs past the end or none is found. */
  firstFrame: number;
  /** Why the file looks cut off inside its metadata blocks. */
  truncated?: string;
  /** STREAMINFO's largest frame in bytes (0: not stated). */
  maxFrameBytes: number;
  /** STREAMINFO's bits per sample (for frames that refer to it). */
  bitsPerSample: number;
}

/** Walks the fLaC marker (after an ID3v2 tag, if any) and the metadata blocks to the first frame. */
export function flacLayout(b: Uint8Array): FlacLayout {
  const layout: FlacLayout = { firstFrame: -1, maxFrameBytes: 0, bitsPerSample: 0 };
  let pos = afterId3(b);
  if (pos < 0 || !startsWith(b, pos, 'fLaC')) return layout;
  pos += 4;
  for (let last = false; !last; ) {
    if (pos + 4 > b.length) return { ...layout, truncated: 'the file is truncated inside its FLAC metadata' };
    last = (b[pos]! & 0x80) !== 0;
    const type = b[pos]! & 0x7f;
    const size = u32be(b, pos) & 0xffffff;
    if (pos + 4 + size > b.length) return { ...layout, truncated: missing(size, b.length - pos - 4, 'its FLAC metadata block') };
    if (type === 0 && size === 34) {
      const info = pos + 4;
      layout.maxFrameBytes = (b[info + 7]! << 16) | (b[info + 8]! << 8) | b[info + 9]!;
      layout.bitsPerSample = (((b[info + 12]! & 0x01) << 4) | (b[info + 13]! >> 4)) + 1;
    }
    pos += 4 + size;
  }
  // The first frame follows the last block; anything else there (not written by any known encoder) is skipped to the first header.
  for (let at = pos; at >= 0 && at + 6 <= b.length; at = b.indexOf(0xff, at + 1)) {
    if (b[at] === 0xff && (b[at + 1] === 0xf8 || b[at + 1] === 0xf9) && flacFrameHeader(b, at, b[at + 1]!)) {
      layout.firstFrame = at;
      break;
    }
  }
  return layout;
}

/**
 * How the last frame ends: 'checked' (its CRC-16 passes at the end of the
 * file); 'tagged' (it fails there but passes earlier: a tag follows, or it is
 * damaged and passes by chance; only decoding it tells); 'short' (it passes
 * nowhere: cut off, or damaged).
 */
export type FlacLastFrame = 'checked' | 'tagged' | 'short';

/**
 * Reads a native FLAC file's frames front to back, a stretch per `read`
 * call: each a view into the file, never a copy.
 */
export class FlacFrameReader {
  readonly layout: FlacLayout;
  /** How the last frame ends, once it has been read. */
  lastFrame: FlacLastFrame | undefined;
  /** Start of the next frame; b.length when all are read. */
  private pos: number;
  /** End of the frame at `pos` once found; −1 before. */
  private end = -1;
  /** The second byte of the stream's sync code (its blocking strategy never changes). */
  private readonly sync: number;

  constructor(private readonly b: Uint8Array) {
    this.layout = flacLayout(b);
    this.pos = this.layout.firstFrame < 0 ? b.length : this.layout.firstFrame;
    this.sync = b[this.pos + 1] ?? 0xf8;
  }

  /** Whether every frame has been read. */
  get done(): boolean {
    return this.pos >= this.b.length;
  }

  /** The frames that end at or before byte `upTo` (the last frame ends with the file). */
  read(upTo: number): Uint8Array[] {
    const frames: Uint8Array[] = [];
    const limit = Math.min(upTo, this.b.length);
    while (this.pos < limit) {
      // The end of a frame that did not fit last time is kept, not searched for again.
      if (this.end < 0) this.end = this.frameEnd(this.pos);
      if (this.end > limit) break;
      frames.push(this.b.subarray(this.pos, this.end));
      this.pos = this.end;
      this.end = -1;
    }
    return frames;
  }

  /** Where the frame that starts at `at` ends: see the top of this file. */
  private frameEnd(at: number): number {
    const b = this.b;
    const header = flacFrameHeader(b, at, this.sync);
    if (!header) return b.length; // cannot happen: every `at` was found as a header
    // The CRC-16 of b[at, done), carried forward as candidate ends are tried (each byte once).
    let crc = 0;
    let done = at;
    // How far a CRC-checked end is looked for: the larger of STREAMINFO's largest frame and twice the frame stored verbatim
    // (its samples as they are, the side channel of a stereo pair one bit wider); a corrupt frame ends at the next header within it.
    const bits = header.bitsPerSample || this.layout.bitsPerSample || 32;
    const verbatim = header.length + 2 + header.channels * (2 + Math.ceil((header.blockSize * (bits + 1)) / 8));
    const reach = at + Math.max(this.layout.maxFrameBytes, 2 * verbatim);
    // The smallest frame: header, a byte per subframe, CRC-16.
    const smallest = at + header.length + header.channels + 2;
    let firstHeader = -1;
    for (let q = b.indexOf(0xff, smallest); q >= 0; q = b.indexOf(0xff, q + 1)) {
      if (b[q + 1] !== this.sync || !flacFrameHeader(b, q, this.sync)) continue;
      if (q > reach) return firstHeader >= 0 ? firstHeader : q;
      crc = crc16(b, done, q, crc);
      done = q;
      if (crc === 0) return q;
      if (firstHeader < 0) firstHeader = q;
    }
    // No header follows: the last frame (unless a header that failed the CRC-16 did, and the CRC fails at the end too:
    // then that header ends a damaged frame). Where no prefix passes, no frame ends in these bytes.
    let passes = false;
    for (; done < b.length; done++) {
      if (crc === 0 && done >= smallest) passes = true;
      crc = crc16(b, done, done + 1, crc);
    }
    if (crc === 0) {
      this.lastFrame = 'checked';
      return b.length;
    }
    if (firstHeader >= 0) return firstHeader;
    this.lastFrame = passes ? 'tagged' : 'short';
    return b.length;
  }
}
