import { setImmediate as nextTurn } from 'node:timers/promises';
import { InvalidMediaError, PayloadTooLargeError } from '../core/errors.js';
import { detectFormat } from './containers/detect.js';
import { UnsupportedCodecError } from './containers/errors.js';
import { mp4AudioCodec, mp4IndexFirst } from './containers/mp4.js';
import { flacTotalSamples, truncationOf } from './containers/truncation.js';
import { openDecoder } from './decoders/index.js';
import { FIRST_PIECE_BYTES, MissingDecoderError, type Pcm, type PieceDecoder, reasonOf } from './decoders/piece.js';
import { Resampler } from './resample.js';

/**
 * Turns an uploaded audio file into mono float samples at the rate a model
 * wants: format detection by magic bytes and header checks (./containers/),
 * decoding (./decoders/, one adapter per codec library), downmix by
 * averaging the channels, band-limited resampling (./resample.ts).
 *
 * Decoders — every one a permissively licensed npm package or lserve's own
 * code (MIT unless noted; Ogg FLAC and Vorbis are framed by codec-parser,
 * LGPL-3.0, used unmodified as its own package; native FLAC frames are found
 * by containers/flac.ts, since codec-parser merges the last two):
 *   WAV, AIFF/AIFC, CAF (integer PCM 8–32 bit, float 32/64, A-law, µ-law):
 *     read by lserve itself (containers/pcm-layout.ts finds the samples,
 *     decoders/pcm.ts converts them);
 *   MP3: mpg123-decoder (mpg123, LGPL-2.1 C code compiled to wasm, the
 *     package MIT) — mono when the frame header says so;
 *   FLAC, native or in Ogg: @wasm-audio-decoders/flac (libFLAC, BSD);
 *   Ogg/Opus, WebM and Matroska with Opus: packets from the demuxers in
 *     containers/ straight into opus-decoder (libopus, BSD) — not
 *     ogg-opus-decoder, whose Ogg parsing fails on an OpusTags header longer
 *     than a page (cover art) and leaves the pre-skip's length of padding at
 *     the end;
 *   Ogg/Vorbis: @wasm-audio-decoders/ogg-vorbis (libvorbis, BSD);
 *   M4A/MP4 (AAC, ALAC) and raw AAC (ADTS): only through the OPTIONAL
 *     package @audio/decode-aac (FAAD2, GPL-2.0), which lserve does not depend
 *     on; loaded when the user has installed it, else a 400 invalid_audio that
 *     says so.
 *
 * The event loop is never held for long: the file goes to the decoder in
 * pieces of ≈ 2 s of audio (sized from the bitrate seen so far), each piece
 * is downmixed and resampled as it comes, and the loop gets a turn between
 * pieces. Decoding stops as soon as the audio passes `maxDurationSec`.
 * Exception: an MP4/M4A whose index (moov) comes after the audio cannot be
 * decoded before it has been read whole; its decoder then decodes everything
 * in one call (≈ 0.1–0.3 s per audio minute, all in one stall) — a worker
 * thread is the cure.
 *
 * Copies: the decoders copy bytes into and samples out of their wasm memory
 * (theirs, unavoidable); PCM is converted into new arrays; a multichannel
 * piece is averaged into a new mono array (a mono piece is used as is); the
 * resampler writes new arrays (when no resampling is needed the decoder's
 * arrays pass through); the pieces are joined once at the end (skipped when
 * there is one).
 *
 * Every way the input can be bad is a typed error: unknown or undecodable
 * bytes, truncated files, an M4A/AAC without the optional decoder → 400
 * invalid_audio naming the detected format (never quoting the bytes); too
 * long → 413.
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
   * Channels the decoder produced. The MP3 decoder always produces two; a
   * stream whose frame header says mono reports 1 (only the first is kept).
   */
  channels: number;
}

/** detectFormat's name → the name reported and accepted. */
const FORMATS: Record<string, { name: string; codec?: string }> = {
  wav: { name: 'wav' },
  mp3: { name: 'mp3' },
  flac: { name: 'flac' },
  opus: { name: 'ogg', codec: 'Opus' },
  vorbis: { name: 'ogg', codec: 'Vorbis' },
  ogg: { name: 'ogg', codec: 'unknown codec' },
  webm: { name: 'webm' },
  mkv: { name: 'mkv' },
  m4a: { name: 'm4a' },
  aac: { name: 'aac' },
  aiff: { name: 'aiff' },
  caf: { name: 'caf' },
};
export const AUDIO_FORMATS = ['wav', 'mp3', 'flac', 'ogg', 'webm', 'm4a', 'aac', 'aiff', 'caf', 'mkv'] as const;

/**
 * Bytes handed to the decoder per call: the first piece is FIRST_PIECE_BYTES
 * (./decoders/piece.ts, where the Matroska adapter uses it too),
 * later ones are sized from the bitrate seen so far to hold ≈ PIECE_SECONDS
 * of audio (64 kbit/s Opus: 16 KB; CD-quality WAV: 256 KB, the cap), so that
 * decoding, downmixing and resampling one piece takes ≈ 10–20 ms.
 */
const MIN_PIECE_BYTES = 4 * 1024;
const MAX_PIECE_BYTES = 256 * 1024;
const PIECE_SECONDS = 2;
/** Output samples copied between two turns of the event loop when joining the pieces (≈ 16 MB). */
const JOIN_SAMPLES = 4 * 1024 * 1024;

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
    throw new InvalidMediaError('audio', `The audio is empty (0 bytes): not a recognised audio format (${supported}).`, { param });
  }
  const detected = detectFormat(bytes);
  if (!detected) {
    throw new InvalidMediaError('audio', `The audio is not a recognised audio format (${supported}).`, { param });
  }
  const known = FORMATS[detected];
  if (!known) {
    throw new InvalidMediaError('audio', `The audio was detected as '${detected}', which is not supported (${supported}).`, { param });
  }
  const format = known.name;
  // An MP4's sound track is named by its sample entry: AAC and ALAC go to the optional decoder, any other is refused here (400 invalid_audio).
  const mp4Entry = format === 'm4a' ? mp4AudioCodec(bytes) : undefined;
  const codec = mp4Entry === 'mp4a' ? 'AAC' : mp4Entry === 'alac' ? 'ALAC' : (mp4Entry ?? known.codec);
  const label = codec ? `'${format}' (${codec})` : `'${format}'`;
  const undecodable = (reason: string, cause?: unknown) =>
    new InvalidMediaError('audio', `The audio was detected as ${label} but could not be decoded: ${reason}`, { param, cause });
  const unsupported = (reason: string) =>
    new InvalidMediaError('audio', `The audio was detected as ${label}, which is not supported: ${reason}`, { param });

  const truncated = truncationOf(bytes, format);
  if (truncated) throw undecodable(truncated);
  if (mp4Entry === null) throw undecodable('it has no sound track');
  if (mp4Entry && codec !== 'AAC' && codec !== 'ALAC') throw unsupported(`its sound track's codec is '${mp4Entry}' (in MP4/M4A lserve decodes AAC and ALAC)`);

  let decoder: PieceDecoder;
  try {
    decoder = await openDecoder(detected, bytes);
  } catch (error) {
    if (error instanceof MissingDecoderError) {
      throw new InvalidMediaError('audio', `The audio was detected as ${label}. ${error.message}`, { param });
    }
    if (error instanceof UnsupportedCodecError) throw unsupported(error.message);
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
      await take(await decoder.decode(bytes.subarray(offset, offset + step), offset));
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
