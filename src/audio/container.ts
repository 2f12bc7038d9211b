/**
 * Header-only facts about audio containers, for src/audio/decode.ts.
 *
 * `truncationOf`: cheap structural checks run before decoding: the
 * decoders return whatever frames they can read and say nothing when a file
 * stops short (a cut-off upload would otherwise be transcribed as a shorter
 * recording). Each check walks headers only, never audio data, and answers
 * only when the container itself says more bytes should follow; a file whose
 * structure it cannot follow (garbage, a streaming-style header with unknown
 * sizes) gets no verdict and is left to the decoder.
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
      return isOgg(bytes, 0) ? oggTruncation(bytes) : undefined; // native FLAC: checked against STREAMINFO after decoding
    case 'm4a':
      return isoBmffTruncation(bytes);
    case 'webm':
    case 'mkv':
      return matroskaTruncation(bytes);
    default:
      return undefined;
  }
}

function ascii(bytes: Uint8Array, at: number, length: number): string {
  let s = '';
  for (let i = at; i < at + length && i < bytes.length; i++) s += String.fromCharCode(bytes[i]!);
  return s;
}

function u32le(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
}

function u32be(b: Uint8Array, at: number): number {
  return ((b[at]! << 24) | (b[at + 1]! << 16) | (b[at + 2]! << 8) | b[at + 3]!) >>> 0;
}

const missing = (declared: number, present: number, what: string) =>
  `the file is truncated: ${what} declares ${declared} bytes but only ${present} are present`;

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

/** Byte offset after a leading ID3v2 tag (0 without one), or -1 when the tag runs past the end. */
function afterId3(b: Uint8Array): number {
  if (ascii(b, 0, 3) !== 'ID3' || b.length < 10) return 0;
  const size = ((b[6]! & 0x7f) << 21) | ((b[7]! & 0x7f) << 14) | ((b[8]! & 0x7f) << 7) | (b[9]! & 0x7f);
  const end = 10 + size + (b[5]! & 0x10 ? 10 : 0);
  return end > b.length ? -1 : end;
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

/** Byte length of the ADTS frame at `at` (header included), or 0 when there is no valid header there. */
function adtsFrameLength(b: Uint8Array, at: number): number {
  if (at + 7 > b.length || b[at] !== 0xff || (b[at + 1]! & 0xf6) !== 0xf0) return 0;
  const length = ((b[at + 3]! & 0x03) << 11) | (b[at + 4]! << 3) | (b[at + 5]! >> 5);
  return length >= 7 ? length : 0;
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

const MPEG_BITRATES: Record<string, number[]> = {
  // [version][layer]: kbit/s by index 1..14
  '1-1': [32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448],
  '1-2': [32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384],
  '1-3': [32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],
  '2-1': [32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
  '2-2': [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
  '2-3': [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
};
const MPEG_RATES = [44100, 48000, 32000];

/** Byte length of the MPEG audio frame whose header is at `at`, or 0 when there is no valid header there. */
function mpegFrameLength(b: Uint8Array, at: number): number {
  if (at + 4 > b.length) return 0;
  const h1 = b[at + 1]!;
  const h2 = b[at + 2]!;
  if (b[at] !== 0xff || (h1 & 0xe0) !== 0xe0) return 0;
  const versionBits = (h1 >> 3) & 3; // 0: 2.5, 2: 2, 3: 1
  const layerBits = (h1 >> 1) & 3; // 1: III, 2: II, 3: I
  const bitrateIndex = h2 >> 4;
  const rateIndex = (h2 >> 2) & 3;
  if (versionBits === 1 || layerBits === 0 || bitrateIndex === 0 || bitrateIndex === 15 || rateIndex === 3) return 0;
  const layer = 4 - layerBits;
  const v1 = versionBits === 3;
  const bitrate = MPEG_BITRATES[`${v1 ? 1 : 2}-${layer}`]![bitrateIndex - 1]! * 1000;
  const rate = MPEG_RATES[rateIndex]! / (v1 ? 1 : versionBits === 2 ? 2 : 4);
  const padding = (h2 >> 1) & 1;
  if (layer === 1) return (Math.floor((12 * bitrate) / rate) + padding) * 4;
  const perFrame = layer === 3 && !v1 ? 72 : 144;
  return Math.floor((perFrame * bitrate) / rate) + padding;
}

function isOgg(b: Uint8Array, at: number): boolean {
  return b[at] === 0x4f && b[at + 1] === 0x67 && b[at + 2] === 0x67 && b[at + 3] === 0x53;
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

/** EBML variable-length integer at `at`: its value (with the marker bit removed unless keepMarker) and length. */
function vint(b: Uint8Array, at: number, keepMarker: boolean): { value: number; length: number; unknown: boolean } | undefined {
  const first = b[at];
  if (first === undefined || first === 0) return undefined;
  let length = 1;
  while (!(first & (0x80 >> (length - 1)))) length++;
  if (at + length > b.length) return undefined;
  let value = keepMarker ? first : first & (0xff >> length);
  let allOnes = value === 0xff >> length;
  for (let i = 1; i < length; i++) {
    value = value * 256 + b[at + i]!;
    if (b[at + i] !== 0xff) allOnes = false;
  }
  return { value, length, unknown: !keepMarker && allOnes };
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

/** True when an ISO BMFF (MP4/M4A) file has its index (moov) before the audio data (mdat), so it can be decoded as it streams in. */
export function mp4IndexFirst(b: Uint8Array): boolean {
  let pos = 0;
  while (pos + 8 <= b.length) {
    const type = ascii(b, pos + 4, 4);
    if (type === 'moov') return true;
    if (type === 'mdat') return false;
    let size = u32be(b, pos);
    if (size === 1 && pos + 16 <= b.length) size = u32be(b, pos + 8) * 2 ** 32 + u32be(b, pos + 12);
    if (size < 8) return false;
    pos += size;
  }
  return false;
}

/** Samples per channel that a native FLAC file's STREAMINFO declares (0: unknown, or not native FLAC). */
export function flacTotalSamples(b: Uint8Array): number {
  const pos = afterId3(b);
  if (pos < 0 || pos + 26 > b.length || ascii(b, pos, 4) !== 'fLaC' || (b[pos + 4]! & 0x7f) !== 0) return 0;
  // STREAMINFO body (after the 4-byte block header): the total is the low 36 bits of bytes 13..17.
  const info = pos + 8;
  return (b[info + 13]! & 0x0f) * 2 ** 32 + u32be(b, info + 14);
}
