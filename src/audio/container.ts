/**
 * Header-level facts about audio containers, for src/audio/decode.ts: which
 * format a file is (by its magic bytes), the layout of uncompressed PCM in
 * WAV/AIFF/CAF, the audio frames of a Matroska/WebM file, the codec of an
 * MP4/M4A's sound track, and whether a file was cut off. Everything here walks
 * headers and element/chunk/box structure only; no audio is decoded.
 *
 * `truncationOf`: cheap structural checks run before decoding: the
 * decoders return whatever frames they can read and say nothing when a file
 * stops short (a cut-off upload would otherwise be transcribed as a shorter
 * recording). Each check walks headers only, never audio data, and answers
 * only when the container itself says more bytes should follow; a file whose
 * structure it cannot follow (garbage, a streaming-style header with unknown
 * sizes) gets no verdict and is left to the decoder (the Matroska demuxer
 * below still notices a last block that does not fit).
 */

/** Thrown where a file is sound but its codec is one lserve does not decode (a 415 'unsupported', not 'corrupt'). */
export class UnsupportedCodecError extends Error {}

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

function u16le(b: Uint8Array, at: number): number {
  return b[at]! | (b[at + 1]! << 8);
}

function u16be(b: Uint8Array, at: number): number {
  return (b[at]! << 8) | b[at + 1]!;
}

function startsWith(b: Uint8Array, at: number, text: string): boolean {
  if (at + text.length > b.length) return false;
  for (let i = 0; i < text.length; i++) if (b[at + i] !== text.charCodeAt(i)) return false;
  return true;
}

// ---------------------------------------------------------------------------
// Format detection
// ---------------------------------------------------------------------------

/** Recognisable formats that lserve does not decode: detected only to name them in the error. */
const OTHER_MAGIC: [string, number, string][] = [
  ['MThd', 0, 'mid'],
  ['#!AMR', 0, 'amr'],
  ['MAC ', 0, 'ape'],
  ['wvpk', 0, 'wv'],
  ['TTA1', 0, 'tta'],
  ['MPCK', 0, 'mpc'],
  ['MP+', 0, 'mpc'],
  ['qoaf', 0, 'qoa'],
  ['.snd', 0, 'au'],
  ['DSD ', 0, 'dsf'],
  ['FRM8', 0, 'dff'],
];
const ASF_GUID = [0x30, 0x26, 0xb2, 0x75, 0x8e, 0x66, 0xcf, 0x11];

/**
 * The format of `b` by its magic bytes: 'wav' (RIFF/RF64/BW64 WAVE), 'aiff'
 * (AIFF/AIFC), 'caf', 'flac' (native, or FLAC in Ogg), 'opus' and 'vorbis'
 * (in Ogg), 'webm' and 'mkv' (EBML, told apart by DocType), 'm4a' (any ISO
 * BMFF: ftyp), 'mp3' (MPEG audio, after an ID3v2 tag or not), 'aac' (ADTS).
 * A few formats lserve does not decode come back by name ('mid', 'wma',
 * 'amr', 'ac3', 'dts', 'avi', 'speex', 'ogg' for another codec in Ogg, …) so
 * that the error can say what the file is. Undefined when nothing matches.
 */
