import { setImmediate as nextTurn } from 'node:timers/promises';
import { PayloadTooLargeError, UnsupportedMediaError } from '../core/errors.js';
import { flacTotalSamples, mp4IndexFirst, truncationOf } from './container.js';
import { Resampler } from './resample.js';

/**
 * Turns an uploaded audio file into mono float samples at the rate a model
 * wants: format detection (audio-type), decoding (audio-decode's wasm/JS
 * codecs; FLAC through @wasm-audio-decoders/flac directly), downmix by
 * averaging the channels, band-limited resampling (./resample.ts).
 *
 * The event loop is never held for long: the file goes to the decoder in
 * pieces of ≈ 2 s of audio (sized from the bitrate seen so far), each piece
 * is downmixed and resampled as it comes, and the loop gets a turn between
 * pieces (longest stall measured on 10-minute files: 25–55 ms). Decoding
 * stops as soon as the audio passes `maxDurationSec`. Exception: an MP4/M4A
 * whose index (moov) comes after the audio cannot be decoded before it has
 * been read whole; its decoder then decodes everything in one call (≈ 0.1–0.3
 * s per audio minute, all in one stall) — a worker thread is the cure.
 *
 * Copies: the decoders copy bytes into and samples out of their wasm memory
 * (theirs, unavoidable); a multichannel piece is averaged into a new mono
 * array (a mono piece is used as is); the resampler writes new arrays
 * (when no resampling is needed the decoder's arrays pass through); the
 * pieces are joined once at the end (skipped when there is one).
 *
 * Every way the input can be bad is a typed error: unknown or undecodable
 * bytes, truncated files → 415 naming the detected format; too long → 413.
 */

export interface DecodeAudioOptions {
  /** Output sample rate (Hz). */
  sampleRate: number;
  /** Longer audio is rejected with a 413 (decoding stops as soon as it passes the limit). */
  maxDurationSec?: number;
  /** Request field named in errors. Default 'file'. */
  param?: string;
  /** Checked between pieces: aborts a long decode. */
  signal?: AbortSignal;
}

export interface DecodedAudio {
  /** Mono, at `sampleRate`. */
  samples: Float32Array;
  sampleRate: number;
  /** Seconds. */
  duration: number;
  /** Detected container/codec: 'wav', 'mp3', 'flac', 'ogg', 'webm', 'm4a', 'aac', 'aiff', 'caf', 'mkv'. */
  format: string;
  /** Rate the decoder produced (Opus always decodes at 48 kHz, whatever rate was encoded). */
  sourceSampleRate: number;
  /**
   * Channels the decoder produced. MP3 and AAC decoders turn a mono stream
   * into two identical channels; audio-decode folds those back, so a stereo
   * MP3/AAC whose channels are identical also reports 1.
   */
  channels: number;
}

/** audio-type's name → the name reported and accepted. */
const FORMATS: Record<string, { name: string; codec?: string }> = {
  wav: { name: 'wav' },
  mp3: { name: 'mp3' },
  flac: { name: 'flac' },
  opus: { name: 'ogg', codec: 'Opus' },
  oga: { name: 'ogg', codec: 'Vorbis' },
  webm: { name: 'webm' },
  mkv: { name: 'mkv' },
  m4a: { name: 'm4a' },
  aac: { name: 'aac' },
  aiff: { name: 'aiff' },
  caf: { name: 'caf' },
};
export const AUDIO_FORMATS = ['wav', 'mp3', 'flac', 'ogg', 'webm', 'm4a', 'aac', 'aiff', 'caf', 'mkv'] as const;

/**
 * Bytes handed to the decoder per call: the first piece is FIRST_PIECE_BYTES,
 * later ones are sized from the bitrate seen so far to hold ≈ PIECE_SECONDS
 * of audio (64 kbit/s Opus: 16 KB; CD-quality WAV: 256 KB, the cap), so that
 * decoding, downmixing and resampling one piece takes ≈ 10–20 ms.
 */
const FIRST_PIECE_BYTES = 16 * 1024;
const MIN_PIECE_BYTES = 4 * 1024;
const MAX_PIECE_BYTES = 256 * 1024;
const PIECE_SECONDS = 2;
/** Output samples copied between two turns of the event loop when joining the pieces (≈ 16 MB). */
const JOIN_SAMPLES = 4 * 1024 * 1024;

interface Pcm {
  channelData: Float32Array[];
  sampleRate: number;
}

/** One codec's streaming decoder, whatever library is behind it. */
interface PieceDecoder {
  decode(piece: Uint8Array): Promise<Pcm>;
  flush(): Promise<Pcm>;
  free(): void;
  /** Set by decoders that report per-frame errors instead of throwing. */
  errors?: string[];
}

