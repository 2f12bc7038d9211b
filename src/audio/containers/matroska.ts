import { ascii, vint } from './bytes.js';
import { missing } from './errors.js';

/**
 * Matroska/WebM demuxing: an incremental reader of the EBML element tree
 * that finds the first audio track and hands on its frames (laces split,
 * DiscardPadding kept) a stretch of the file at a time. Headers and block
 * framing only; the frames themselves go to the Opus decoder.
 */

/** One audio frame of a Matroska track: its bytes, and nanoseconds of decoded audio to drop from its end. */
export interface MatroskaFrame {
  start: number;
  end: number;
  discardNs: number;
}

/** A Matroska audio track's codec set-up. */
export interface MatroskaAudioTrack {
  codecId: string;
  codecPrivate?: Uint8Array;
  /** From the track's Audio element (0 when absent). */
  channels: number;
  sampleRate: number;
  /** CodecDelay (ns): audio the decoder must drop from the start (Opus: the pre-skip). */
  codecDelayNs: number;
}

const EBML = {
  header: 0x1a45dfa3,
  segment: 0x18538067,
  cluster: 0x1f43b675,
  tracks: 0x1654ae6b,
  trackEntry: 0xae,
  trackNumber: 0xd7,
  trackType: 0x83,
  codecId: 0x86,
  codecPrivate: 0x63a2,
  codecDelay: 0x56aa,
  audio: 0xe1,
  samplingFrequency: 0xb5,
  channels: 0x9f,
  simpleBlock: 0xa3,
  blockGroup: 0xa0,
  block: 0xa1,
  discardPadding: 0x75a2,
} as const;

function uintOf(b: Uint8Array, start: number, end: number): number {
  let value = 0;
  for (let i = start; i < end; i++) value = value * 256 + b[i]!;
  return value;
}

function intOf(b: Uint8Array, start: number, end: number): number {
  if (start >= end) return 0;
  const value = uintOf(b, start, end);
  return b[start]! & 0x80 ? value - 2 ** (8 * (end - start)) : value;
}

function floatOf(b: Uint8Array, start: number, end: number): number {
  const view = new DataView(b.buffer, b.byteOffset + start, end - start);
  return end - start === 4 ? view.getFloat32(0) : end - start === 8 ? view.getFloat64(0) : 0;
}

interface MatroskaTrack extends MatroskaAudioTrack {
  number: number;
  type: number;
}

/**
 * Reads a Matroska/WebM file front to back as its bytes are needed: the
 * first audio track (`track`, once the Tracks element has been read), and
 * then that track's frames, a stretch of the file per `read` call, so that a
 * long file is demuxed in the same pieces as it is decoded.
 *
 * One flat walk over the elements: the Segment and each Cluster are entered
 * (not skipped), whether their size is known or unknown — a live recording
 * (MediaRecorder) writes both with unknown size, and an unknown-size element
 * simply ends where the next element that cannot be its child begins, which a
 * flat walk needs no rule for since the IDs are unique across levels. Tracks
 * and BlockGroups are read; every other element (SeekHead, Cues, Tags, Void,
 * Cluster timestamps, …) is skipped by its size. Blocks of other tracks are
 * ignored. Throws an Error naming the problem: no audio track, an element or
 * block that runs past the end of the file (truncated), a structure that is
 * not EBML.
 */
export class MatroskaReader {
  /** The first audio track, once the Tracks element has been read. */
  track: MatroskaAudioTrack | undefined;
  private pos = 0;
  private tracksSeen = false;
  private audioNumber = -1;
  /** Blocks met before the Tracks element (not in files as muxers write them, but allowed). */
  private early: { start: number; end: number; discardNs: number }[] = [];

  constructor(private readonly b: Uint8Array) {}

  /** Whether the whole file has been read. */
  get done(): boolean {
    return this.pos >= this.b.length;
  }

  /** Reads on to byte `upTo` (elements that end there or before) and returns the audio frames found. */
  read(upTo: number): MatroskaFrame[] {
    const b = this.b;
    const limit = Math.min(upTo, b.length);
    const atEnd = limit === b.length;
    const frames: MatroskaFrame[] = [];
    while (this.pos < limit) {
      const e = this.header(this.pos, limit, atEnd);
      if (!e) break; // its header is not all here yet
      if (e.id === EBML.segment || e.id === EBML.cluster) {
        this.pos = e.data; // enter it, known size or not
        continue;
      }
      if (e.unknown) throw new Error(`it has a Matroska element of unknown size (ID 0x${e.id.toString(16)}) that lserve cannot follow`);
      const end = e.data + e.size;
      if (end > limit) {
        if (!atEnd) break;
        const what = e.id === EBML.simpleBlock || e.id === EBML.blockGroup ? 'a Matroska block' : `a Matroska element (ID 0x${e.id.toString(16)})`;
        throw new Error(missing(e.size, b.length - e.data, what));
      }
      if (e.id === EBML.header && this.pos !== 0) throw new Error('it holds a second Matroska stream after the first (concatenated files)');
      if (e.id === EBML.tracks) this.readTracks(e.data, end, frames);
      else if (e.id === EBML.simpleBlock) this.block(e.data, end, 0, frames);
      else if (e.id === EBML.blockGroup) this.blockGroup(e.data, end, frames);
      this.pos = end;
    }
    if (this.done && !this.tracksSeen) throw new Error('it has no Matroska Tracks element');
    return frames;
  }