export function detectFormat(b: Uint8Array): string | undefined {
  const riff = ascii(b, 0, 4);
  if ((riff === 'RIFF' || riff === 'RF64' || riff === 'BW64') && startsWith(b, 8, 'WAVE')) return 'wav';
  if (riff === 'RIFF' && startsWith(b, 8, 'AVI ')) return 'avi';
  if (riff === 'FORM' && (startsWith(b, 8, 'AIFF') || startsWith(b, 8, 'AIFC'))) return 'aiff';
  if (riff === 'caff') return 'caf';
  if (riff === 'fLaC') return 'flac';
  if (isOgg(b, 0)) return oggCodec(b);
  if (u32be(b, 0) === 0x1a45dfa3) return ebmlDocType(b) === 'webm' ? 'webm' : 'mkv';
  if (startsWith(b, 4, 'ftyp')) return 'm4a';
  for (const [magic, at, name] of OTHER_MAGIC) if (startsWith(b, at, magic)) return name;
  if (ASF_GUID.every((v, i) => b[i] === v)) return 'wma';
  if (b[0] === 0x0b && b[1] === 0x77) return 'ac3';
  if (u32be(b, 0) === 0x7ffe8001 || u32be(b, 0) === 0xfe7f0180 || u32be(b, 0) === 0x1fffe800) return 'dts';

  const afterTag = afterId3(b);
  if (afterTag < 0) return 'mp3'; // only the start of a tagged file: MPEG audio is by far the most common behind ID3v2
  if (afterTag > 0) {
    if (startsWith(b, afterTag, 'fLaC')) return 'flac';
    // Encoders may pad after the tag: look for the first frame a little further on.
    const limit = Math.min(b.length, afterTag + 64 * 1024);
    for (let at = afterTag; at + 4 <= limit; at++) {
      if (b[at] !== 0xff) continue;
      if (adtsFrameLength(b, at) > 0) return 'aac';
      if (mpegFrameLength(b, at) > 0) return 'mp3';
    }
    return undefined;
  }
  if (adtsFrameLength(b, 0) > 0) return 'aac';
  if (mpegFrameLength(b, 0) > 0) return 'mp3';
  return undefined;
}

/** The codec of an Ogg stream, from its first packet. */
function oggCodec(b: Uint8Array): string {
  const at = 27 + (b[26] ?? 0);
  if (startsWith(b, at, 'OpusHead')) return 'opus';
  if (b[at] === 0x01 && startsWith(b, at + 1, 'vorbis')) return 'vorbis';
  if (b[at] === 0x7f && startsWith(b, at + 1, 'FLAC')) return 'flac';
  if (startsWith(b, at, 'Speex   ')) return 'speex';
  return 'ogg';
}

/** The DocType of an EBML header ('webm', 'matroska', …), or undefined. */
function ebmlDocType(b: Uint8Array): string | undefined {
  const size = vint(b, 4, false);
  if (!size || size.unknown) return undefined;
  const end = Math.min(b.length, 4 + size.length + size.value);
  for (let pos = 4 + size.length; pos < end; ) {
    const id = vint(b, pos, true);
    const length = id && vint(b, pos + id.length, false);
    if (!id || !length || length.unknown) return undefined;
    const data = pos + id.length + length.length;
    if (id.value === 0x4282) return ascii(b, data, Math.min(length.value, 32)).replace(/\0+$/, '');
    pos = data + length.value;
  }
  return undefined;
}

// ---------------------------------------------------------------------------
// MPEG audio
// ---------------------------------------------------------------------------

/** Channels of an MPEG audio stream by its first frame header (channel mode 3 is mono); 0 when no frame is found. */
export function mpegChannels(b: Uint8Array): number {
  const start = Math.max(0, afterId3(b));
  const limit = Math.min(b.length, start + 64 * 1024);
  for (let at = start; at + 4 <= limit; at++) {
    const length = mpegFrameLength(b, at);
    // A header followed by another (or by the end of the file): not a stray 0xFF in the tag padding.
    if (length > 0 && (at + length + 4 > b.length || mpegFrameLength(b, at + length) > 0)) return b[at + 3]! >> 6 === 3 ? 1 : 2;
  }
  return 0;
}

// ---------------------------------------------------------------------------
// Uncompressed PCM: WAV, AIFF, CAF
// ---------------------------------------------------------------------------

