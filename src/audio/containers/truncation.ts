import { ascii, u32be, u32le, vint } from './bytes.js';
import { missing } from './errors.js';
import { flacLayout } from './flac.js';
import { adtsFrameLength, afterId3, mpegFrameLength } from './mpeg.js';
import { isOgg } from './ogg.js';

/**
 * Whether a file was cut off: cheap structural checks run before decoding.
 * The decoders return whatever frames they can read and say nothing when a
 * file stops short (a cut-off upload would otherwise be transcribed as a
 * shorter recording). Each check walks headers only, never audio data, and
 * answers only when the container itself says more bytes should follow; a
 * file whose structure it cannot follow (garbage, a streaming-style header
 * with unknown sizes) gets no verdict and is left to the decoder (the
 * Matroska demuxer still notices a last block that does not fit). Native
 * FLAC: its metadata blocks here; its frames after decoding, against its
 * STREAMINFO (flacTotalSamples), and by ../decoders/flac.ts, which reports a
 * last frame that stops short.
 */

/** Why `bytes` looks cut off, or undefined when it does not (or cannot be told). */
export function truncationOf(bytes: Uint8Array, format: string): string | undefined {
  switch (format) {
    case 'wav':
      return wavTruncation(bytes);
    case 'mp3':
      return mp3Truncation(bytes);
    case 'aac':
      return adtsTruncation(bytes);
    case 'aiff':
      return aiffTruncation(bytes);
    case 'caf':
      return cafTruncation(bytes);
    case 'ogg':
      return oggTruncation(bytes);
    case 'flac':
      // Native FLAC: the metadata blocks here; the frames are checked against STREAMINFO after decoding.
      return isOgg(bytes, 0) ? oggTruncation(bytes) : flacLayout(bytes).truncated;
    case 'm4a':
      return isoBmffTruncation(bytes);
    case 'webm':
    case 'mkv':
      return matroskaTruncation(bytes);
    default:
      return undefined;
  }
}

/** RIFF/WAVE: the `data` chunk's declared size (0 and 0xFFFFFFFF are streaming placeholders). */
function wavTruncation(b: Uint8Array): string | undefined {
  let pos = 12;
  let blockAlign = 1;
  while (pos + 8 <= b.length) {
    const id = ascii(b, pos, 4);
    const size = u32le(b, pos + 4);
    if (id === 'fmt ' && pos + 22 <= b.length) blockAlign = Math.max(1, b[pos + 20]! | (b[pos + 21]! << 8));
    if (id === 'data') {
      if (size === 0 || size === 0xffffffff) return undefined;
      const present = b.length - (pos + 8);
      // A final partial frame is harmless (some writers round the size); a missing frame is not.
      return present + blockAlign <= size ? missing(size, present, 'the WAV data chunk') : undefined;
    }
    pos += 8 + size + (size & 1);
  }
  return pos > b.length ? 'the file is truncated inside its WAV header' : undefined;
}

/**
 * Self-delimiting frame streams (MPEG audio, AAC ADTS): walks the frame
 * headers from the first one; the last frame must be complete. `frameLength`
 * returns 0 where there is no valid header.
 */
function frameStreamTruncation(b: Uint8Array, frameLength: (b: Uint8Array, at: number) => number, what: string): string | undefined {
  let pos = afterId3(b);
  if (pos < 0) return 'the file is truncated inside its ID3 tag';
  // Find the first frame (encoders may pad after the tag).
  const limit = Math.min(b.length, pos + 64 * 1024);
  while (pos + 4 <= limit && frameLength(b, pos) <= 0) pos++;
  if (pos + 4 > limit) return undefined;
  for (;;) {
    if (pos === b.length) return undefined;
    const length = frameLength(b, pos);
    if (length <= 0) return undefined; // trailing tag (ID3v1 'TAG', APE, appended ID3) or lost sync: no verdict
    if (pos + length > b.length) return `the file is truncated: its last ${what} frame needs ${length} bytes but only ${b.length - pos} are present`;
    pos += length;
  }
}

function mp3Truncation(b: Uint8Array): string | undefined {
  return frameStreamTruncation(b, mpegFrameLength, 'MPEG audio');
}

function adtsTruncation(b: Uint8Array): string | undefined {
  return frameStreamTruncation(b, adtsFrameLength, 'AAC (ADTS)');
}

