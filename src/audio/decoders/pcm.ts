import type { PcmLayout } from '../containers/pcm-layout.js';
import { g711FloatTable } from '../g711.js';
import { NO_PCM, type Pcm, type PieceDecoder } from './piece.js';

/**
 * WAV, AIFF/AIFC and CAF samples → floats, as the pieces arrive: integer PCM
 * (8–32 bit, either byte order), float 32/64, A-law and µ-law, laid out as
 * ../containers/pcm-layout.ts found them. No codec library involved.
 */

/** Uncompressed samples: each piece converts the whole frames that have arrived. */
export function openPcm(bytes: Uint8Array, layout: PcmLayout): PieceDecoder {
  const { start, end, channels, sampleBytes, frameBytes, encoding, littleEndian, sampleRate } = layout;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const table = encoding === 'alaw' || encoding === 'ulaw' ? g711FloatTable(encoding) : undefined;
  let next = start;
  const convert = (upTo: number): Pcm => {
    const frames = Math.floor((Math.min(upTo, end) - next) / frameBytes);
    if (frames <= 0) return NO_PCM;
    const channelData = Array.from({ length: channels }, () => new Float32Array(frames));
    for (let c = 0; c < channels; c++) {
      const out = channelData[c]!;
      let at = next + c * sampleBytes;
      if (table) {
        for (let i = 0; i < frames; i++, at += frameBytes) out[i] = table[bytes[at]!]!;
      } else if (encoding === 'float') {
        if (sampleBytes === 4) for (let i = 0; i < frames; i++, at += frameBytes) out[i] = view.getFloat32(at, littleEndian);
        else for (let i = 0; i < frames; i++, at += frameBytes) out[i] = view.getFloat64(at, littleEndian);
      } else if (encoding === 'uint') {
        for (let i = 0; i < frames; i++, at += frameBytes) out[i] = (bytes[at]! - 128) / 128;
      } else if (sampleBytes === 2) {
        for (let i = 0; i < frames; i++, at += frameBytes) out[i] = view.getInt16(at, littleEndian) / 32768;
      } else if (sampleBytes === 4) {
        for (let i = 0; i < frames; i++, at += frameBytes) out[i] = view.getInt32(at, littleEndian) / 2147483648;
      } else if (sampleBytes === 3) {
        const [lo, hi] = littleEndian ? [0, 2] : [2, 0];
        for (let i = 0; i < frames; i++, at += frameBytes) {
          const v = bytes[at + lo]! | (bytes[at + 1]! << 8) | (bytes[at + hi]! << 16);
          out[i] = ((v << 8) >> 8) / 8388608;
        }
      } else {
        for (let i = 0; i < frames; i++, at += frameBytes) out[i] = ((bytes[at]! << 24) >> 24) / 128;
      }
    }
    next += frames * frameBytes;
    return { channelData, sampleRate };
  };
  return {
    decode: async (piece, offset) => convert(offset + piece.length),
    flush: async () => convert(end),
    free: () => {},
  };
}
