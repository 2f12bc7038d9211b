import { createFlacEncoder } from './flac.js';
import { createMp3Encoder } from './mp3.js';
import { createOpusEncoder } from './opus.js';
import { type AudioEncoder, type EncoderOptions, SPEECH_FORMATS, type SpeechFormat } from './types.js';
import { createPcmEncoder, createWavEncoder } from './wav.js';

/**
 * Speech output encoders: mono float samples at the model's rate in, the
 * bytes of a `response_format` out, block by block.
 *
 *   wav   audio/wav                16-bit PCM; streaming header sizes 0xFFFFFFFF
 *   mp3   audio/mpeg               LAME (wasm-media-encoders), CBR 64 kbit/s
 *   opus  audio/ogg; codecs=opus   libopus (@evan/opus, wasm) in Ogg, 32 kbit/s
 *   flac  audio/flac               lserve's own encoder, 16-bit
 *   pcm   application/octet-stream 16-bit little-endian mono at the model's
 *         rate (OpenAI's pcm is 24 kHz, which is the rate of Qwen3-TTS and
 *         Kokoro; a Piper voice's is its own) — the route states the rate in
 *         a header, from `encoder.sampleRate`.
 * No `aac`: the one maintained encoder package, @mediabunny/aac-encoder
 * (FFmpeg's AAC encoder in wasm), works only inside the Mediabunny framework
 * (12 MB more), asynchronously through a worker thread per stream; it does
 * not fit this synchronous interface at its size.
 *
 * Every encoder returns, from `write`, the bytes that are final at that
 * point, so a streamed response can send them at once; whole-file WAV, FLAC
 * and MP3 hold theirs until `end`, where the header gets the exact totals.
 * Encoding is synchronous; CPU per minute of 24 kHz speech, measured on the
 * 2-core dev machine: WAV/PCM ≈ 0.015 s, FLAC ≈ 0.19 s, MP3 ≈ 0.26 s, Opus
 * ≈ 0.41 s — a block of a few seconds costs milliseconds.
 */
export function createEncoder(format: SpeechFormat, sampleRate: number, options: EncoderOptions = {}): Promise<AudioEncoder> {
  const streaming = options.streaming ?? false;
  if (!Number.isInteger(sampleRate) || sampleRate <= 0) {
    return Promise.reject(new RangeError(`Sample rate must be a positive whole number of Hz (got ${sampleRate})`));
  }
  switch (format) {
    case 'wav':
      return Promise.resolve(createWavEncoder(sampleRate, streaming));
    case 'pcm':
      return Promise.resolve(createPcmEncoder(sampleRate));
    case 'flac':
      return Promise.resolve().then(() => createFlacEncoder(sampleRate, streaming));
    case 'opus':
      return Promise.resolve().then(() => createOpusEncoder(sampleRate, streaming));
    case 'mp3':
      return createMp3Encoder(sampleRate, streaming);
    default:
      return Promise.reject(new RangeError(`Unknown speech format '${String(format)}' (known: ${SPEECH_FORMATS.join(', ')})`));
  }
}

/** Encodes a whole signal into one file's bytes (a convenience over createEncoder for a non-streamed response). */
export async function encodeAudio(format: SpeechFormat, samples: Float32Array, sampleRate: number): Promise<Uint8Array> {
  const encoder = await createEncoder(format, sampleRate);
  const parts = [...encoder.write(samples), ...encoder.end()];
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
}

export { type AudioEncoder, type EncoderOptions, EncoderEndedError, SPEECH_FORMATS, type SpeechFormat } from './types.js';