/** AIFF/AIFC: the SSND chunk's declared size. */
function aiffTruncation(b: Uint8Array): string | undefined {
  let pos = 12;
  let frameBytes = 1;
  while (pos + 8 <= b.length) {
    const id = ascii(b, pos, 4);
    const size = u32be(b, pos + 4);
    if (id === 'COMM' && pos + 16 <= b.length) frameBytes = Math.max(1, ((b[pos + 8]! << 8) | b[pos + 9]!) * Math.ceil(((b[pos + 14]! << 8) | b[pos + 15]!) / 8));
    if (id === 'SSND') {
      const present = b.length - (pos + 8);
      return present + frameBytes <= size ? missing(size, present, 'the AIFF SSND chunk') : undefined;
    }
    pos += 8 + size + (size & 1);
  }
  return pos > b.length ? 'the file is truncated inside its AIFF header' : undefined;
}

/** CAF: the data chunk's declared size (−1: still being written, no verdict). */
function cafTruncation(b: Uint8Array): string | undefined {
  let pos = 8;
  while (pos + 12 <= b.length) {
    const id = ascii(b, pos, 4);
    const high = u32be(b, pos + 4);
    const low = u32be(b, pos + 8);
    if (id === 'data' && high === 0xffffffff && low === 0xffffffff) return undefined;
    const size = high * 2 ** 32 + low;
    if (pos + 12 + size > b.length) return missing(size, b.length - (pos + 12), `its CAF '${id}' chunk`);
    pos += 12 + size;
  }
  return pos < b.length ? 'the file is truncated inside a CAF chunk header' : undefined;
}

/** Ogg: pages chain exactly; the last must be complete and carry the end-of-stream flag. */
function oggTruncation(b: Uint8Array): string | undefined {
  let pos = 0;
  let lastFlags = -1;
  while (pos < b.length) {
    if (!isOgg(b, pos)) return undefined; // not a page boundary: garbage after the stream, or corrupt; no verdict
    if (pos + 27 > b.length) return 'the file is truncated inside an Ogg page header';
    const segments = b[pos + 26]!;
    if (pos + 27 + segments > b.length) return 'the file is truncated inside an Ogg page header';
    let body = 0;
    for (let i = 0; i < segments; i++) body += b[pos + 27 + i]!;
    const end = pos + 27 + segments + body;
    if (end > b.length) return missing(end - pos, b.length - pos, 'its last Ogg page');
    lastFlags = b[pos + 5]!;
    pos = end;
  }
  return lastFlags >= 0 && !(lastFlags & 0x04) ? 'the file is truncated: its last Ogg page does not end the stream' : undefined;
}

/** ISO BMFF (MP4/M4A/MOV): every top-level box must fit in the file. */
function isoBmffTruncation(b: Uint8Array): string | undefined {
  let pos = 0;
  while (pos + 8 <= b.length) {
    let size = u32be(b, pos);
    const type = ascii(b, pos + 4, 4);
    if (size === 1) {
      if (pos + 16 > b.length) return 'the file is truncated inside an MP4 box header';
      size = u32be(b, pos + 8) * 2 ** 32 + u32be(b, pos + 12);
    } else if (size === 0) {
      return undefined; // box runs to the end of the file
    }
    if (size < 8) return undefined; // not a box structure we can follow
    if (pos + size > b.length) return missing(size, b.length - pos, `its MP4 '${type}' box`);
    pos += size;
  }
  return pos < b.length ? 'the file is truncated inside an MP4 box header' : undefined;
}

/** Matroska/WebM: the EBML header, then the Segment and its children, must fit where their sizes are known. */
function matroskaTruncation(b: Uint8Array): string | undefined {
  let pos = 0;
  for (let level = 0; pos < b.length; ) {
    const id = vint(b, pos, true);
    const size = id && vint(b, pos + id.length, false);
    if (!id || !size) return 'the file is truncated inside a Matroska element header';
    const dataStart = pos + id.length + size.length;
    if (level === 0 && id.value === 0x18538067) {
      // Segment: check its declared size, then walk its children (Clusters, Cues…).
      if (!size.unknown && dataStart + size.value > b.length) return missing(size.value, b.length - dataStart, 'its Matroska Segment');
      pos = dataStart;
      level = 1;
      continue;
    }
    if (size.unknown) return undefined; // live-recorded file (MediaRecorder): sizes unknown, no verdict
    if (dataStart + size.value > b.length) return missing(size.value, b.length - dataStart, 'a Matroska element');
    pos = dataStart + size.value;
  }
  return undefined;
}

/** Samples per channel that a native FLAC file's STREAMINFO declares (0: unknown, or not native FLAC). */
export function flacTotalSamples(b: Uint8Array): number {
  const pos = afterId3(b);
  if (pos < 0 || pos + 26 > b.length || ascii(b, pos, 4) !== 'fLaC' || (b[pos + 4]! & 0x7f) !== 0) return 0;
  // STREAMINFO body (after the 4-byte block header): the total is the low 36 bits of bytes 13..17.
  const info = pos + 8;
  return (b[info + 13]! & 0x0f) * 2 ** 32 + u32be(b, info + 14);
}
