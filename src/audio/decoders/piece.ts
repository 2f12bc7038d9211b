/**
 * What every codec adapter in this folder hands decodeAudio (../decode.ts):
 * a PieceDecoder fed the file piece by piece, and the PCM it returns. Also
 * the helpers they share: the wasm-audio-decoders result → Pcm, joining PCM,
 * and the error types and wording that decodeAudio maps to its 400s (invalid_audio).
 */

/**
 * Bytes of the first piece decodeAudio hands a decoder (later pieces are
 * sized from the bitrate, see ../decode.ts); the Matroska adapter reads up to
 * the Tracks element in steps of it.
 */
export const FIRST_PIECE_BYTES = 16 * 1024;

export interface Pcm {
  channelData: Float32Array[];
  sampleRate: number;
}

export const NO_PCM: Pcm = { channelData: [], sampleRate: 0 };

/** One codec's streaming decoder, whatever library is behind it. */
export interface PieceDecoder {
  /** Decodes the next piece of the file, which starts at byte `offset` (pieces come in order and cover the file). */
  decode(piece: Uint8Array, offset: number): Promise<Pcm>;
  flush(): Promise<Pcm>;
  free(): void;
  /** Set by decoders that report per-frame errors instead of throwing. */
  errors?: string[];
}

/** What the wasm-audio-decoders family (FLAC, Opus, Vorbis, MP3) returns from each call. */
export interface WasmDecoded {
  channelData: Float32Array[];
  samplesDecoded: number;
  sampleRate: number;
  errors: { message: string; frameNumber: number }[];
}

/** Their arrays cut to the samples decoded, the first `keep` channels only when given; errors appended to `errors` unless it is undefined. */
export function pcmOf(decoded: WasmDecoded, errors: string[] | undefined, keep?: number): Pcm {
  if (errors) for (const e of decoded.errors) errors.push(`${e.message} (frame ${e.frameNumber})`);
  const n = decoded.samplesDecoded;
  if (!n) return NO_PCM;
  const channels = keep ? decoded.channelData.slice(0, keep) : decoded.channelData;
  return { channelData: channels.map((c) => (c.length === n ? c : c.subarray(0, n))), sampleRate: decoded.sampleRate };
}

/** Pieces of PCM one after another at one rate → one. */
export function concatPcm(parts: Pcm[]): Pcm {
  const filled = parts.filter((p) => (p.channelData[0]?.length ?? 0) > 0);
  if (filled.length <= 1) return filled[0] ?? NO_PCM;
  const channels = Math.max(...filled.map((p) => p.channelData.length));
  const length = filled.reduce((sum, p) => sum + p.channelData[0]!.length, 0);
  const channelData = Array.from({ length: channels }, (_, c) => {
    const out = new Float32Array(length);
    let at = 0;
    for (const p of filled) {
      out.set(p.channelData[Math.min(c, p.channelData.length - 1)]!, at);
      at += p.channelData[0]!.length;
    }
    return out;
  });
  return { channelData, sampleRate: filled[0]!.sampleRate };
}

/** An Error whose message reaches the 400 as is, and which says the decoder is missing rather than the file bad. */
export class MissingDecoderError extends Error {}

/** An error's first line (at most 200 characters), as the 400 quotes it. */
export function reasonOf(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const line = message.split('\n')[0]!.trim();
  return line.length > 200 ? `${line.slice(0, 200)}…` : line || 'unknown decoder error';
}
