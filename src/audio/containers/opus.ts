import { startsWith, u16le } from './bytes.js';

/**
 * The Opus codec's set-up (the OpusHead identification header) and what an
 * Opus demuxer hands the decoder. Shared by the Ogg reader (./ogg.ts) and by
 * the WebM/Matroska path, whose OpusHead sits in the track's CodecPrivate.
 */

/** The fields of an Opus identification header (OpusHead) that a decoder needs. */
export interface OpusHead {
  channels: number;
  preSkip: number;
  /** Channel mapping family ≥ 1 only. */
  streamCount?: number;
  coupledStreamCount?: number;
  channelMappingTable?: number[];
}

export function parseOpusHead(b: Uint8Array | undefined): OpusHead | undefined {
  if (!b || b.length < 19 || !startsWith(b, 0, 'OpusHead')) return undefined;
  const channels = b[9]!;
  const head: OpusHead = { channels, preSkip: u16le(b, 10) };
  if (b[18] !== 0) {
    if (b.length < 21 + channels) return undefined;
    head.streamCount = b[19]!;
    head.coupledStreamCount = b[20]!;
    head.channelMappingTable = Array.from(b.subarray(21, 21 + channels));
  }
  return head;
}

/** What an Opus demuxer hands the decoder, in order: a stream's set-up, then its packets. */
export type OpusItem =
  | { head: OpusHead }
  | {
      packet: Uint8Array;
      /** Samples (48 kHz) of this packet's audio to drop from its end (Matroska DiscardPadding). */
      discard?: number;
      /** The stream's length in samples (48 kHz, pre-skip excluded), known at its last packet: output beyond it is dropped. */
      length?: number;
    };