type StreamDecoder = ((chunk?: Uint8Array) => Promise<Pcm>) & { free(): void };
type AudioDecodeModule = Record<string, unknown> & { default: Record<string, unknown> };

// The codec libraries compile their wasm on first use of each format; the modules themselves load on first decode, not at server start.
let audioDecodeModule: Promise<AudioDecodeModule> | undefined;
let audioTypeModule: Promise<typeof import('audio-type')> | undefined;

async function openDecoder(type: string): Promise<PieceDecoder> {
  if (type === 'flac') return openFlac();
  audioDecodeModule ??= import('audio-decode') as unknown as Promise<AudioDecodeModule>;
  const factory = (await audioDecodeModule).default[type];
  if (typeof factory !== 'function') throw new Error(`no decoder for ${type}`);
  const decoder = (await (factory as () => Promise<StreamDecoder>)()) as StreamDecoder;
  return {
    decode: (piece) => decoder(piece),
    flush: () => decoder(),
    free: () => decoder.free(),
  };
}

/**
 * FLAC through @wasm-audio-decoders/flac itself: audio-decode's wrapper
 * (@audio/decode-flac 1.3.5) drops frames when a file arrives in pieces
 * (measured: 864–42 336 samples of a 10-minute file, depending on piece size).
 */
async function openFlac(): Promise<PieceDecoder> {
  const { FLACDecoder } = await import('@wasm-audio-decoders/flac');
  const decoder = new FLACDecoder();
  await decoder.ready;
  const errors: string[] = [];
  const take = (decoded: Awaited<ReturnType<typeof decoder.decode>>): Pcm => {
    for (const e of decoded.errors) errors.push(`${e.message} (frame ${e.frameNumber})`);
    const n = decoded.samplesDecoded;
    return { channelData: decoded.channelData.map((c) => (c.length === n ? c : c.subarray(0, n))), sampleRate: decoded.sampleRate };
  };
  return {
    decode: async (piece) => take(await decoder.decode(piece)),
    flush: async () => take(await decoder.flush()),
    free: () => decoder.free(),
    errors,
  };
}

async function detect(bytes: Uint8Array): Promise<string | undefined> {
  audioTypeModule ??= import('audio-type');
  const audioType = (await audioTypeModule).default;
  // audio-type reads `bytes.buffer` from its start: give it a copy of the head when the view does not
  // start there (a small Buffer from Node's pool does not). Not Buffer#slice: that one shares memory.
  const whole = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength;
  return audioType(whole ? bytes : new Uint8Array(bytes.subarray(0, 1 << 20)));
}

