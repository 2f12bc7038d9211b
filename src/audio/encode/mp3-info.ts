import { mpegFrameLength } from '../containers/mpeg.js';
import { crc16Lame } from '../crc.js';

/**
 * The "Info" frame (Xing header + LAME extension) that opens a CBR MP3 file:
 * a silent frame holding the frame count and the encoder delay and padding,
 * so that gapless decoders (mpg123, ffmpeg, browsers) cut the encoder's
 * delay at the start and its padding at the end and the file decodes to
 * exactly the samples that went in. Without it an MP3 decodes ≈ 1100 samples
 * longer, with that much silence in front.
 */

/** LAME's encoder delay (ENCDELAY, samples); the LAME tag records it and decoders add their own 529. */
export const LAME_ENCODER_DELAY = 576;

const XING_BYTES = 4 + 4 + 4 + 4 + 100 + 4; // tag, flags, frames, bytes, TOC, quality
const LAME_BYTES = 36;

export interface Mp3Summary {
  /** Audio frames (the Info frame not counted). */
  frames: number;
  samplesPerFrame: number;
}

/** Walks the frames of an MP3 stream that starts with a frame header; undefined when it does not parse to the end. */
export function summarize(mp3: Uint8Array): Mp3Summary | undefined {
  let frames = 0;
  let at = 0;
  while (at < mp3.length) {
    const length = mpegFrameLength(mp3, at);
    if (length <= 0 || at + length > mp3.length) return undefined;
    at += length;
    frames++;
  }
  if (frames === 0) return undefined;
  const v1 = ((mp3[1]! >> 3) & 3) === 3;
  return { frames, samplesPerFrame: v1 ? 1152 : 576 };
}

/**
 * The Info frame for `mp3` (CBR LAME output, mono), or undefined when one
 * cannot be written (a frame too small to hold the tag, or a padding beyond
 * the tag's 12 bits).
 */
export function infoFrame(mp3: Uint8Array, inputSamples: number, bitrateKbps: number): Uint8Array | undefined {
  const summary = summarize(mp3);
  if (!summary) return undefined;
  // The first frame's header, without padding and without CRC protection.
  const header = Uint8Array.of(mp3[0]!, mp3[1]! | 0x01, mp3[2]! & ~0x02, mp3[3]!);
  const length = mpegFrameLength(header, 0);
  const v1 = ((header[1]! >> 3) & 3) === 3;
  const mono = header[3]! >> 6 === 3;
  const sideInfo = v1 ? (mono ? 17 : 32) : mono ? 9 : 17;
  const xing = 4 + sideInfo;
  if (length < xing + XING_BYTES + LAME_BYTES) return undefined;
  const padding = summary.frames * summary.samplesPerFrame - inputSamples - LAME_ENCODER_DELAY;
  if (padding < 0 || padding > 0xfff) return undefined;

  const frame = new Uint8Array(length);
  const view = new DataView(frame.buffer);
  frame.set(header);
  const ascii = (at: number, text: string) => {
    for (let i = 0; i < text.length; i++) frame[at + i] = text.charCodeAt(i);
  };
  ascii(xing, 'Info'); // "Info": the Xing header of a constant-bitrate file
  view.setUint32(xing + 4, 0x0f, false); // frames, bytes, TOC and quality present
  view.setUint32(xing + 8, summary.frames, false);
  view.setUint32(xing + 12, length + mp3.length, false);
  // TOC: byte position (/256) at each per cent of the duration; linear for CBR.
  for (let i = 0; i < 100; i++) frame[xing + 16 + i] = Math.floor((i * 256) / 100);
  view.setUint32(xing + 116, 0, false);

  const lame = xing + XING_BYTES;
  ascii(lame, 'LAME3.100'); // the encoder that made the frames (decoders read the delays only behind "LAME")
  frame[lame + 9] = 0x01; // tag revision 0, method 1: CBR
  frame[lame + 20] = Math.min(255, bitrateKbps);
  frame[lame + 21] = LAME_ENCODER_DELAY >> 4;
  frame[lame + 22] = ((LAME_ENCODER_DELAY & 0xf) << 4) | (padding >> 8);
  frame[lame + 23] = padding & 0xff;
  view.setUint32(lame + 28, length + mp3.length, false); // music length: every frame, this one included
  view.setUint16(lame + 32, crc16Lame(mp3), false); // music CRC
  // The tag's own CRC covers the frame up to that field (190 bytes in a stereo MPEG-1 frame, fewer here).
  view.setUint16(lame + 34, crc16Lame(frame.subarray(0, lame + 34)), false);
  return frame;
}
