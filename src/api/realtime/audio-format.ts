import { encodeG711 } from '../../audio/encode/g711.js';
import { floatToInt16, int16LeBytes } from '../../audio/encode/pcm16.js';
import { decodeG711, type G711Law } from '../../audio/g711.js';
import { pcm16ToFloat32 } from '../../audio/pcm.js';
import { Resampler } from '../../audio/resample.js';
import { InvalidRequestError } from '../../core/errors.js';
import { decodeBase64Strict } from '../base64.js';
import type { AudioFormat } from './types.js';

/**
 * The Realtime API's audio formats ↔ the float samples lserve works on. Audio
 * arrives and leaves in base64 pieces of a continuous stream, so each
 * direction keeps one streaming Resampler: the filter's history carries over
 * from piece to piece, and a boundary between two pieces is inaudible.
 */

/** The rate lserve's VAD and speech recognisers take. */
export const INPUT_RATE = 16_000;
/** G.711 is telephony audio: always 8 kHz. */
const G711_RATE = 8000;

/** Samples per second of `format` on the wire. */
export function formatRate(format: AudioFormat): number {
  return format.type === 'audio/pcm' ? format.rate : G711_RATE;
}

function bytesPerSample(format: AudioFormat): number {
  return format.type === 'audio/pcm' ? 2 : 1;
}

function g711Law(format: AudioFormat): G711Law | undefined {
  return format.type === 'audio/pcmu' ? 'ulaw' : format.type === 'audio/pcma' ? 'alaw' : undefined;
}

/** Milliseconds that `bytes` of `format` play for. */
export function durationMs(bytes: number, format: AudioFormat): number {
  return (bytes / bytesPerSample(format) / formatRate(format)) * 1000;
}

/** base64 pieces of at most `maxBytes` bytes each, cut on whole samples (`maxBytes` is rounded down to even: a PCM16 client decodes each delta on its own). */
export function base64Chunks(bytes: Uint8Array, maxBytes: number): string[] {
  if (!Number.isInteger(maxBytes) || maxBytes < 2) throw new RangeError(`base64Chunks: maxBytes must be an integer ≥ 2 (got ${maxBytes})`);
  const size = maxBytes - (maxBytes % 2);
  const chunks: string[] = [];
  for (let at = 0; at < bytes.length; at += size) {
    const piece = bytes.subarray(at, at + size);
    chunks.push(Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength).toString('base64'));
  }
  return chunks;
}

/** A client's audio (`input_audio_buffer.append`) → 16 kHz mono floats. */
export class InputAudioDecoder {
  private readonly format: AudioFormat;
  private resampler: Resampler;

  constructor(format: AudioFormat) {
    this.format = format;
    this.resampler = new Resampler(formatRate(format), INPUT_RATE);
  }

  /**
   * Decodes one base64 piece. Returns the 16 kHz samples it completes: the
   * resampler holds back the last couple of milliseconds until later audio
   * (or `flush`) lets it finish them. Bad input throws a 400 that names the
   * `audio` field and leaves the stream as it was.
   */
  decode(base64: string): Float32Array {
    const bytes = decodeBase64Strict(base64);
    if (!bytes) throw new InvalidRequestError("'audio' is not valid base64.", { param: 'audio', code: 'invalid_base64' });
    const law = g711Law(this.format);
    // Clients send whole samples: an odd length is a broken client, and keeping its half sample would shift every later sample's bytes.
    if (!law && bytes.length % 2 !== 0) {
      throw new InvalidRequestError(`'audio' holds ${bytes.length} bytes: 16-bit PCM needs an even number (whole samples).`, { param: 'audio', code: 'invalid_audio' });
    }
    return this.resampler.process(law ? decodeG711(bytes, law) : pcm16ToFloat32(bytes));
  }

  /** Ends the stream (a commit): returns the samples held back; the next piece starts a new stream. */
  flush(): Float32Array {
    const tail = this.resampler.flush();
    this.resampler = new Resampler(this.resampler.from, this.resampler.to);
    return tail;
  }
}

/** Synthesised speech at `sourceRate` → the session's output format, for `response.output_audio.delta`. */
export class OutputAudioEncoder {
  private readonly format: AudioFormat;
  private resampler: Resampler;

  constructor(format: AudioFormat, sourceRate: number) {
    this.format = format;
    this.resampler = new Resampler(sourceRate, formatRate(format));
  }

  /** The bytes that `samples` complete (the resampler holds back a few samples until more come or `flush`). */
  encode(samples: Float32Array): Buffer {
    return this.bytes(this.resampler.process(samples));
  }

  /** Ends the response's audio: the bytes held back; the encoder can start another stream. */
  flush(): Buffer {
    const tail = this.resampler.flush();
    this.resampler = new Resampler(this.resampler.from, this.resampler.to);
    return this.bytes(tail);
  }

  private bytes(samples: Float32Array): Buffer {
    const law = g711Law(this.format);
    const out = law ? encodeG711(samples, law) : int16LeBytes(floatToInt16(samples));
    return Buffer.from(out.buffer, out.byteOffset, out.byteLength);
  }
}