/** Where the samples of a PCM file are and how they are stored. */
export interface PcmLayout {
  /** Byte range of the sample frames in the file (clamped to the bytes present). */
  start: number;
  end: number;
  sampleRate: number;
  channels: number;
  /** Bytes of one sample of one channel (a 20-bit sample in 3 bytes: 3), and of one frame (all channels). */
  sampleBytes: number;
  frameBytes: number;
  /** int: signed two's complement (left-justified); uint: unsigned 8-bit (WAV); float: IEEE; alaw/ulaw: G.711. */
  encoding: 'int' | 'uint' | 'float' | 'alaw' | 'ulaw';
  littleEndian: boolean;
  /** The codec, as the error messages name it. */
  codec: string;
}

/** The PCM layout of a WAV, AIFF or CAF file; throws an Error naming the problem (a compressed codec, a missing chunk). */
export function pcmLayout(b: Uint8Array, format: string): PcmLayout {
  const layout = format === 'wav' ? wavLayout(b) : format === 'aiff' ? aiffLayout(b) : cafLayout(b);
  const { channels, sampleRate, sampleBytes, encoding } = layout;
  if (!(channels >= 1 && channels <= 64)) throw new Error(`its header declares ${channels} channels`);
  if (!(sampleRate >= 1 && sampleRate <= 10_000_000) || !Number.isFinite(sampleRate)) throw new Error(`its header declares a sample rate of ${sampleRate} Hz`);
  const valid = encoding === 'float' ? sampleBytes === 4 || sampleBytes === 8 : encoding === 'int' ? sampleBytes >= 1 && sampleBytes <= 4 : sampleBytes === 1;
  if (!valid) throw new UnsupportedCodecError(`its header declares ${sampleBytes * 8}-bit ${encoding} samples, which lserve does not read`);
  layout.frameBytes = channels * sampleBytes;
  layout.end = Math.min(layout.end, b.length);
  return layout;
}

const WAV_TAGS: Record<number, string> = { 2: 'MS ADPCM', 0x11: 'IMA ADPCM', 0x31: 'GSM 6.10', 0x50: 'MPEG', 0x55: 'MP3', 0xff: 'AAC', 0x1610: 'AAC', 0x2000: 'AC-3' };

function wavLayout(b: Uint8Array): PcmLayout {
  let pos = 12;
  let fmt: Omit<PcmLayout, 'start' | 'end'> | undefined;
  while (pos + 8 <= b.length) {
    const id = ascii(b, pos, 4);
    const size = u32le(b, pos + 4);
    const data = pos + 8;
    if (id === 'fmt ') {
      if (size < 16 || data + 16 > b.length) throw new Error('its WAV fmt chunk is too short');
      let tag = u16le(b, data);
      if (tag === 0xfffe && size >= 40 && data + 26 <= b.length) tag = u16le(b, data + 24); // WAVE_FORMAT_EXTENSIBLE: the sub-format GUID starts with the tag
      const channels = u16le(b, data + 2);
      const blockAlign = u16le(b, data + 12);
      const bits = u16le(b, data + 14);
      const sampleBytes = channels > 0 && blockAlign % channels === 0 && blockAlign > 0 ? blockAlign / channels : Math.ceil(bits / 8);
      const encoding = tag === 1 ? (sampleBytes === 1 ? 'uint' : 'int') : tag === 3 ? 'float' : tag === 6 ? 'alaw' : tag === 7 ? 'ulaw' : undefined;
      if (!encoding) {
        const name = WAV_TAGS[tag];
        throw new UnsupportedCodecError(`its WAV codec (format tag 0x${tag.toString(16).padStart(4, '0')}${name ? `, ${name}` : ''}) is not PCM (in WAV lserve reads integer PCM, float, A-law and µ-law)`);
      }
      const codec = tag === 1 ? `${bits}-bit PCM` : tag === 3 ? `${bits}-bit float` : tag === 6 ? 'A-law' : 'µ-law';
      fmt = { sampleRate: u32le(b, data + 4), channels, sampleBytes, frameBytes: 0, encoding, littleEndian: true, codec };
    } else if (id === 'data') {
      if (!fmt) throw new Error('its WAV data chunk comes before the fmt chunk');
      // 0 and 0xFFFFFFFF: written while streaming (or RF64, whose real size is in ds64): the samples run to the end of the file.
      const end = size === 0 || size === 0xffffffff ? b.length : data + size;
      return { ...fmt, start: data, end };
    }
    pos = data + size + (size & 1);
  }
  throw new Error(fmt ? 'it has no WAV data chunk' : 'it has no WAV fmt chunk');
}