  /** The element header at `at`, or undefined when it runs past `limit` before the end of the file. */
  private header(at: number, limit: number, atEnd: boolean) {
    const b = this.b;
    const id = vint(b, at, true);
    const size = id && vint(b, at + id.length, false);
    if (id && size && at + id.length + size.length <= limit) return { id: id.value, data: at + id.length + size.length, size: size.value, unknown: size.unknown };
    // A vint cut off by the end of the bytes, or one that cannot start (a zero byte).
    const cut = Boolean(id && size) || b[id ? at + id.length : at] !== 0;
    if (cut && !atEnd) return undefined;
    if (cut) throw new Error('the file is truncated inside a Matroska element header');
    throw new Error(`it is not a valid Matroska file (no element at byte ${at})`);
  }

  /** A child element inside [at, end) of an element already wholly present. */
  private child(at: number, end: number, what: string) {
    const e = this.header(at, end, true);
    const stop = e!.data + e!.size;
    if (e!.unknown || stop > end) throw new Error(`it has a Matroska ${what} whose elements overrun it`);
    return { ...e!, end: stop };
  }

  private readTracks(start: number, end: number, frames: MatroskaFrame[]): void {
    this.tracksSeen = true;
    const b = this.b;
    for (let at = start; at < end; ) {
      const entry = this.child(at, end, 'Tracks element');
      at = entry.end;
      if (entry.id !== EBML.trackEntry || this.track) continue;
      const track: MatroskaTrack = { number: 0, type: 0, codecId: '', channels: 0, sampleRate: 0, codecDelayNs: 0 };
      for (let pos = entry.data; pos < entry.end; ) {
        const e = this.child(pos, entry.end, 'track entry');
        pos = e.end;
        if (e.id === EBML.trackNumber) track.number = uintOf(b, e.data, e.end);
        else if (e.id === EBML.trackType) track.type = uintOf(b, e.data, e.end);
        else if (e.id === EBML.codecId) track.codecId = ascii(b, e.data, e.size).replace(/\0+$/, '');
        else if (e.id === EBML.codecPrivate) track.codecPrivate = b.subarray(e.data, e.end);
        else if (e.id === EBML.codecDelay) track.codecDelayNs = uintOf(b, e.data, e.end);
        else if (e.id === EBML.audio) {
          for (let a = e.data; a < e.end; ) {
            const f = this.child(a, e.end, 'Audio element');
            a = f.end;
            if (f.id === EBML.samplingFrequency) track.sampleRate = floatOf(b, f.data, f.end);
            else if (f.id === EBML.channels) track.channels = uintOf(b, f.data, f.end);
          }
        }
      }
      if (track.type !== 2) continue;
      const { number, type: _type, ...audio } = track;
      this.track = audio;
      this.audioNumber = number;
    }
    if (!this.track) throw new Error('it has no audio track');
    for (const block of this.early) this.block(block.start, block.end, block.discardNs, frames);
    this.early = [];
  }

  private block(start: number, end: number, discardNs: number, frames: MatroskaFrame[]): void {
    const track = vint(this.b, start, false);
    if (!track || start + track.length + 3 > end) throw new Error(`it has a Matroska block too short to hold its header (at byte ${start})`);
    if (!this.tracksSeen) this.early.push({ start, end, discardNs });
    else if (track.value === this.audioNumber) splitLaces(this.b, { start, end, discardNs }, frames);
  }

  private blockGroup(start: number, end: number, frames: MatroskaFrame[]): void {
    let block: [number, number] | undefined;
    let discardNs = 0;
    for (let at = start; at < end; ) {
      const g = this.child(at, end, 'BlockGroup');
      at = g.end;
      if (g.id === EBML.block) block = [g.data, g.end];
      else if (g.id === EBML.discardPadding) discardNs = intOf(this.b, g.data, g.end);
    }
    if (block) this.block(block[0], block[1], discardNs, frames);
  }
}

/** The frames of one (Simple)Block: one, or several when laced (Xiph, EBML or fixed-size lacing). */
function splitLaces(b: Uint8Array, block: { start: number; end: number; discardNs: number }, out: MatroskaFrame[]): void {
  const track = vint(b, block.start, false)!;
  const flags = b[block.start + track.length + 2]!;
  let pos = block.start + track.length + 3;
  const lacing = (flags >> 1) & 3;
  if (lacing === 0) {
    out.push({ start: pos, end: block.end, discardNs: block.discardNs });
    return;
  }
  const bad = () => new Error(`it has a Matroska block with broken lacing (at byte ${block.start})`);
  const count = b[pos++]! + 1;
  const sizes: number[] = [];
  if (lacing === 1) {
    // Xiph: each size but the last as a run of 255s plus a final byte.
    for (let i = 0; i < count - 1; i++) {
      let size = 0;
      let byte: number;
      do {
        if (pos >= block.end) throw bad();
        byte = b[pos++]!;
        size += byte;
      } while (byte === 255);
      sizes.push(size);
    }
  } else if (lacing === 3) {
    // EBML: the first size as a vint, the others as signed differences.
    const first = vint(b, pos, false);
    if (!first) throw bad();
    pos += first.length;
    sizes.push(first.value);
    for (let i = 1; i < count - 1; i++) {
      const diff = vint(b, pos, false);
      if (!diff) throw bad();
      pos += diff.length;
      sizes.push(sizes[i - 1]! + diff.value - (2 ** (7 * diff.length - 1) - 1));
    }
  } else {
    // Fixed-size lacing: equal frames.
    const each = (block.end - pos) / count;
    if (!Number.isInteger(each)) throw bad();
    for (let i = 0; i < count - 1; i++) sizes.push(each);
  }
  const used = sizes.reduce((sum, size) => sum + size, 0);
  if (sizes.some((size) => size < 0) || pos + used > block.end) throw bad();
  sizes.push(block.end - pos - used);
  sizes.forEach((size, i) => {
    out.push({ start: pos, end: pos + size, discardNs: i === count - 1 ? block.discardNs : 0 });
    pos += size;
  });
}
