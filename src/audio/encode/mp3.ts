import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { Resampler } from '../resample.js';
import { infoFrame } from './mp3-info.js';
import { type AudioEncoder, EncoderEndedError } from './types.js';

/**
 * MP3, mono, constant bitrate: LAME 3.100 compiled to WebAssembly by
 * wasm-media-encoders (package MIT, LAME LGPL-2.0, used unmodified as its own
 * wasm module). ≈ 0.26–0.35 s of CPU per audio minute at 24 kHz, 4–5× faster than
 * the pure-JS port (@breezystack/lamejs).
 *
 * 64 kbit/s at the MPEG-2 rates (≤ 24 kHz: every TTS model), 96 kbit/s at
 * 32–48 kHz. A rate MP3 does not have is resampled (../resample.ts) to the
 * next one up. Whole file: an Info frame (./mp3-info.ts) in front gives the
 * frame count, encoder delay and padding, so gapless decoders return exactly
 * the input. Streaming: plain frames as LAME finishes them (it holds back
 * ≈ 1–2 frames); decoders then see the encoder's delay (≈ 1100 samples of
 * silence in front) and up to a frame of padding at the end, as with any
 * streamed MP3.
 */

const MP3_RATES = [8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000] as const;
type Mp3Rate = (typeof MP3_RATES)[number];

interface LameEncoder {
  configure(params: { channels: 1 | 2; sampleRate: number; bitrate: 64 | 96; outputSampleRate: Mp3Rate }): void;
  /** The returned bytes belong to the encoder until its next call. */
  encode(samples: readonly Float32Array[]): Uint8Array;
  finalize(): Uint8Array;
}
/** A compiled WebAssembly.Module (the project's TypeScript lib settings carry no WebAssembly types). */
type WasmModule = object;
const { WebAssembly } = globalThis as unknown as { WebAssembly: { compile(bytes: Uint8Array): Promise<WasmModule> } };
type CreateEncoder = (mimeType: 'audio/mpeg', wasm: WasmModule) => Promise<LameEncoder>;

let lame: Promise<{ create: CreateEncoder; module: WasmModule }> | undefined;
function loadLame(): Promise<{ create: CreateEncoder; module: WasmModule }> {
  // The package's default entry inlines the wasm as base64; the .wasm file it ships is compiled once instead.
  lame ??= (async () => {
    const { createEncoder } = await import('wasm-media-encoders');
    const path = createRequire(import.meta.url).resolve('wasm-media-encoders/wasm/mp3');
    const module = await WebAssembly.compile(await readFile(path));
    return { create: createEncoder as unknown as CreateEncoder, module };
  })();
  lame.catch(() => (lame = undefined));
  return lame;
}

/** The MP3 rate an input rate is encoded at. */
export function mp3Rate(sampleRate: number): Mp3Rate {
  return MP3_RATES.find((r) => r >= sampleRate) ?? 48000;
}

export async function createMp3Encoder(sampleRate: number, streaming: boolean): Promise<AudioEncoder> {
  if (!Number.isInteger(sampleRate) || sampleRate <= 0) throw new RangeError(`Sample rate must be a positive whole number of Hz (got ${sampleRate})`);
  const { create, module } = await loadLame();
  const rate = mp3Rate(sampleRate);
  const bitrate = rate <= 24000 ? 64 : 96;
  const encoder = await create('audio/mpeg', module);
  encoder.configure({ channels: 1, sampleRate: rate, bitrate, outputSampleRate: rate });
  const resampler = rate === sampleRate ? undefined : new Resampler(sampleRate, rate);
  const held: Uint8Array[] = [];
  let heldBytes = 0;
  let received = 0;
  let ended = false;

  /** LAME's output, copied out of its memory; whole file: kept for `end`. */
  const out = (bytes: Uint8Array): Uint8Array[] => {
    if (bytes.length === 0) return [];
    const copy = bytes.slice();
    if (streaming) return [copy];
    held.push(copy);
    heldBytes += copy.length;
    return [];
  };

  return {
    format: 'mp3',
    contentType: 'audio/mpeg',
    extension: 'mp3',
    sampleRate: rate,
    write(samples) {
      if (ended) throw new EncoderEndedError('mp3');
      const input = resampler ? resampler.process(samples) : samples;
      received += input.length;
      return input.length ? out(encoder.encode([input])) : [];
    },
    end() {
      if (ended) throw new EncoderEndedError('mp3');
      ended = true;
      const rest: Uint8Array[] = [];
      if (resampler) {
        const tail = resampler.flush();
        received += tail.length;
        if (tail.length) rest.push(...out(encoder.encode([tail])));
      }
      rest.push(...out(encoder.finalize()));
      if (streaming) return rest;
      // One copy of the whole file's frames, to walk them for the Info frame.
      const frames = new Uint8Array(heldBytes);
      let at = 0;
      for (const part of held.splice(0)) {
        frames.set(part, at);
        at += part.length;
      }
      const info = infoFrame(frames, received, bitrate);
      return info ? [info, frames] : [frames];
    },
  };
}
