import { NO_PCM, pcmOf, type PieceDecoder, type WasmDecoded } from './piece.js';

/**
 * The codecs decoded by the wasm-audio-decoders family that read their own
 * framing, so the file's bytes go to them as they are, each loaded on first
 * use: MP3 (mpg123-decoder), Ogg/Vorbis (@wasm-audio-decoders/ogg-vorbis),
 * and the streaming helper that ./flac.ts uses for FLAC in Ogg.
 */

/**
 * MP3 through mpg123-decoder. It always produces two channels; a mono stream
 * (by its first frame header) keeps the first. Its per-frame errors are not
 * fatal (mpg123 resynchronises past junk, as players do), as before.
 */
export async function openMp3(channels: number): Promise<PieceDecoder> {
  const { MPEGDecoder } = await import('mpg123-decoder');
  const decoder = new MPEGDecoder();
  await decoder.ready;
  const keep = channels === 1 ? 1 : undefined;
  return {
    decode: async (piece) => pcmOf(decoder.decode(piece), undefined, keep),
    flush: async () => NO_PCM,
    free: () => decoder.free(),
  };
}

export async function openOggVorbis(): Promise<PieceDecoder> {
  const { OggVorbisDecoder } = await import('@wasm-audio-decoders/ogg-vorbis');
  return openStreaming(new OggVorbisDecoder());
}

/** A wasm-audio-decoders decoder that takes the file's bytes as they come (Ogg/Vorbis, Ogg FLAC). */
interface StreamingWasmDecoder {
  ready: Promise<void>;
  decode(bytes: Uint8Array): Promise<WasmDecoded>;
  flush(): Promise<WasmDecoded>;
  free(): void;
}

/** Once it is ready: each piece decoded as it comes, then flushed; its per-frame errors collected (any one fails the file). */
export async function openStreaming(decoder: StreamingWasmDecoder): Promise<PieceDecoder> {
  await decoder.ready;
  const errors: string[] = [];
  return {
    decode: async (piece) => pcmOf(await decoder.decode(piece), errors),
    flush: async () => pcmOf(await decoder.flush(), errors),
    free: () => decoder.free(),
    errors,
  };
}