/** IEEE 754 80-bit extended (AIFF's sample rate). */
function extended80(b: Uint8Array, at: number): number {
  const exponent = u16be(b, at) & 0x7fff;
  const mantissa = u32be(b, at + 2) * 2 ** 32 + u32be(b, at + 6);
  return exponent === 0 && mantissa === 0 ? 0 : mantissa * 2 ** (exponent - 16383 - 63);
}

function aiffLayout(b: Uint8Array): PcmLayout {
  const aifc = startsWith(b, 8, 'AIFC');
  let pos = 12;
  let comm: (Omit<PcmLayout, 'start' | 'end'> & { frames: number }) | undefined;
  let ssnd: { start: number; end: number } | undefined;
  while (pos + 8 <= b.length && !(comm && ssnd)) {
    const id = ascii(b, pos, 4);
    const size = u32be(b, pos + 4);
    const data = pos + 8;
    if (id === 'COMM') {
      if (size < 18 || data + 18 > b.length) throw new Error('its AIFF COMM chunk is too short');
      const bits = u16be(b, data + 6);
      const compression = aifc && size >= 22 ? ascii(b, data + 18, 4) : 'NONE';
      const kinds: Record<string, [PcmLayout['encoding'], boolean, number]> = {
        NONE: ['int', false, Math.ceil(bits / 8)],
        twos: ['int', false, Math.ceil(bits / 8)],
        sowt: ['int', true, Math.ceil(bits / 8)],
        fl32: ['float', false, 4],
        FL32: ['float', false, 4],
        fl64: ['float', false, 8],
        FL64: ['float', false, 8],
        ulaw: ['ulaw', false, 1],
        ULAW: ['ulaw', false, 1],
        alaw: ['alaw', false, 1],
        ALAW: ['alaw', false, 1],
      };
      const kind = kinds[compression];
      if (!kind) throw new UnsupportedCodecError(`its AIFF-C compression '${compression.trim()}' is not PCM (in AIFF lserve reads integer PCM, float, A-law and µ-law)`);
      const [encoding, littleEndian, sampleBytes] = kind;
      comm = {
        channels: u16be(b, data),
        frames: u32be(b, data + 2),
        sampleRate: extended80(b, data + 8),
        sampleBytes,
        frameBytes: 0,
        encoding,
        littleEndian,
        codec: encoding === 'int' ? `${bits}-bit PCM` : encoding === 'float' ? `${sampleBytes * 8}-bit float` : encoding === 'alaw' ? 'A-law' : 'µ-law',
      };
    } else if (id === 'SSND') {
      ssnd = { start: data + 8 + (data + 8 <= b.length ? u32be(b, data) : 0), end: data + size };
    }
    pos = data + size + (size & 1);
  }
  if (!comm) throw new Error('it has no AIFF COMM chunk');
  if (!ssnd) throw new Error('it has no AIFF SSND chunk');
  const { frames, ...layout } = comm;
  // A frame count of 0 with samples present: written while streaming; the SSND chunk says how many there are.
  const declared = frames > 0 ? ssnd.start + frames * layout.channels * layout.sampleBytes : ssnd.end;
  return { ...layout, start: ssnd.start, end: Math.min(ssnd.end, declared) };
}

