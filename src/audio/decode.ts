import { setImmediate as nextTurn } from 'node:timers/promises';
import { PayloadTooLargeError, UnsupportedMediaError } from '../core/errors.js';
import {
  detectFormat,
  flacTotalSamples,
  MatroskaReader,
  OggOpusReader,
  type MatroskaFrame,
  type OpusItem,
  mp4AudioCodec,
  mp4IndexFirst,
  mpegChannels,
  parseOpusHead,
  pcmLayout,
  truncationOf,
  type PcmLayout,
  UnsupportedCodecError,
} from './container.js';
import { Resampler } from './resample.js';

/**
 * Turns an uploaded audio file into mono float samples at the rate a model
 * wants: format detection by magic bytes (./container.ts), decoding, downmix
 * by averaging the channels, band-limited resampling (./resample.ts).
 *
 * Decoders — every one a permissively licensed npm package or code here
 * (MIT unless noted; the FLAC and Vorbis decoders parse their framing with
 * codec-parser, LGPL-3.0, used unmodified as its own package):
 *   WAV, AIFF/AIFC, CAF (integer PCM 8–32 bit, float 32/64, A-law, µ-law):
 *     read here (container.ts finds the samples, `openPcm` converts them);
 *   MP3: mpg123-decoder (mpg123, LGPL-2.1 C code compiled to wasm, the
 *     package MIT) — mono when the frame header says so;
 *   FLAC, native or in Ogg: @wasm-audio-decoders/flac (libFLAC, BSD);
 *   Ogg/Opus, WebM and Matroska with Opus: packets from the demuxers in
 *     container.ts straight into opus-decoder (libopus, BSD) — not
 *     ogg-opus-decoder, whose Ogg parsing fails on an OpusTags header longer
 *     than a page (cover art) and leaves the pre-skip's length of padding at
 *     the end;
 *   Ogg/Vorbis: @wasm-audio-decoders/ogg-vorbis (libvorbis, BSD);
 *   M4A/MP4 (AAC, ALAC) and raw AAC (ADTS): only through the OPTIONAL
 *     package @audio/decode-aac (FAAD2, GPL-2.0), which lserve does not depend
 *     on; loaded when the user has installed it, else a 415 that says so.
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
 * bytes, truncated files, an M4A/AAC without the optional decoder → 415
 * naming the detected format; too long → 413.
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

/** The optional AAC/ALAC decoder: GPL-2.0 (FAAD2), so never a dependency of lserve; used when the user installed it. */
const AAC_PACKAGE = '@audio/decode-aac';

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

const NO_PCM: Pcm = { channelData: [], sampleRate: 0 };

/** One codec's streaming decoder, whatever library is behind it. */
interface PieceDecoder {
  /** Decodes the next piece of the file, which starts at byte `offset` (pieces come in order and cover the file). */
  decode(piece: Uint8Array, offset: number): Promise<Pcm>;
  flush(): Promise<Pcm>;
  free(): void;
  /** Set by decoders that report per-frame errors instead of throwing. */
  errors?: string[];
}

/** What the wasm-audio-decoders family (FLAC, Opus, Vorbis, MP3) returns from each call. */
interface WasmDecoded {
  channelData: Float32Array[];
  samplesDecoded: number;
  sampleRate: number;
  errors: { message: string; frameNumber: number }[];
}

/** Their arrays cut to the samples decoded, the first `keep` channels only when given; errors appended to `errors` unless it is undefined. */
function pcmOf(decoded: WasmDecoded, errors: string[] | undefined, keep?: number): Pcm {
  if (errors) for (const e of decoded.errors) errors.push(`${e.message} (frame ${e.frameNumber})`);
  const n = decoded.samplesDecoded;
  if (!n) return NO_PCM;
  const channels = keep ? decoded.channelData.slice(0, keep) : decoded.channelData;
  return { channelData: channels.map((c) => (c.length === n ? c : c.subarray(0, n))), sampleRate: decoded.sampleRate };
}

