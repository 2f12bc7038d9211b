import { ascii } from './bytes.js';

/**
 * Self-delimiting frame streams: MPEG audio (MP1/2/3) and AAC in ADTS, and
 * the ID3v2 tag that may precede them. Frame-header arithmetic only, used by
 * format detection, the truncation check and decode.ts (an MP3's channels).
 */

/** Byte offset after a leading ID3v2 tag (0 without one), or -1 when the tag runs past the end. */
export function afterId3(b: Uint8Array): number {
  if (ascii(b, 0, 3) !== 'ID3' || b.length < 10) return 0;
  const size = ((b[6]! & 0x7f) << 21) | ((b[7]! & 0x7f) << 14) | ((b[8]! & 0x7f) << 7) | (b[9]! & 0x7f);
  const end = 10 + size + (b[5]! & 0x10 ? 10 : 0);
  return end > b.length ? -1 : end;
}

/** Byte length of the ADTS frame at `at` (header included), or 0 when there is no valid header there. */
export function adtsFrameLength(b: Uint8Array, at: number): number {
  if (at + 7 > b.length || b[at] !== 0xff || (b[at + 1]! & 0xf6) !== 0xf0) return 0;
  const length = ((b[at + 3]! & 0x03) << 11) | (b[at + 4]! << 3) | (b[at + 5]! >> 5);
  return length >= 7 ? length : 0;
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
export function mpegFrameLength(b: Uint8Array, at: number): number {
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