function cafLayout(b: Uint8Array): PcmLayout {
  let pos = 8;
  let desc: Omit<PcmLayout, 'start' | 'end'> | undefined;
  while (pos + 12 <= b.length) {
    const id = ascii(b, pos, 4);
    const high = u32be(b, pos + 4);
    const low = u32be(b, pos + 8);
    const data = pos + 12;
    const unknownSize = high === 0xffffffff && low === 0xffffffff;
    const size = high * 2 ** 32 + low;
    if (id === 'desc') {
      if (size < 32 || data + 32 > b.length) throw new Error('its CAF desc chunk is too short');
      const view = new DataView(b.buffer, b.byteOffset + data, 32);
      const formatId = ascii(b, data + 8, 4);
      const flags = view.getUint32(12);
      const bytesPerPacket = view.getUint32(16);
      const channels = view.getUint32(24);
      const bits = view.getUint32(28);
      const encoding = formatId === 'lpcm' ? (flags & 1 ? 'float' : 'int') : formatId === 'alaw' ? 'alaw' : formatId === 'ulaw' ? 'ulaw' : undefined;
      if (!encoding) throw new UnsupportedCodecError(`its CAF codec '${formatId.trim()}' is not PCM (in CAF lserve reads integer PCM, float, A-law and µ-law)`);
      const sampleBytes = encoding === 'alaw' || encoding === 'ulaw' ? 1 : channels > 0 && bytesPerPacket % channels === 0 && bytesPerPacket > 0 ? bytesPerPacket / channels : Math.ceil(bits / 8);
      desc = {
        sampleRate: view.getFloat64(0),
        channels,
        sampleBytes,
        frameBytes: 0,
        encoding,
        littleEndian: (flags & 2) !== 0,
        codec: encoding === 'int' ? `${bits}-bit PCM` : encoding === 'float' ? `${bits}-bit float` : encoding === 'alaw' ? 'A-law' : 'µ-law',
      };
    } else if (id === 'data') {
      if (!desc) throw new Error('its CAF data chunk comes before the desc chunk');
      // The data chunk opens with a 4-byte edit count; size −1: still being written, the samples run to the end.
      return { ...desc, start: data + 4, end: unknownSize ? b.length : data + size };
    }
    if (unknownSize) break;
    pos = data + size;
  }
  throw new Error(desc ? 'it has no CAF data chunk' : 'it has no CAF desc chunk');
}

// ---------------------------------------------------------------------------
// Matroska / WebM
// ---------------------------------------------------------------------------

/** One audio frame of a Matroska track: its bytes, and nanoseconds of decoded audio to drop from its end. */
export interface MatroskaFrame {
  start: number;
  end: number;
  discardNs: number;
}

/** A Matroska audio track's codec set-up. */
export interface MatroskaAudioTrack {
  codecId: string;
  codecPrivate?: Uint8Array;
  /** From the track's Audio element (0 when absent). */
  channels: number;
  sampleRate: number;
  /** CodecDelay (ns): audio the decoder must drop from the start (Opus: the pre-skip). */
  codecDelayNs: number;
}

const EBML = {
  header: 0x1a45dfa3,
  segment: 0x18538067,
  cluster: 0x1f43b675,
  tracks: 0x1654ae6b,
  trackEntry: 0xae,
  trackNumber: 0xd7,
  trackType: 0x83,
  codecId: 0x86,
  codecPrivate: 0x63a2,
  codecDelay: 0x56aa,
  audio: 0xe1,
  samplingFrequency: 0xb5,
  channels: 0x9f,
  simpleBlock: 0xa3,
  blockGroup: 0xa0,
  block: 0xa1,
  discardPadding: 0x75a2,
} as const;

function uintOf(b: Uint8Array, start: number, end: number): number {
  let value = 0;
  for (let i = start; i < end; i++) value = value * 256 + b[i]!;
  return value;
}

function intOf(b: Uint8Array, start: number, end: number): number {
  if (start >= end) return 0;
  const value = uintOf(b, start, end);
  return b[start]! & 0x80 ? value - 2 ** (8 * (end - start)) : value;
}

function floatOf(b: Uint8Array, start: number, end: number): number {
  const view = new DataView(b.buffer, b.byteOffset + start, end - start);
  return end - start === 4 ? view.getFloat32(0) : end - start === 8 ? view.getFloat64(0) : 0;
}

