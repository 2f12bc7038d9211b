import { UnsupportedCodecError } from '../containers/errors.js';
import { MatroskaReader, type MatroskaFrame } from '../containers/matroska.js';
import { OggOpusReader } from '../containers/ogg.js';
import { parseOpusHead, type OpusItem } from '../containers/opus.js';
import { concatPcm, FIRST_PIECE_BYTES, pcmOf, type Pcm, type PieceDecoder } from './piece.js';

/**
 * Opus, whatever carries it: packets from the Ogg and Matroska/WebM demuxers
 * in ../containers/ go straight into opus-decoder (libopus), with the
 * pre-skip, DiscardPadding and end-of-stream length applied. Loaded on first
 * use.
 */

/**
 * Opus packets from a demuxer (Ogg: OggOpusReader; WebM/Matroska:
 * MatroskaReader) through opus-decoder (libopus), each piece decoding the
 * packets that lie wholly inside the bytes seen so far. Each `{ head }` (the
 * OpusHead: channels, multistream mapping, pre-skip, which the decoder drops
 * itself) starts a decoder; a packet's `discard` or `length` trims the end.
 */
async function openOpus(source: { read(upTo: number): OpusItem[] }, first: OpusItem[] = []): Promise<PieceDecoder> {
  const { OpusDecoder } = await import('opus-decoder');
  let decoder: InstanceType<typeof OpusDecoder> | undefined;
  /** Samples the current stream has produced. */
  let produced = 0;
  const errors: string[] = [];
  const decodeUpTo = async (upTo: number): Promise<Pcm> => {
    const items = first.length ? [...first.splice(0), ...source.read(upTo)] : source.read(upTo);
    const parts: Pcm[] = [];
    let batch: Uint8Array[] = [];
    const run = (): number => {
      if (!batch.length || !decoder) return 0;
      const pcm = pcmOf(decoder.decodeFrames(batch), errors);
      batch = [];
      parts.push(pcm);
      const n = pcm.channelData[0]?.length ?? 0;
      produced += n;
      return n;
    };
    /** Cuts the last part to `keep` samples. */
    const cut = (n: number, keep: number) => {
      keep = Math.max(0, Math.min(n, keep));
      if (keep === n) return;
      const last = parts[parts.length - 1]!;
      parts[parts.length - 1] = { ...last, channelData: last.channelData.map((c) => c.subarray(0, keep)) };
      produced -= n - keep;
    };
    for (const item of items) {
      if ('head' in item) {
        run();
        decoder?.free();
        decoder = new OpusDecoder(item.head);
        await decoder.ready;
        produced = 0;
        continue;
      }
      if (!decoder) throw new Error('an Opus packet comes before the OpusHead');
      batch.push(item.packet);
      if (item.discard || item.length !== undefined) {
        const n = run();
        if (item.discard) cut(n, n - item.discard);
        if (item.length !== undefined) cut(n, item.length - (produced - n));
      }
    }
    run();
    return concatPcm(parts);
  };
  return {
    decode: (piece, offset) => decodeUpTo(offset + piece.length),
    flush: () => decodeUpTo(Infinity),
    free: () => decoder?.free(),
    errors,
  };
}

/** Ogg/Opus: OggOpusReader's packets (why not ogg-opus-decoder: see the top of ../decode.ts). */
export function openOggOpus(bytes: Uint8Array): Promise<PieceDecoder> {
  return openOpus(new OggOpusReader(bytes));
}

/**
 * WebM / Matroska: the reader in ../containers/matroska.ts demuxes the file
 * as the pieces come, the Tracks element first (its OpusHead in
 * CodecPrivate; without one, the track's channel count and CodecDelay), then
 * each piece's frames; a block's DiscardPadding trims the end of the audio
 * (the encoder's padding of the last frame). Opus only.
 */
export async function openMatroska(bytes: Uint8Array): Promise<PieceDecoder> {
  const reader = new MatroskaReader(bytes);
  // The Tracks element comes before the first Cluster, in the first few hundred bytes.
  const early: MatroskaFrame[] = [];
  for (let upTo = FIRST_PIECE_BYTES; !reader.track && !reader.done; upTo += FIRST_PIECE_BYTES) early.push(...reader.read(upTo));
  const track = reader.track!;
  if (track.codecId !== 'A_OPUS') {
    throw new UnsupportedCodecError(`its audio track's codec is ${track.codecId || 'not declared'} (in WebM/Matroska lserve decodes Opus)`);
  }
  const head = parseOpusHead(track.codecPrivate) ?? {
    channels: Math.min(2, Math.max(1, track.channels)),
    preSkip: Math.round((track.codecDelayNs * 48_000) / 1e9),
  };
  const toItem = (frame: MatroskaFrame): OpusItem => ({
    packet: bytes.subarray(frame.start, frame.end),
    discard: frame.discardNs > 0 ? Math.round((frame.discardNs * 48_000) / 1e9) : undefined,
  });
  return openOpus({ read: (upTo) => reader.read(upTo).map(toItem) }, [{ head }, ...early.map(toItem)]);
}
