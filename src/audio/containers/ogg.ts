import { startsWith, u32le } from './bytes.js';
import { missing } from './errors.js';
import { parseOpusHead, type OpusItem } from './opus.js';

/**
 * Ogg: the page capture pattern, and a reader that walks an Ogg file's pages
 * and hands on the packets of its Opus stream(s), a stretch at a time, for
 * the Opus decoder in ../decoders/opus.ts.
 */

/** Whether an Ogg page (its capture pattern "OggS") starts at `at`. */
export function isOgg(b: Uint8Array, at: number): boolean {
  return b[at] === 0x4f && b[at + 1] === 0x67 && b[at + 2] === 0x67 && b[at + 3] === 0x53;
}

/**
 * Reads the Opus stream of an Ogg file front to back as its bytes are
 * needed, a stretch per `read` call: pages → packets (joined where a packet
 * continues onto the next page), the OpusHead as `{ head }`, the OpusTags
 * (however many pages it fills: cover art) skipped, then the audio packets.
 * The end-of-stream page's granule position gives the stream's exact length
 * (the encoder's padding of the last packet is cut). A chained file (streams
 * one after another) yields a new `{ head }` for each; pages of other
 * logical streams multiplexed alongside are skipped. CRCs are not checked
 * (libopus rejects a corrupt packet).
 */
export class OggOpusReader {
  private pos = 0;
  /** Serial number of the stream being read; −1 between streams. */
  private serial = -1;
  private packetIndex = 0;
  private preSkip = 0;
  /** A packet begun on an earlier page. */
  private partial: Uint8Array[] = [];

  constructor(private readonly b: Uint8Array) {}

  get done(): boolean {
    return this.pos >= this.b.length;
  }

  /** Reads the pages that end at or before byte `upTo`. */
  read(upTo: number): OpusItem[] {
    const b = this.b;
    const limit = Math.min(upTo, b.length);
    const atEnd = limit === b.length;
    const items: OpusItem[] = [];
    while (this.pos < limit) {
      const at = this.pos;
      if (!isOgg(b, at)) throw new Error(`it is not a valid Ogg stream (no page at byte ${at})`);
      const segments = at + 27 <= limit ? b[at + 26]! : -1;
      if (segments < 0 || at + 27 + segments > limit) {
        if (atEnd) throw new Error('the file is truncated inside an Ogg page header');
        break;
      }
      let end = at + 27 + segments;
      for (let i = 0; i < segments; i++) end += b[at + 27 + i]!;
      if (end > limit) {
        if (atEnd) throw new Error(missing(end - at, b.length - at, 'its last Ogg page'));
        break;
      }
      this.pos = end;
      this.page(at, segments, items);
    }
    return items;
  }

  private page(at: number, segments: number, items: OpusItem[]): void {
    const b = this.b;
    const flags = b[at + 5]!;
    const serial = u32le(b, at + 14);
    let body = at + 27 + segments;
    if (flags & 0x02 && this.serial < 0) {
      // A stream begins: read it if it is Opus.
      if (!startsWith(b, body, 'OpusHead')) return;
      this.serial = serial;
      this.packetIndex = 0;
      this.partial = [];
    }
    if (serial !== this.serial) return;
    // A page that continues a packet this reader never saw the start of (or the reverse): drop the piece.
    const continued = (flags & 0x01) !== 0;
    let skip = continued && this.partial.length === 0;
    if (!continued) this.partial = [];
    let start = body;
    let lastPacket: { packet: Uint8Array; length?: number } | undefined;
    for (let i = 0; i < segments; i++) {
      const size = b[at + 27 + i]!;
      body += size;
      if (size === 255) continue; // the packet goes on
      const piece = b.subarray(start, body);
      start = body;
      if (skip) {
        skip = false;
        continue;
      }
      const packet = this.partial.length ? concatBytes([...this.partial, piece]) : piece;
      this.partial = [];
      const index = this.packetIndex++;
      if (index === 0) {
        const head = parseOpusHead(packet);
        if (!head) throw new Error('its OpusHead is invalid');
        this.preSkip = head.preSkip;
        items.push({ head });
      } else if (index > 1) {
        lastPacket = { packet };
        items.push(lastPacket);
      } // index 1: OpusTags
    }
    if (start < body && !skip) this.partial.push(b.subarray(start, body));
    if (flags & 0x04) {
      // End of stream: its granule position counts the samples, pre-skip included.
      const low = u32le(b, at + 6);
      const high = u32le(b, at + 10);
      if (lastPacket && high < 0x80000000) lastPacket.length = Math.max(0, high * 2 ** 32 + low - this.preSkip);
      this.serial = -1;
    }
  }
}

function concatBytes(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, p) => sum + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