interface MatroskaTrack extends MatroskaAudioTrack {
  number: number;
  type: number;
}

/**
 * Reads a Matroska/WebM file front to back as its bytes are needed: the
 * first audio track (`track`, once the Tracks element has been read), and
 * then that track's frames, a stretch of the file per `read` call, so that a
 * long file is demuxed in the same pieces as it is decoded.
 *
 * One flat walk over the elements: the Segment and each Cluster are entered
 * (not skipped), whether their size is known or unknown — a live recording
 * (MediaRecorder) writes both with unknown size, and an unknown-size element
 * simply ends where the next element that cannot be its child begins, which a
 * flat walk needs no rule for since the IDs are unique across levels. Tracks
 * and BlockGroups are read; every other element (SeekHead, Cues, Tags, Void,
 * Cluster timestamps, …) is skipped by its size. Blocks of other tracks are
 * ignored. Throws an Error naming the problem: no audio track, an element or
 * block that runs past the end of the file (truncated), a structure that is
 * not EBML.
 */
export class MatroskaReader {
  /** The first audio track, once the Tracks element has been read. */
  track: MatroskaAudioTrack | undefined;
  private pos = 0;
  private tracksSeen = false;
  private audioNumber = -1;
  /** Blocks met before the Tracks element (not in files as muxers write them, but allowed). */
  private early: { start: number; end: number; discardNs: number }[] = [];

  constructor(private readonly b: Uint8Array) {}

  /** Whether the whole file has been read. */
  get done(): boolean {
    return this.pos >= this.b.length;
  }

  /** Reads on to byte `upTo` (elements that end there or before) and returns the audio frames found. */
  read(upTo: number): MatroskaFrame[] {
    const b = this.b;
    const limit = Math.min(upTo, b.length);
    const atEnd = limit === b.length;
    const frames: MatroskaFrame[] = [];
    while (this.pos < limit) {
      const e = this.header(this.pos, limit, atEnd);
      if (!e) break; // its header is not all here yet
      if (e.id === EBML.segment || e.id === EBML.cluster) {
        this.pos = e.data; // enter it, known size or not
        continue;
      }
      if (e.unknown) throw new Error(`it has a Matroska element of unknown size (ID 0x${e.id.toString(16)}) that lserve cannot follow`);
      const end = e.data + e.size;
      if (end > limit) {
        if (!atEnd) break;
        const what = e.id === EBML.simpleBlock || e.id === EBML.blockGroup ? 'a Matroska block' : `a Matroska element (ID 0x${e.id.toString(16)})`;
        throw new Error(missing(e.size, b.length - e.data, what));
      }
      if (e.id === EBML.header && this.pos !== 0) throw new Error('it holds a second Matroska stream after the first (concatenated files)');
      if (e.id === EBML.tracks) this.readTracks(e.data, end, frames);
      else if (e.id === EBML.simpleBlock) this.block(e.data, end, 0, frames);
      else if (e.id === EBML.blockGroup) this.blockGroup(e.data, end, frames);
      this.pos = end;
    }
    if (this.done && !this.tracksSeen) throw new Error('it has no Matroska Tracks element');
    return frames;
  }

  /** The element header at `at`, or undefined when it runs past `limit` before the end of the file. */
  private header(at: number, limit: number, atEnd: boolean) {
    const b = this.b;
    const id = vint(b, at, true);
    const size = id && vint(b, at + id.length, false);
    if (id && size && at + id.length + size.length <= limit) return { id: id.value, data: at + id.length + size.length, size: size.value, unknown: size.unknown };
    // A vint cut off by the end of the bytes, or one that cannot start (a zero byte).
    const cut = Boolean(id && size) || b[id ? at + id.length : at] !== 0;
    if (cut && !atEnd) return undefined;
    if (cut) throw new Error('the file is truncated inside a Matroska element header');
    throw new Error(`it is not a valid Matroska file (no element at byte ${at})`);
  }

