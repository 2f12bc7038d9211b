import type { BitWriter } from './bits.js';
import { crc16, crc8 } from '../crc.js';

/**
 * One FLAC frame of 16-bit mono audio: the frame header, one subframe and
 * the footer. The subframe is the smallest of CONSTANT, VERBATIM and the
 * FIXED predictors of order 0–4 (the one whose residual has the least
 * absolute sum), its residual in partitioned Rice codes with the partition
 * order (0–8) and each partition's parameter chosen by estimated size. No
 * LPC: fixed predictors are within a few per cent of LPC on speech and keep
 * the encoder short and exact.
 */

const MAX_PARTITION_ORDER = 8;
/** Rice parameters above 14 need the 5-bit parameter coding (method 1). */
const MAX_RICE4 = 14;
const MAX_RICE5 = 30;

/** FLAC's sample rate codes in the frame header; other rates are written out after the header (see rateField). */
const RATE_CODES: Record<number, number> = {
  88200: 1,
  176400: 2,
  192000: 3,
  8000: 4,
  16000: 5,
  22050: 6,
  24000: 7,
  32000: 8,
  44100: 9,
  48000: 10,
  96000: 11,
};

/** Standard block sizes with their own code in the frame header. */
const BLOCK_CODES: Record<number, number> = { 192: 1, 576: 2, 1152: 3, 2304: 4, 4608: 5, 256: 8, 512: 9, 1024: 10, 2048: 11, 4096: 12, 8192: 13, 16384: 14, 32768: 15 };

/**
 * The frame header's sample rate: a code, or a code and the rate itself in 8
 * or 16 bits. Code 0 ("see STREAMINFO") only for a rate nothing else can
 * state (above 65 535 Hz and not a multiple of 10): decoders handed frames
 * without the stream header (the wasm FLAC decoder decodeAudio uses) lose
 * sync on it.
 */
function rateField(rate: number): { code: number; value: number; bits: number } {
  const code = RATE_CODES[rate];
  if (code !== undefined) return { code, value: 0, bits: 0 };
  if (rate % 1000 === 0 && rate / 1000 <= 255) return { code: 12, value: rate / 1000, bits: 8 };
  if (rate <= 65535) return { code: 13, value: rate, bits: 16 };
  if (rate % 10 === 0 && rate / 10 <= 65535) return { code: 14, value: rate / 10, bits: 16 };
  return { code: 0, value: 0, bits: 0 };
}

/** Zigzag: signed residual → unsigned (0, −1, 1, −2… → 0, 1, 2, 3…). */
function zigzag(r: number): number {
  return r >= 0 ? 2 * r : -2 * r - 1;
}

/** Residual of the fixed predictor of `order` for samples[order…], into `out` (length n − order). */
function fixedResidual(s: Int16Array, order: number, out: Int32Array): void {
  const n = s.length;
  // One loop per order: the inner loop stays branch-free.
  if (order === 0) for (let i = 0; i < n; i++) out[i] = s[i]!;
  else if (order === 1) for (let i = 1; i < n; i++) out[i - 1] = s[i]! - s[i - 1]!;
  else if (order === 2) for (let i = 2; i < n; i++) out[i - 2] = s[i]! - 2 * s[i - 1]! + s[i - 2]!;
  else if (order === 3) for (let i = 3; i < n; i++) out[i - 3] = s[i]! - 3 * s[i - 1]! + 3 * s[i - 2]! - s[i - 3]!;
  else for (let i = 4; i < n; i++) out[i - 4] = s[i]! - 4 * s[i - 1]! + 6 * s[i - 2]! - 4 * s[i - 3]! + s[i - 4]!;
}

