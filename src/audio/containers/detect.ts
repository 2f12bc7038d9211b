import { ascii, startsWith, u32be, vint } from './bytes.js';
import { adtsFrameLength, afterId3, mpegFrameLength } from './mpeg.js';
import { isOgg } from './ogg.js';

/**
 * Format detection by magic bytes: the one place that decides what a file
 * is, before anything else looks at it. Also names a few formats lserve does
 * not decode, so that the error can say what the file is.
 */

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