  /** A child element inside [at, end) of an element already wholly present. */
  private child(at: number, end: number, what: string) {
    const e = this.header(at, end, true);
    const stop = e!.data + e!.size;
    if (e!.unknown || stop > end) throw new Error(`it has a Matroska ${what} whose elements overrun it`);
    return { ...e!, end: stop };
  }

  private readTracks(start: number, end: number, frames: MatroskaFrame[]): void {
    this.tracksSeen = true;
    const b = this.b;
    for (let at = start; at < end; ) {
      const entry = this.child(at, end, 'Tracks element');
      at = entry.end;
      if (entry.id !== EBML.trackEntry || this.track) continue;
      const track: MatroskaTrack = { number: 0, type: 0, codecId: '', channels: 0, sampleRate: 0, codecDelayNs: 0 };
      for (let pos = entry.data; pos < entry.end; ) {
        const e = this.child(pos, entry.end, 'track entry');
        pos = e.end;
        if (e.id === EBML.trackNumber) track.number = uintOf(b, e.data, e.end);
        else if (e.id === EBML.trackType) track.type = uintOf(b, e.data, e.end);
        else if (e.id === EBML.codecId) track.codecId = ascii(b, e.data, e.size).replace(/\0+$/, '');
        else if (e.id === EBML.codecPrivate) track.codecPrivate = b.subarray(e.data, e.end);
        else if (e.id === EBML.codecDelay) track.codecDelayNs = uintOf(b, e.data, e.end);
        else if (e.id === EBML.audio) {
          for (let a = e.data; a < e.end; ) {
            const f = this.child(a, e.end, 'Audio element');
            a = f.end;
            if (f.id === EBML.samplingFrequency) track.sampleRate = floatOf(b, f.data, f.end);
            else if (f.id === EBML.channels) track.channels = uintOf(b, f.data, f.end);
          }
        }
      }
      if (track.type !== 2) continue;
      const { number, type: _type, ...audio } = track;
      this.track = audio;
      this.audioNumber = number;
    }
    if (!this.track) throw new Error('it has no audio track');
    for (const block of this.early) this.block(block.start, block.end, block.discardNs, frames);
    this.early = [];
  }

  private block(start: number, end: number, discardNs: number, frames: MatroskaFrame[]): void {
    const track = vint(this.b, start, false);
    if (!track || start + track.length + 3 > end) throw new Error(`it has a Matroska block too short to hold its header (at byte ${start})`);
    if (!this.tracksSeen) this.early.push({ start, end, discardNs });
    else if (track.value === this.audioNumber) splitLaces(this.b, { start, end, discardNs }, frames);
  }

  private blockGroup(start: number, end: number, frames: MatroskaFrame[]): void {
    let block: [number, number] | undefined;
    let discardNs = 0;
    for (let at = start; at < end; ) {
      const g = this.child(at, end, 'BlockGroup');
      at = g.end;
      if (g.id === EBML.block) block = [g.data, g.end];
      else if (g.id === EBML.discardPadding) discardNs = intOf(this.b, g.data, g.end);
    }
    if (block) this.block(block[0], block[1], discardNs, frames);
  }
}