/** The fixed predictor order (≤ maxOrder) whose residual has the least absolute sum: all five in one pass. */
function bestFixedOrder(s: Int16Array, maxOrder: number): number {
  const sums = [0, 0, 0, 0, 0];
  for (let i = 4; i < s.length; i++) {
    const e0 = s[i]!;
    const e1 = e0 - s[i - 1]!;
    const e2 = e1 - (s[i - 1]! - s[i - 2]!);
    const e3 = e2 - (s[i - 1]! - 2 * s[i - 2]! + s[i - 3]!);
    const e4 = e3 - (s[i - 1]! - 3 * s[i - 2]! + 3 * s[i - 3]! - s[i - 4]!);
    sums[0]! += Math.abs(e0);
    sums[1]! += Math.abs(e1);
    sums[2]! += Math.abs(e2);
    sums[3]! += Math.abs(e3);
    sums[4]! += Math.abs(e4);
  }
  let best = 0;
  for (let o = 1; o <= maxOrder; o++) if (sums[o]! < sums[best]!) best = o;
  return best;
}

/** Best Rice parameter for `count` values whose zigzag sum is `sum`, and its estimated cost in bits (parameter field excluded). */
function riceParameter(sum: number, count: number): { k: number; bits: number } {
  if (count === 0) return { k: 0, bits: 0 };
  // Each value costs k + 1 bits plus its quotient, ≈ value / 2^k on average.
  const mean = sum / count;
  const guess = mean > 1 ? Math.min(MAX_RICE5, Math.floor(Math.log2(mean))) : 0;
  let best = { k: 0, bits: Infinity };
  for (let k = Math.max(0, guess - 1); k <= Math.min(MAX_RICE5, guess + 1); k++) {
    const bits = count * (k + 1) + Math.floor(sum / 2 ** k);
    if (bits < best.bits) best = { k, bits };
  }
  return best;
}

interface RicePlan {
  order: number;
  params: number[];
  method: 0 | 1;
  bits: number;
}

/** Partition order and parameters for a residual of a block of `blockSize` samples with `predictorOrder` warm-up samples. */
function planRice(u: Uint32Array, blockSize: number, predictorOrder: number): RicePlan {
  let maxOrder = 0;
  while (maxOrder < MAX_PARTITION_ORDER && blockSize % (2 << maxOrder) === 0 && blockSize >> (maxOrder + 1) > predictorOrder) maxOrder++;
  // Sums per partition at the finest order, then merged pairwise for each coarser order.
  let parts = 1 << maxOrder;
  let sums = new Float64Array(parts);
  const partLength = blockSize >> maxOrder;
  for (let p = 0, i = 0; p < parts; p++) {
    const end = (p + 1) * partLength - predictorOrder;
    let sum = 0;
    for (; i < end; i++) sum += u[i]!;
    sums[p] = sum;
  }
  let best: RicePlan | undefined;
  for (let order = maxOrder; order >= 0; order--) {
    const length = blockSize >> order;
    const params: number[] = [];
    let bits = 4; // partition order field
    let wide = false;
    for (let p = 0; p < parts; p++) {
      const count = p === 0 ? length - predictorOrder : length;
      const { k, bits: cost } = riceParameter(sums[p]!, count);
      params.push(k);
      if (k > MAX_RICE4) wide = true;
      bits += cost;
    }
    bits += parts * (wide ? 5 : 4);
    if (!best || bits < best.bits) best = { order, params, method: wide ? 1 : 0, bits };
    if (order > 0) {
      parts >>= 1;
      const merged = new Float64Array(parts);
      for (let p = 0; p < parts; p++) merged[p] = sums[2 * p]! + sums[2 * p + 1]!;
      sums = merged;
    }
  }
  return best!;
}

/** The frame number (or sample number) in FLAC's extended UTF-8 coding. */
function writeUtf8Number(w: BitWriter, n: number): void {
  if (n < 0x80) return w.write(n, 8);
  let bytes = 2;
  while (bytes < 7 && n >= 2 ** (5 * bytes + 1)) bytes++;
  const lead = (0xff00 >> bytes) & 0xff;
  w.write(lead | Math.floor(n / 2 ** (6 * (bytes - 1))), 8);
  for (let i = bytes - 2; i >= 0; i--) w.write(0x80 | (Math.floor(n / 2 ** (6 * i)) & 0x3f), 8);
}