/** Pieces of PCM one after another at one rate → one. */
function concatPcm(parts: Pcm[]): Pcm {
  const filled = parts.filter((p) => (p.channelData[0]?.length ?? 0) > 0);
  if (filled.length <= 1) return filled[0] ?? NO_PCM;
  const channels = Math.max(...filled.map((p) => p.channelData.length));
  const length = filled.reduce((sum, p) => sum + p.channelData[0]!.length, 0);
  const channelData = Array.from({ length: channels }, (_, c) => {
    const out = new Float32Array(length);
    let at = 0;
    for (const p of filled) {
      out.set(p.channelData[Math.min(c, p.channelData.length - 1)]!, at);
      at += p.channelData[0]!.length;
    }
    return out;
  });
  return { channelData, sampleRate: filled[0]!.sampleRate };
}

/** An Error whose message reaches the 415 as is, and which says the decoder is missing rather than the file bad. */
class MissingDecoderError extends Error {}

// The codec libraries load on first use of each format (not at server start) and compile their wasm per decoder.
async function openDecoder(type: string, bytes: Uint8Array): Promise<PieceDecoder> {
  switch (type) {
    case 'wav':
    case 'aiff':
    case 'caf':
      return openPcm(bytes, pcmLayout(bytes, type));
    case 'mp3':
      return openMp3(mpegChannels(bytes));
    case 'flac':
      return openFlac();
    case 'opus':
      return openOggOpus(bytes);
    case 'vorbis':
      return openOggVorbis();
    case 'webm':
    case 'mkv':
      return openMatroska(bytes);
    case 'm4a':
    case 'aac':
      return openAac();
    case 'ogg':
      throw new UnsupportedCodecError('its first Ogg stream is neither Opus, Vorbis nor FLAC');
    default:
      throw new Error(`no decoder for ${type}`);
  }
}

/** G.711 A-law and µ-law bytes → linear samples in [−1, 1]. */
let g711: { alaw: Float32Array; ulaw: Float32Array } | undefined;
function g711Tables(): { alaw: Float32Array; ulaw: Float32Array } {
  if (g711) return g711;
  const alaw = new Float32Array(256);
  const ulaw = new Float32Array(256);
  for (let i = 0; i < 256; i++) {
    const a = i ^ 0x55;
    const exponent = (a >> 4) & 7;
    const mantissa = a & 15;
    const magnitude = exponent === 0 ? (mantissa << 4) + 8 : ((mantissa << 4) + 0x108) << (exponent - 1);
    alaw[i] = ((a & 0x80 ? 1 : -1) * magnitude) / 32768;
    const u = ~i & 0xff;
    const value = ((((u & 15) << 3) + 0x84) << ((u >> 4) & 7)) - 0x84;
    ulaw[i] = ((u & 0x80 ? -1 : 1) * value) / 32768;
  }
  return (g711 = { alaw, ulaw });
}

