import { FlacFrameReader } from '../containers/flac.js';
import { isOgg } from '../containers/ogg.js';
import { concatPcm, NO_PCM, pcmOf, type PieceDecoder, reasonOf } from './piece.js';
import { openStreaming } from './wasm.js';

/**
 * FLAC through @wasm-audio-decoders/flac (libFLAC), loaded on first use.
 *
 * Native FLAC: the frames that ../containers/flac.ts finds, one whole frame
 * per libFLAC call through the package's frame API (the framing the package
 * would otherwise use loses the last frame of some valid files: see there).
 * Like the Opus adapter, the frames are read from the file itself, each
 * piece saying how far they may go.
 *
 * libFLAC sees frames only, never the STREAMINFO: a frame that leaves its
 * sample rate or bit depth to the STREAMINFO (rates such as 70 001 Hz,
 * outside the FLAC Subset) does not decode. Handing it the STREAMINFO first
 * is not safe: after a call that outputs no samples the package frees its
 * previous output buffer again (before any frame: an uninitialised pointer).
 * The same happens after a frame that fails, so once one has failed (the
 * file is a 400 then) no more are decoded; a frame after it in the same call
 * may make the decoder trap, and freeing the decoder may fail harmlessly
 * (the wasm instance is dropped with it).
 *
 * FLAC in Ogg: the file's bytes as they come (each Ogg packet is one frame,
 * so the package's framing has nothing to guess there).
 */
export async function openFlac(bytes: Uint8Array): Promise<PieceDecoder> {
  const { FLACDecoder } = await import('@wasm-audio-decoders/flac');
  const decoder = new FLACDecoder();
  if (isOgg(bytes, 0)) return openStreaming(decoder);
  await decoder.ready;
  const reader = new FlacFrameReader(bytes);
  const errors: string[] = [];
  // A frame after a failed one in the same call can trap in the damaged heap (see above): named as the corrupt frames it is.
  const decodeFrames = (frames: Uint8Array[]) =>
    decoder.decodeFrames(frames).catch((error: unknown) => {
      const from = frames[0]!.byteOffset - bytes.byteOffset;
      const to = from + frames.reduce((sum, f) => sum + f.length, 0);
      throw new Error(`corrupt FLAC frame(s) between bytes ${from} and ${to}: the decoder failed (${reasonOf(error)})`);
    });
  const decodeUpTo = async (upTo: number) => {
    if (errors.length) return NO_PCM;
    const frames = reader.read(upTo);
    // A last frame that fails its CRC-16 at the end of the file is not decoded with the others.
    const tail = reader.done && reader.lastFrame !== undefined && reader.lastFrame !== 'checked' ? frames.pop() : undefined;
    const pcm = frames.length ? pcmOf(await decodeFrames(frames), errors) : NO_PCM;
    if (!tail) return pcm;
    // Cut off or damaged ('short': no frame ends in its bytes), or followed by a tag that libFLAC reads past ('tagged').
    const last = reader.lastFrame === 'tagged' ? await decoder.decodeFrames([tail]).catch(() => undefined) : undefined;
    if (!last || last.errors.length) {
      // As the other formats say of a file that stops short.
      throw new Error(`the file is truncated or corrupt: its last FLAC frame (${tail.length} bytes from byte ${tail.byteOffset - bytes.byteOffset}) is cut short or damaged`);
    }
    return concatPcm([pcm, pcmOf(last, errors)]);
  };
  return {
    decode: (piece, offset) => decodeUpTo(offset + piece.length),
    flush: () => decodeUpTo(Infinity),
    free: () => {
      try {
        decoder.free();
      } catch {
        // Its heap damaged by a failed frame (see above): the file is rejected already.
      }
    },
    errors,
  };
}
