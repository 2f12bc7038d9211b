import { floatToInt16, int16LeBytes } from './pcm16.js';
import { type AudioEncoder, EncoderEndedError } from './types.js';

/**
 * WAV (RIFF/WAVE, 16-bit PCM, mono) and raw PCM (16-bit little-endian mono,
 * no header, at the model's rate).
 */

const HEADER_BYTES = 44;
/** RIFF sizes for a stream of unknown length: players read the data to the end of the file. */
const UNKNOWN_SIZE = 0xffffffff;

/** The canonical 44-byte header; `dataBytes` undefined: a streaming header with unknown sizes. */
export function wavHeader(sampleRate: number, dataBytes?: number): Uint8Array {
  const header = new Uint8Array(HEADER_BYTES);
  const view = new DataView(header.buffer);
  const ascii = (at: number, text: string) => {
    for (let i = 0; i < text.length; i++) header[at + i] = text.charCodeAt(i);
  };
  // A file past 4 GiB cannot state its size: it gets the unknown-size marker, as a stream does.
  const known = dataBytes !== undefined && dataBytes <= UNKNOWN_SIZE - (HEADER_BYTES - 8);
  ascii(0, 'RIFF');
  view.setUint32(4, known ? HEADER_BYTES - 8 + dataBytes : UNKNOWN_SIZE, true);
  ascii(8, 'WAVE');
  ascii(12, 'fmt ');
  view.setUint32(16, 16, true);
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, sampleRate, true);
  view.setUint32(28, sampleRate * 2, true); // bytes per second
  view.setUint16(32, 2, true); // block align
  view.setUint16(34, 16, true); // bits per sample
  ascii(36, 'data');
  view.setUint32(40, known ? dataBytes : UNKNOWN_SIZE, true);
  return header;
}

/** WAV; streaming: the header goes out with the first block, sizes unknown; whole file: everything at `end`, exact sizes. */
export function createWavEncoder(sampleRate: number, streaming: boolean): AudioEncoder {
  let ended = false;
  let headerSent = false;
  const held: Uint8Array[] = [];
  let dataBytes = 0;
  return {
    format: 'wav',
    contentType: 'audio/wav',
    extension: 'wav',
    sampleRate,
    write(samples) {
      if (ended) throw new EncoderEndedError('wav');
      const bytes = int16LeBytes(floatToInt16(samples));
      dataBytes += bytes.length;
      if (!streaming) {
        if (bytes.length) held.push(bytes);
        return [];
      }
      const out: Uint8Array[] = [];
      if (!headerSent) {
        headerSent = true;
        out.push(wavHeader(sampleRate));
      }
      if (bytes.length) out.push(bytes);
      return out;
    },
    end() {
      if (ended) throw new EncoderEndedError('wav');
      ended = true;
      if (streaming) return headerSent ? [] : [wavHeader(sampleRate)];
      return [wavHeader(sampleRate, dataBytes), ...held.splice(0)];
    },
  };
}

/** Raw PCM: the samples' bytes as they come, streaming or not (there is no header to wait for). */
export function createPcmEncoder(sampleRate: number): AudioEncoder {
  let ended = false;
  return {
    format: 'pcm',
    contentType: 'application/octet-stream',
    extension: 'pcm',
    sampleRate,
    write(samples) {
      if (ended) throw new EncoderEndedError('pcm');
      return samples.length ? [int16LeBytes(floatToInt16(samples))] : [];
    },
    end() {
      if (ended) throw new EncoderEndedError('pcm');
      ended = true;
      return [];
    },
  };
}