/** Uncompressed samples: each piece converts the whole frames that have arrived. */
function openPcm(bytes: Uint8Array, layout: PcmLayout): PieceDecoder {
  const { start, end, channels, sampleBytes, frameBytes, encoding, littleEndian, sampleRate } = layout;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const table = encoding === 'alaw' ? g711Tables().alaw : encoding === 'ulaw' ? g711Tables().ulaw : undefined;
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

/**
 * MP3 through mpg123-decoder. It always produces two channels; a mono stream
 * (by its first frame header) keeps the first. Its per-frame errors are not
 * fatal (mpg123 resynchronises past junk, as players do), as before.
 */
async function openMp3(channels: number): Promise<PieceDecoder> {
  const { MPEGDecoder } = await import('mpg123-decoder');
  const decoder = new MPEGDecoder();
  await decoder.ready;
  const keep = channels === 1 ? 1 : undefined;
  return {
    decode: async (piece) => pcmOf(decoder.decode(piece), undefined, keep),
    flush: async () => NO_PCM,
    free: () => decoder.free(),
  };
}

/**
 * FLAC (native or in Ogg) through @wasm-audio-decoders/flac. (audio-decode's
 * wrapper around it, used before, dropped frames when a file arrived in
 * pieces: 864–42 336 samples of a 10-minute file, depending on piece size.)
 */
async function openFlac(): Promise<PieceDecoder> {
  const { FLACDecoder } = await import('@wasm-audio-decoders/flac');
  const decoder = new FLACDecoder();
  await decoder.ready;
  const errors: string[] = [];
  return {
    decode: async (piece) => pcmOf(await decoder.decode(piece), errors),
    flush: async () => pcmOf(await decoder.flush(), errors),
    free: () => decoder.free(),
    errors,
  };
}

async function openOggVorbis(): Promise<PieceDecoder> {
  const { OggVorbisDecoder } = await import('@wasm-audio-decoders/ogg-vorbis');
  const decoder = new OggVorbisDecoder();
  await decoder.ready;
  const errors: string[] = [];
  return {
    decode: async (piece) => pcmOf(await decoder.decode(piece), errors),
    flush: async () => pcmOf(await decoder.flush(), errors),
    free: () => decoder.free(),
    errors,
  };
}

/**
 * Opus packets from a demuxer (Ogg: OggOpusReader; WebM/Matroska:
 * MatroskaReader) through opus-decoder (libopus), each piece decoding the
 * packets that lie wholly inside the bytes seen so far. Each `{ head }` (the
 * OpusHead: channels, multistream mapping, pre-skip, which the decoder drops
 * itself) starts a decoder; a packet's `discard` or `length` trims the end.
 */
async function openOpus(source: { read(upTo: number): OpusItem[] }, first: OpusItem[] = []): Promise<PieceDecoder> {
  const { OpusDecoder } = await import('opus-decoder');
  let decoder: InstanceType<typeof OpusDecoder> | undefined;
  /** Samples the current stream has produced. */
  let produced = 0;
  const errors: string[] = [];
  const decodeUpTo = async (upTo: number): Promise<Pcm> => {
    const items = first.length ? [...first.splice(0), ...source.read(upTo)] : source.read(upTo);
    const parts: Pcm[] = [];
    let batch: Uint8Array[] = [];
    const run = (): number => {
      if (!batch.length || !decoder) return 0;
      const pcm = pcmOf(decoder.decodeFrames(batch), errors);
      batch = [];
      parts.push(pcm);
      const n = pcm.channelData[0]?.length ?? 0;
      produced += n;
      return n;
    };
    /** Cuts the last part to `keep` samples. */
    const cut = (n: number, keep: number) => {
      keep = Math.max(0, Math.min(n, keep));
      if (keep === n) return;
      const last = parts[parts.length - 1]!;
      parts[parts.length - 1] = { ...last, channelData: last.channelData.map((c) => c.subarray(0, keep)) };
      produced -= n - keep;
    };
    for (const item of items) {
      if ('head' in item) {
        run();
        decoder?.free();
        decoder = new OpusDecoder(item.head);
        await decoder.ready;
        produced = 0;
        continue;
      }
      if (!decoder) throw new Error('an Opus packet comes before the OpusHead');
      batch.push(item.packet);
      if (item.discard || item.length !== undefined) {
        const n = run();
        if (item.discard) cut(n, n - item.discard);
        if (item.length !== undefined) cut(n, item.length - (produced - n));
      }
    }
    run();
    return concatPcm(parts);
  };
  return {
    decode: (piece, offset) => decodeUpTo(offset + piece.length),
    flush: () => decodeUpTo(Infinity),
    free: () => decoder?.free(),
    errors,
  };
}

/** Ogg/Opus: OggOpusReader's packets (why not ogg-opus-decoder: see the top of this file). */
function openOggOpus(bytes: Uint8Array): Promise<PieceDecoder> {
  return openOpus(new OggOpusReader(bytes));
}

/**
 * WebM / Matroska: the reader in container.ts demuxes the file as the pieces
 * come, the Tracks element first (its OpusHead in CodecPrivate; without one,
 * the track's channel count and CodecDelay), then each piece's frames; a
 * block's DiscardPadding trims the end of the audio (the encoder's padding
 * of the last frame). Opus only.
 */
async function openMatroska(bytes: Uint8Array): Promise<PieceDecoder> {
  const reader = new MatroskaReader(bytes);
  // The Tracks element comes before the first Cluster, in the first few hundred bytes.
  const early: MatroskaFrame[] = [];
  for (let upTo = FIRST_PIECE_BYTES; !reader.track && !reader.done; upTo += FIRST_PIECE_BYTES) early.push(...reader.read(upTo));
  const track = reader.track!;
  if (track.codecId !== 'A_OPUS') {
    throw new UnsupportedCodecError(`its audio track's codec is ${track.codecId || 'not declared'} (in WebM/Matroska lserve decodes Opus)`);
  }
  const head = parseOpusHead(track.codecPrivate) ?? {
    channels: Math.min(2, Math.max(1, track.channels)),
    preSkip: Math.round((track.codecDelayNs * 48_000) / 1e9),
  };
  const toItem = (frame: MatroskaFrame): OpusItem => ({
    packet: bytes.subarray(frame.start, frame.end),
    discard: frame.discardNs > 0 ? Math.round((frame.discardNs * 48_000) / 1e9) : undefined,
  });
  return openOpus({ read: (upTo) => reader.read(upTo).map(toItem) }, [{ head }, ...early.map(toItem)]);
}

/** Whether `error` (or one it wraps: a loader's, a test's mock) says `name` is not installed. */
function isNotInstalled(error: unknown, name: string): boolean {
  for (let e = error, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if ((code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && e.message.includes(name)) return true;
  }
  return false;
}

type AacModule = typeof import('@audio/decode-aac');
let aacModule: Promise<AacModule> | undefined;

/**
 * M4A/MP4 (AAC or ALAC) and ADTS through @audio/decode-aac when the user has
 * installed it: it reads the MP4 container itself (and trims the encoder's
 * priming by the edit list), so the whole file is fed to it in pieces.
 */
async function openAac(): Promise<PieceDecoder> {
  aacModule ??= import(AAC_PACKAGE) as Promise<AacModule>;
  let module: AacModule;
  try {
    module = await aacModule;
  } catch (error) {
    aacModule = undefined; // installed later: found on the next request, no restart needed
    if (isNotInstalled(error, AAC_PACKAGE)) {
      throw new MissingDecoderError(
        `AAC (and ALAC) decoding needs the optional package ${AAC_PACKAGE}, which is not installed. ` +
          `lserve does not bundle it because it is GPL-2.0 licensed (it is FAAD2 compiled to WebAssembly) and lserve is MIT. ` +
          `To accept M4A/AAC, install it where lserve can load it: \`npm install -g ${AAC_PACKAGE}\` next to a global lserve, ` +
          `or \`npm install ${AAC_PACKAGE}\` in the project that depends on lserve; ` +
          `or convert the audio first (e.g. \`ffmpeg -i input.m4a output.flac\`).`,
      );
    }
    throw new Error(`the optional AAC decoder ${AAC_PACKAGE} could not be loaded: ${reasonOf(error)}`);
  }
  const decoder = await module.decoder();
  return {
    decode: async (piece) => decoder.decode(piece),
    flush: async () => decoder.flush(),
    free: () => decoder.free(),
  };
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
  const detected = detectFormat(bytes);
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
  // An MP4's sound track is named by its sample entry: AAC and ALAC go to the optional decoder, any other is a 415 here.
  const mp4Entry = format === 'm4a' ? mp4AudioCodec(bytes) : undefined;
  const codec = mp4Entry === 'mp4a' ? 'AAC' : mp4Entry === 'alac' ? 'ALAC' : (mp4Entry ?? known.codec);
  const label = codec ? `'${format}' (${codec})` : `'${format}'`;
  const undecodable = (reason: string, cause?: unknown) =>
    new UnsupportedMediaError(`The audio was detected as ${label} but could not be decoded: ${reason}`, { param, code: 'corrupt_audio', cause });
  const unsupported = (reason: string) =>
    new UnsupportedMediaError(`The audio was detected as ${label}, which is not supported: ${reason}`, { param, code: 'unsupported_audio_format' });

  const truncated = truncationOf(bytes, format);
  if (truncated) throw undecodable(truncated);
  if (mp4Entry === null) throw undecodable('it has no sound track');
  if (mp4Entry && codec !== 'AAC' && codec !== 'ALAC') throw unsupported(`its sound track's codec is '${mp4Entry}' (in MP4/M4A lserve decodes AAC and ALAC)`);

  let decoder: PieceDecoder;
  try {
    decoder = await openDecoder(detected, bytes);
  } catch (error) {
    if (error instanceof MissingDecoderError) {
      throw new UnsupportedMediaError(`The audio was detected as ${label}. ${error.message}`, { param, code: 'unsupported_audio_format' });
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
