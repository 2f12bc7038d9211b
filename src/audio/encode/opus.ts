import { createRequire } from 'node:module';
import { Resampler } from '../resample.js';
import { OggWriter } from './ogg.js';
import { floatToInt16, int16LeBytes } from './pcm16.js';
import { type AudioEncoder, EncoderEndedError } from './types.js';

/**
 * Ogg/Opus (RFC 7845), mono: libopus from @evan/opus (its WebAssembly build,
 * MIT; libopus BSD-3-Clause) makes the packets, lserve writes the Ogg pages
 * (./ogg.ts).
 *
 * Why @evan/opus and not opusscript: opusscript keeps views of its wasm
 * memory made at construction, so once a second encoder grows that memory the
 * first one fails ("detached ArrayBuffer") — fatal with concurrent requests.
 * @evan/opus re-creates its views on growth. Its default entry loads a native
 * addon; lserve imports the wasm entry only (as fast as opusscript here:
 * ≈ 0.4 s of CPU per audio minute at 24 kHz).
 *
 * Opus encodes at 8, 12, 16, 24 or 48 kHz: another input rate is resampled
 * (../resample.ts) to the next of those up (22 050 → 24 000). 20 ms frames,
 * 32 kbit/s (speech: near-transparent for a mono voice), application
 * "audio". Pre-skip: the encoder's lookahead. The last packet is padded with
 * silence and the end-of-stream page's granule position tells the decoder
 * the exact length, so the stream decodes to exactly the input's duration.
 * Streaming: the two header pages leave with the first block, then a page
 * with each block's finished packets; whole file: pages of ≈ 1 s.
 */

const OPUS_RATES = [8000, 12000, 16000, 24000, 48000];
const FRAME_MS = 20;
const BITRATE = 32_000;
/** Packets per page in a whole file (≈ 1 s: what common encoders do). */
const PACKETS_PER_PAGE = 50;

// libopus control requests (opus_defines.h).
const OPUS_SET_BITRATE = 4002;
const OPUS_GET_LOOKAHEAD = 4027;

/** The part of @evan/opus's wasm Encoder used here (the package types only its default entry). */
interface WasmOpusEncoder {
  ctl(request: number, value?: number): number;
  /** One frame of 16-bit little-endian PCM (its bytes) → one packet (a copy). */
  encode(pcm: ArrayBufferView): Uint8Array;
  drop(): void;
}
type WasmOpusModule = { Encoder: new (options: { channels: 1 | 2; sample_rate: number; application: 'audio' | 'voip' }) => WasmOpusEncoder };

let opusModule: WasmOpusModule | undefined;
function loadOpus(): WasmOpusModule {
  // The wasm entry (CommonJS) compiles its ≈ 400 KB module on first require, once per process (≈ 10 ms).
  opusModule ??= createRequire(import.meta.url)('@evan/opus/wasm/index.js') as WasmOpusModule;
  return opusModule;
}

/** The Opus rate an input rate is encoded at. */
export function opusRate(sampleRate: number): number {
  return OPUS_RATES.find((r) => r >= sampleRate) ?? 48000;
}

function opusHead(preSkip: number, inputRate: number): Uint8Array {
  const head = new Uint8Array(19);
  const view = new DataView(head.buffer);
  head.set(new TextEncoder().encode('OpusHead'));
  head[8] = 1; // version
  head[9] = 1; // channels
  view.setUint16(10, preSkip, true);
  view.setUint32(12, inputRate, true); // informational: the rate before encoding
  view.setInt16(16, 0, true); // output gain
  head[18] = 0; // channel mapping family 0 (mono/stereo)
  return head;
}

function opusTags(): Uint8Array {
  const vendor = new TextEncoder().encode('libopus (lserve)');
  const tags = new Uint8Array(8 + 4 + vendor.length + 4);
  const view = new DataView(tags.buffer);
  tags.set(new TextEncoder().encode('OpusTags'));
  view.setUint32(8, vendor.length, true);
  tags.set(vendor, 12);
  view.setUint32(12 + vendor.length, 0, true); // no user comments
  return tags;
}

export function createOpusEncoder(sampleRate: number, streaming: boolean): AudioEncoder {
  if (!Number.isInteger(sampleRate) || sampleRate <= 0) throw new RangeError(`Sample rate must be a positive whole number of Hz (got ${sampleRate})`);
  const { Encoder } = loadOpus();
  const rate = opusRate(sampleRate);
  const resampler = rate === sampleRate ? undefined : new Resampler(sampleRate, rate);
  const encoder = new Encoder({ channels: 1, sample_rate: rate, application: 'audio' });
  encoder.ctl(OPUS_SET_BITRATE, BITRATE);
  const toGranule = 48000 / rate; // granule positions count 48 kHz samples
  const lookahead = encoder.ctl(OPUS_GET_LOOKAHEAD); // at `rate`
  const preSkip = lookahead * toGranule;
  const frame = (rate * FRAME_MS) / 1000;
  const pending = new Int16Array(frame);
  let filled = 0;
  /** Samples at `rate` taken in, and packets made. */
  let received = 0;
  let packets = 0;
  let ended = false;
  const ogg = new OggWriter();

  /** Pages finished and not yet returned: the two header pages first. */
  const ready: Uint8Array[] = [ogg.headerPage(opusHead(preSkip, sampleRate)), ogg.headerPage(opusTags())];
  const encodeFrame = (pcm: Int16Array) => {
    const packet = encoder.encode(int16LeBytes(pcm)); // wasm memory is little-endian
    packets++;
    ogg.add(packet, packets * frame * toGranule);
    // Whole file: pages of ≈ 1 s. Streaming pages end with each block (see pages()); 255 lacing values is the most a page holds.
    // At the end the last packets stay for the end-of-stream page, whose granule position trims the padding.
    if (!ended && ((!streaming && ogg.pendingPackets >= PACKETS_PER_PAGE) || ogg.pendingSegments >= 255)) ready.push(...ogg.flush());
  };
  const take = (samples: Float32Array) => {
    const pcm = floatToInt16(samples);
    received += pcm.length;
    let at = 0;
    while (at < pcm.length) {
      const n = Math.min(frame - filled, pcm.length - at);
      if (filled === 0 && n === frame) {
        encodeFrame(pcm.subarray(at, at + frame));
      } else {
        pending.set(pcm.subarray(at, at + n), filled);
        filled += n;
        if (filled === frame) {
          encodeFrame(pending);
          filled = 0;
        }
      }
      at += n;
    }
  };
  const pages = (): Uint8Array[] => {
    const out = ready.splice(0);
    if (streaming) out.push(...ogg.flush());
    return out;
  };

  return {
    format: 'opus',
    contentType: 'audio/ogg; codecs=opus',
    extension: 'opus',
    sampleRate: rate,
    write(samples) {
      if (ended) throw new EncoderEndedError('opus');
      take(resampler ? resampler.process(samples) : samples);
      return pages();
    },
    end() {
      if (ended) throw new EncoderEndedError('opus');
      ended = true;
      try {
        if (resampler) take(resampler.flush());
        const length = received;
        // Silence after the end until the encoder's lookahead has been pushed through and the last frame is full.
        const needed = Math.ceil((length + lookahead) / frame) * frame - length;
        take(new Float32Array(needed));
        return [...ready.splice(0), ...ogg.flush(true, preSkip + length * toGranule)];
      } finally {
        encoder.drop();
      }
    },
  };
}
