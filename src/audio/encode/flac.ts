import { createHash, type Hash } from 'node:crypto';
import { BitWriter } from './bits.js';
import { encodeFrame, type FrameVariant, frameScratch } from './flac-frame.js';
import { floatToInt16, int16LeBytes } from './pcm16.js';
import { type AudioEncoder, EncoderEndedError } from './types.js';

/**
 * FLAC, 16-bit mono, written by lserve itself (./flac-frame.ts codes the
 * frames): fixed blocks of 4096 samples, the last one shorter.
 *
 * Streaming: the fLaC marker and a STREAMINFO that leaves the total, the
 * frame sizes and the MD5 unknown (0, as the format allows) go out with the
 * first block; each frame leaves once its 4096 samples are in and one more
 * sample has come (so that the last frame is always made by `end`, below).
 * Whole file: the same frames, behind a STREAMINFO with the exact total,
 * frame sizes and the MD5 of the PCM.
 *
 * The last frame is coded so that codec-parser — the framing under
 * @wasm-audio-decoders/flac, which decodeAudio and many web players use —
 * can delimit it: when flushing, it drops (or merges into the frame before)
 * a last frame of 13 bytes or less (a block of digital silence is 12), or
 * one with a 0xFF byte at its third-to-last byte or a false frame sync in
 * its last 13 bytes; decodeAudio then finds the file shorter than its
 * STREAMINFO says and rejects it. libFLAC and ffmpeg read such frames fine,
 * but lserve's output should decode everywhere, so the last frame takes the
 * first of a few codings (./flac-frame.ts FrameVariant) with no 0xFF byte in
 * its last 14 (a slightly stricter rule). The smallest coding fails that in
 * ≈ 7 % of files that end in sound and in all that end in digital silence;
 * the change costs at most a block of verbatim samples (8 KB).
 */

/** The codings tried for the last frame, in order: smallest first. */
const LAST_FRAME_VARIANTS: FrameVariant[] = [
  {},
  { longHeader: true },
  { subframe: 'verbatim' },
  { subframe: 'verbatim', longHeader: true },
  ...([0, 1, 2, 3, 4] as const).flatMap((order) => [{ subframe: order }, { subframe: order, longHeader: true }]),
];

/** Whether codec-parser delimits `frame` when it ends the file (see above). */
function parsesAsLastFrame(frame: Uint8Array): boolean {
  const length = frame.length;
  if (length <= 13) return false;
  // Bytes the sync search looks at (the CRC-16 excepted) within 13 bytes of the end.
  for (let i = Math.max(2, length - 14); i <= length - 3; i++) if (frame[i] === 0xff) return false;
  return true;
}

const BLOCK = 4096;
const STREAMINFO_BYTES = 34;
/** FLAC's limits for STREAMINFO's fields. */
const MAX_RATE = 655_350;

function streamInfo(sampleRate: number, info?: { total: number; minFrame: number; maxFrame: number; minBlock: number; md5: Uint8Array }): Uint8Array {
  const w = new BitWriter(4 + 4 + STREAMINFO_BYTES);
  for (const c of 'fLaC') w.write(c.charCodeAt(0), 8);
  // Metadata block header: last block, type 0 (STREAMINFO), length.
  w.write(0x80, 8);
  w.write(STREAMINFO_BYTES, 24);
  // Minimum block size: every block but the last has BLOCK samples; a file of one short block states that one's size.
  w.write(info ? info.minBlock : BLOCK, 16);
  w.write(info ? info.minBlock : BLOCK, 16);
  w.write(info?.minFrame ?? 0, 24);
  w.write(info?.maxFrame ?? 0, 24);
  w.write(sampleRate >>> 4, 16);
  w.write(sampleRate & 0xf, 4);
  w.write(0, 3); // channels − 1
  w.write(15, 5); // bits per sample − 1
  const total = info?.total ?? 0;
  w.write(Math.floor(total / 2 ** 32) & 0xf, 4);
  w.writeWide(total >>> 0, 32);
  const md5 = info?.md5 ?? new Uint8Array(16);
  for (const byte of md5) w.write(byte, 8);
  return w.bytes().slice();
}

export function createFlacEncoder(sampleRate: number, streaming: boolean): AudioEncoder {
  if (!Number.isInteger(sampleRate) || sampleRate < 1 || sampleRate > MAX_RATE) {
    throw new RangeError(`FLAC sample rate must be a whole number of Hz from 1 to ${MAX_RATE} (got ${sampleRate})`);
  }
  const writer = new BitWriter(BLOCK * 2 + 64);
  const scratch = frameScratch(BLOCK);
  const block = new Int16Array(BLOCK);
  let filled = 0;
  let frames = 0;
  let total = 0;
  let minFrame = Infinity;
  let maxFrame = 0;
  let headerSent = false;
  let ended = false;
  const held: Uint8Array[] = [];
  const md5: Hash | undefined = streaming ? undefined : createHash('md5');

  const frame = (samples: Int16Array, variant?: FrameVariant): Uint8Array => {
    writer.reset();
    encodeFrame(writer, samples, frames, sampleRate, scratch, variant);
    return writer.bytes().slice();
  };
  const keep = (bytes: Uint8Array): Uint8Array => {
    frames++;
    minFrame = Math.min(minFrame, bytes.length);
    maxFrame = Math.max(maxFrame, bytes.length);
    return bytes;
  };
  const lastFrame = (samples: Int16Array): Uint8Array => {
    for (const variant of LAST_FRAME_VARIANTS) {
      const bytes = frame(samples, variant);
      if (parsesAsLastFrame(bytes)) return keep(bytes);
    }
    return keep(frame(samples)); // none avoids every pattern (a block of one or two samples, say): the smallest
  };
  const emit = (out: Uint8Array[]): Uint8Array[] => {
    if (!streaming) {
      held.push(...out);
      return [];
    }
    if (!headerSent) {
      headerSent = true;
      out.unshift(streamInfo(sampleRate));
    }
    return out;
  };

  return {
    format: 'flac',
    contentType: 'audio/flac',
    extension: 'flac',
    sampleRate,
    write(samples) {
      if (ended) throw new EncoderEndedError('flac');
      const pcm = floatToInt16(samples);
      md5?.update(int16LeBytes(pcm));
      total += pcm.length;
      const out: Uint8Array[] = [];
      let at = 0;
      while (at < pcm.length) {
        // A full block is coded once a sample past it has come: the last block is always left for end().
        if (filled === BLOCK) {
          out.push(keep(frame(block)));
          filled = 0;
        }
        if (filled === 0 && pcm.length - at > BLOCK) {
          out.push(keep(frame(pcm.subarray(at, at + BLOCK)))); // a whole block straight from the input
          at += BLOCK;
          continue;
        }
        const take = Math.min(BLOCK - filled, pcm.length - at);
        block.set(pcm.subarray(at, at + take), filled);
        filled += take;
        at += take;
      }
      return emit(out);
    },
    end() {
      if (ended) throw new EncoderEndedError('flac');
      ended = true;
      const last = filled > 0 ? [lastFrame(block.subarray(0, filled))] : [];
      if (streaming) return emit(last);
      held.push(...last);
      const info = {
        total,
        minFrame: Number.isFinite(minFrame) ? minFrame : 0,
        maxFrame,
        minBlock: total > 0 && total < BLOCK ? Math.max(16, total) : BLOCK,
        md5: new Uint8Array(md5!.digest()),
      };
      return [streamInfo(sampleRate, info), ...held.splice(0)];
    },
  };
}