/** The frames of one (Simple)Block: one, or several when laced (Xiph, EBML or fixed-size lacing). */
function splitLaces(b: Uint8Array, block: { start: number; end: number; discardNs: number }, out: MatroskaFrame[]): void {
  const track = vint(b, block.start, false)!;
  const flags = b[block.start + track.length + 2]!;
  let pos = block.start + track.length + 3;
  const lacing = (flags >> 1) & 3;
  if (lacing === 0) {
    out.push({ start: pos, end: block.end, discardNs: block.discardNs });
    return;
  }
  const bad = () => new Error(`it has a Matroska block with broken lacing (at byte ${block.start})`);
  const count = b[pos++]! + 1;
  const sizes: number[] = [];
  if (lacing === 1) {
    // Xiph: each size but the last as a run of 255s plus a final byte.
    for (let i = 0; i < count - 1; i++) {
      let size = 0;
      let byte: number;
      do {
        if (pos >= block.end) throw bad();
        byte = b[pos++]!;
        size += byte;
      } while (byte === 255);
      sizes.push(size);
    }
  } else if (lacing === 3) {
    // EBML: the first size as a vint, the others as signed differences.
    const first = vint(b, pos, false);
    if (!first) throw bad();
    pos += first.length;
    sizes.push(first.value);
    for (let i = 1; i < count - 1; i++) {
      const diff = vint(b, pos, false);
      if (!diff) throw bad();
      pos += diff.length;
      sizes.push(sizes[i - 1]! + diff.value - (2 ** (7 * diff.length - 1) - 1));
    }
  } else {
    // Fixed-size lacing: equal frames.
    const each = (block.end - pos) / count;
    if (!Number.isInteger(each)) throw bad();
    for (let i = 0; i < count - 1; i++) sizes.push(each);
  }
  const used = sizes.reduce((sum, size) => sum + size, 0);
  if (sizes.some((size) => size < 0) || pos + used > block.end) throw bad();
  sizes.push(block.end - pos - used);
  sizes.forEach((size, i) => {
    out.push({ start: pos, end: pos + size, discardNs: i === count - 1 ? block.discardNs : 0 });
    pos += size;
  });
}

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

// ---------------------------------------------------------------------------
// Ogg / Opus
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// MP4 / M4A
// ---------------------------------------------------------------------------

/** The boxes directly inside [start, end): type and body range. */
function* mp4Boxes(b: Uint8Array, start: number, end: number): Generator<{ type: string; body: number; end: number }> {
  for (let pos = start; pos + 8 <= end; ) {
    let size = u32be(b, pos);
    let body = pos + 8;
    if (size === 1) {
      if (pos + 16 > end) return;
      size = u32be(b, pos + 8) * 2 ** 32 + u32be(b, pos + 12);
      body = pos + 16;
    } else if (size === 0) {
      size = end - pos;
    }
    if (size < body - pos || pos + size > end) return;
    yield { type: ascii(b, pos + 4, 4), body, end: pos + size };
    pos += size;
  }
}

function mp4Child(b: Uint8Array, start: number, end: number, type: string) {
  for (const box of mp4Boxes(b, start, end)) if (box.type === type) return box;
  return undefined;
}

/**
 * The sample-entry type of the first sound track of an MP4/M4A ('mp4a' for
 * AAC, 'alac', 'Opus', 'fLaC', '.mp3', …), read from moov/trak/mdia (hdlr
 * 'soun') /minf/stbl/stsd. null when the index is readable but has no sound
 * track; undefined when there is no readable index.
 */
export function mp4AudioCodec(b: Uint8Array): string | null | undefined {
  const moov = mp4Child(b, 0, b.length, 'moov');
  if (!moov) return undefined;
  for (const trak of mp4Boxes(b, moov.body, moov.end)) {
    if (trak.type !== 'trak') continue;
    const mdia = mp4Child(b, trak.body, trak.end, 'mdia');
    const hdlr = mdia && mp4Child(b, mdia.body, mdia.end, 'hdlr');
    if (!mdia || !hdlr || ascii(b, hdlr.body + 8, 4) !== 'soun') continue;
    const minf = mp4Child(b, mdia.body, mdia.end, 'minf');
    const stbl = minf && mp4Child(b, minf.body, minf.end, 'stbl');
    const stsd = stbl && mp4Child(b, stbl.body, stbl.end, 'stsd');
    if (!stsd || stsd.body + 16 > stsd.end) return undefined;
    return ascii(b, stsd.body + 12, 4); // full-box header (4), entry count (4), first entry: size (4), type (4)
  }
  return null;
}
