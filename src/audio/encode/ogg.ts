import { randomInt } from 'node:crypto';
import { crc32Ogg } from '../crc.js';

/**
 * Ogg pages for one logical stream: packets in, whole pages out (RFC 3533).
 * A page holds at most 255 lacing values; a packet of 255 bytes or more
 * spans several, and a packet too big for the room left continues on the
 * next page.
 */

const MAX_SEGMENTS = 255;
const HEADER_BYTES = 27;

export class OggWriter {
  private readonly serial = randomInt(2 ** 32);
  private sequence = 0;
  private packets: { data: Uint8Array; granule: number }[] = [];
  private segments = 0;
  private started = false;

  /** Queued packets' lacing values: a page is due when they reach 255. */
  get pendingSegments(): number {
    return this.segments;
  }

  get pendingPackets(): number {
    return this.packets.length;
  }

  /** Queues a packet; `granule` is the stream's granule position once this packet is decoded. */
  add(data: Uint8Array, granule: number): void {
    this.packets.push({ data, granule });
    this.segments += Math.floor(data.length / 255) + 1;
  }

  /**
   * Pages holding every queued packet (none when there is none, unless `last`:
   * the end-of-stream page, which carries `finalGranule` when given). A page
   * ends with the last packet that fits whole and carries that packet's
   * granule position.
   */
  flush(last = false, finalGranule?: number): Uint8Array[] {
    const pages: Uint8Array[] = [];
    let continued = false;
    let offset = 0; // bytes of packets[0] already written on earlier pages
    while (this.packets.length > 0 || (last && pages.length === 0)) {
      const lacing: number[] = [];
      const parts: Uint8Array[] = [];
      let granule = -1; // no packet ends on this page
      let count = 0;
      while (count < this.packets.length && lacing.length < MAX_SEGMENTS) {
        const packet = this.packets[count]!;
        const rest = packet.data.length - offset;
        const room = MAX_SEGMENTS - lacing.length;
        const full = Math.floor(rest / 255);
        if (full + 1 <= room) {
          for (let i = 0; i < full; i++) lacing.push(255);
          lacing.push(rest % 255);
          parts.push(packet.data.subarray(offset));
          granule = packet.granule;
          offset = 0;
          count++;
        } else {
          // The packet goes on past this page: fill the room with 255-byte segments.
          for (let i = 0; i < room; i++) lacing.push(255);
          parts.push(packet.data.subarray(offset, offset + room * 255));
          offset += room * 255;
          break;
        }
      }
      this.packets.splice(0, count);
      const end = last && this.packets.length === 0;
      if (end && finalGranule !== undefined) granule = finalGranule;
      pages.push(this.page(lacing, parts, granule, continued, end));
      continued = offset > 0;
    }
    this.segments = 0;
    for (const p of this.packets) this.segments += Math.floor(p.data.length / 255) + 1;
    return pages;
  }

  /** A page holding exactly one packet that must start and end it (the codec's header packets). */
  headerPage(data: Uint8Array): Uint8Array {
    if (this.packets.length) throw new Error('OggWriter: header page after audio packets');
    this.add(data, 0);
    const pages = this.flush();
    if (pages.length !== 1) throw new Error('OggWriter: header packet does not fit on one page');
    return pages[0]!;
  }

  private page(lacing: number[], parts: Uint8Array[], granule: number, continued: boolean, end: boolean): Uint8Array {
    const bodyBytes = parts.reduce((sum, p) => sum + p.length, 0);
    const page = new Uint8Array(HEADER_BYTES + lacing.length + bodyBytes);
    const view = new DataView(page.buffer);
    page.set([0x4f, 0x67, 0x67, 0x53]); // "OggS"
    page[4] = 0; // version
    page[5] = (continued ? 1 : 0) | (this.started ? 0 : 2) | (end ? 4 : 0);
    this.started = true;
    // Granule −1 (all bits set): no packet finishes on this page.
    const g = granule < 0 ? 2 ** 64 - 1 : granule;
    view.setUint32(6, granule < 0 ? 0xffffffff : g % 2 ** 32, true);
    view.setUint32(10, granule < 0 ? 0xffffffff : Math.floor(g / 2 ** 32), true);
    view.setUint32(14, this.serial, true);
    view.setUint32(18, this.sequence++, true);
    page[26] = lacing.length;
    page.set(lacing, HEADER_BYTES);
    let at = HEADER_BYTES + lacing.length;
    for (const part of parts) {
      page.set(part, at);
      at += part.length;
    }
    view.setUint32(22, crc32Ogg(page), true);
    return page;
  }
}