/** Scratch arrays reused across frames of one encoder. */
export interface FrameScratch {
  residual: Int32Array;
  zigzag: Uint32Array;
}

export function frameScratch(maxBlock: number): FrameScratch {
  return { residual: new Int32Array(maxBlock), zigzag: new Uint32Array(maxBlock) };
}

/**
 * How to code a frame other than the smallest way (see ./flac.ts, which
 * needs this for a file's last frame): a given subframe type, and/or a
 * header that states the block size and rate in full (two to four bytes
 * longer).
 */
export interface FrameVariant {
  subframe?: 'verbatim' | 0 | 1 | 2 | 3 | 4;
  longHeader?: boolean;
}

/**
 * Encodes one frame of `samples` (1 … 65 536 of them) as frame number
 * `index` into `w` (which must be empty and is left holding the frame).
 */
export function encodeFrame(w: BitWriter, samples: Int16Array, index: number, sampleRate: number, scratch: FrameScratch, variant: FrameVariant = {}): void {
  const n = samples.length;
  // Frame header: sync + fixed-blocksize strategy, block size and rate codes, mono, 16-bit.
  w.write(0xfff8, 16);
  const blockCode = variant.longHeader ? 7 : (BLOCK_CODES[n] ?? (n <= 256 ? 6 : 7));
  const rate = variant.longHeader && sampleRate <= 65535 ? { code: 13, value: sampleRate, bits: 16 } : rateField(sampleRate);
  w.write(blockCode, 4);
  w.write(rate.code, 4);
  w.write(0, 4); // one channel
  w.write(4, 3); // 16 bits per sample
  w.write(0, 1);
  writeUtf8Number(w, index);
  if (blockCode === 6) w.write(n - 1, 8);
  else if (blockCode === 7) w.write(n - 1, 16);
  if (rate.bits) w.write(rate.value, rate.bits);
  const header = w.bytes();
  w.write(crc8(header), 8);

  writeSubframe(w, samples, scratch, variant.subframe);

  const frame = w.bytes();
  w.write(crc16(frame), 16);
}

function writeVerbatim(w: BitWriter, s: Int16Array): void {
  w.write(0b00000010, 8); // VERBATIM
  for (let i = 0; i < s.length; i++) w.write(s[i]!, 16);
}

function writeSubframe(w: BitWriter, s: Int16Array, scratch: FrameScratch, forced?: FrameVariant['subframe']): void {
  const n = s.length;
  if (forced === 'verbatim') return writeVerbatim(w, s);
  let constant = forced === undefined;
  for (let i = 1; i < n && constant; i++) constant = s[i] === s[0];
  if (constant) {
    w.write(0, 8); // CONSTANT
    w.write(s[0]!, 16);
    return;
  }
  const order = forced !== undefined ? Math.min(forced, n - 1) : n > 4 ? bestFixedOrder(s, 4) : 0;
  const residual = scratch.residual.subarray(0, n - order);
  const u = scratch.zigzag.subarray(0, n - order);
  fixedResidual(s, order, residual);
  for (let i = 0; i < residual.length; i++) u[i] = zigzag(residual[i]!);
  const plan = planRice(u, n, order);
  // Subframe header (8 bits) + warm-up + method (2 bits) + residual, against raw samples.
  if (forced === undefined && 8 + 16 * order + 2 + plan.bits >= 8 + 16 * n) return writeVerbatim(w, s);
  w.write(0x10 | (order << 1), 8); // FIXED, order, no wasted bits
  for (let i = 0; i < order; i++) w.write(s[i]!, 16);
  w.write(plan.method, 2);
  w.write(plan.order, 4);
  const paramBits = plan.method === 1 ? 5 : 4;
  const length = n >> plan.order;
  for (let p = 0, i = 0; p < plan.params.length; p++) {
    const k = plan.params[p]!;
    w.write(k, paramBits);
    const end = (p + 1) * length - order;
    const mask = 2 ** k - 1;
    for (; i < end; i++) {
      const v = u[i]!;
      w.writeUnary(v >>> k);
      if (k > 0) w.writeWide(v & mask, k);
    }
  }
}