function describeHead(bytes: Uint8Array): string {
  const head = bytes.subarray(0, 8);
  const hex = Array.from(head, (b) => b.toString(16).padStart(2, '0')).join(' ');
  const text = Array.from(head, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
  return `${hex} "${text}"`;
}

function reasonOf(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const line = message.split('\n')[0]!.trim();
  return line.length > 200 ? `${line.slice(0, 200)}…` : line || 'unknown decoder error';
}

/** Mono by averaging the channels; a mono input is returned as is (no copy). */
function downmix(channels: Float32Array[]): Float32Array {
  if (channels.length === 1) return channels[0]!;
  const length = Math.min(...channels.map((c) => c.length));
  const out = new Float32Array(length);
  if (channels.length === 2) {
    const [left, right] = channels as [Float32Array, Float32Array];
    for (let i = 0; i < length; i++) out[i] = (left[i]! + right[i]!) * 0.5;
    return out;
  }
  for (const channel of channels) for (let i = 0; i < length; i++) out[i] += channel[i]!;
  const scale = 1 / channels.length;
  for (let i = 0; i < length; i++) out[i] *= scale;
  return out;
}

export async function decodeAudio(bytes: Uint8Array, options: DecodeAudioOptions): Promise<DecodedAudio> {
  const targetRate = options.sampleRate;
  if (!Number.isInteger(targetRate) || targetRate <= 0) throw new RangeError(`sampleRate must be a positive integer (got ${targetRate})`);
  const param = options.param ?? 'file';
  const maxDuration = options.maxDurationSec;
  const supported = `supported: ${AUDIO_FORMATS.join(', ')}`;
  options.signal?.throwIfAborted();

  if (bytes.length === 0) {
    throw new UnsupportedMediaError(`The audio is empty (0 bytes): not a recognised audio format (${supported}).`, { param, code: 'unsupported_audio_format' });
  }
  const detected = await detect(bytes);
  if (!detected) {
    throw new UnsupportedMediaError(`The audio is not a recognised audio format (first bytes ${describeHead(bytes)}); ${supported}.`, {
      param,
      code: 'unsupported_audio_format',
    });
  }
  const known = FORMATS[detected];
  if (!known) {
    throw new UnsupportedMediaError(`The audio was detected as '${detected}', which is not supported (${supported}).`, { param, code: 'unsupported_audio_format' });
  }
  const format = known.name;
  const label = known.codec ? `'${format}' (${known.codec})` : `'${format}'`;
  const undecodable = (reason: string, cause?: unknown) =>
    new UnsupportedMediaError(`The audio was detected as ${label} but could not be decoded: ${reason}`, { param, code: 'corrupt_audio', cause });

  const truncated = truncationOf(bytes, format);
  if (truncated) throw undecodable(truncated);

  let decoder: PieceDecoder;
  try {
    decoder = await openDecoder(detected);
  } catch (error) {
    throw undecodable(reasonOf(error), error);
  }

  const pieces: Float32Array[] = [];
  let outLength = 0;
  let resampler: Resampler | undefined;
  let sourceRate = 0;
  let channels = 0;
  let sourceSeconds = 0;
  let sourceFrames = 0;
  const emit = (samples: Float32Array) => {
    if (samples.length === 0) return;
    pieces.push(samples);
    outLength += samples.length;
  };
  const take = async (pcm: Pcm) => {
    const length = pcm.channelData[0]?.length ?? 0;
    if (length === 0) return;
    if (!resampler || pcm.sampleRate !== resampler.from) {
      // A chained stream can change rate midway: finish the old rate, start the new one.
      if (resampler) emit(resampler.flush());
      resampler = new Resampler(pcm.sampleRate, targetRate);
      sourceRate ||= pcm.sampleRate;
    }
    channels = Math.max(channels, pcm.channelData.length);
    sourceFrames += length;
    sourceSeconds += length / pcm.sampleRate;
    if (maxDuration !== undefined && sourceSeconds > maxDuration) {
      throw new PayloadTooLargeError(`The audio is longer than the limit of ${formatSeconds(maxDuration)}.`, {
        param,
        code: 'audio_too_long',
      });
    }
    // A decoder that returns a lot at once (an M4A decoded whole) is downmixed and resampled a slice per turn.
    const slice = PIECE_SECONDS * pcm.sampleRate;
    for (let start = 0; start < length; start += slice) {
      if (start > 0) await nextTurn();
      const end = Math.min(length, start + slice);
      emit(resampler.process(downmix(length <= slice ? pcm.channelData : pcm.channelData.map((c) => c.subarray(start, end)))));
    }
  };

  try {
    const whole = detected === 'm4a' && !mp4IndexFirst(bytes);
    let step = whole ? bytes.length : FIRST_PIECE_BYTES;
    for (let offset = 0; offset < bytes.length; offset += step) {
      if (offset > 0) {
        await nextTurn();
        options.signal?.throwIfAborted();
        if (sourceSeconds > 0) {
          step = Math.round(Math.min(MAX_PIECE_BYTES, Math.max(MIN_PIECE_BYTES, (offset / sourceSeconds) * PIECE_SECONDS)));
        }
      }
      await take(await decoder.decode(bytes.subarray(offset, offset + step)));
    }
    await take(await decoder.flush());
  } catch (error) {
    if (error instanceof PayloadTooLargeError || options.signal?.aborted) throw error;
    throw undecodable(reasonOf(error), error);
  } finally {
    decoder.free();
  }
  if (resampler) emit(resampler.flush());

  if (decoder.errors?.length) throw undecodable(`${decoder.errors.length} corrupt frame(s), first: ${decoder.errors[0]}`);
  if (detected === 'flac') {
    const declared = flacTotalSamples(bytes);
    if (declared > 0 && sourceFrames < declared) {
      throw undecodable(`the file is truncated or corrupt: it declares ${declared} samples per channel but only ${sourceFrames} could be decoded`);
    }
  }
  if (sourceFrames === 0) throw undecodable('it contains no audio samples');

  let samples: Float32Array;
  if (pieces.length === 1) {
    samples = pieces[0]!;
  } else {
    // The one copy of the output: pieces → one array, a few MB per turn of the event loop.
    samples = new Float32Array(outLength);
    let at = 0;
    let sinceTurn = 0;
    for (const piece of pieces) {
      samples.set(piece, at);
      at += piece.length;
      sinceTurn += piece.length;
      if (sinceTurn >= JOIN_SAMPLES) {
        sinceTurn = 0;
        await nextTurn();
      }
    }
  }
  return { samples, sampleRate: targetRate, duration: samples.length / targetRate, format, sourceSampleRate: sourceRate, channels };
}

/** 30 → '30 s', 3600 → '3600 s (60 min)'. */
function formatSeconds(seconds: number): string {
  return seconds >= 120 ? `${seconds} s (${+(seconds / 60).toFixed(1)} min)` : `${seconds} s`;
}
