import { ascii, u32be } from './bytes.js';

/**
 * ISO BMFF (MP4/M4A/MOV) box walking: whether the index (moov) precedes the
 * audio (so the file can be decoded as it streams in), and the codec of the
 * first sound track (to reject codecs other than AAC/ALAC by name before the
 * optional decoder is loaded). The audio itself is left to that decoder.
 */

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
