/**
 * Pitch-preserving time stretching by WSOLA (waveform-similarity
 * overlap-add): the output is built from Hann-windowed frames of the input,
 * laid 50 % overlapped at a fixed output hop Hs and taken from the input at
 * hop Ha = speed·Hs; each frame's input position may move up to ±Δ from its
 * nominal place, to where the input looks most like the natural continuation
 * of the frame before (normalised cross-correlation over the overlap). Whole
 * pitch periods are thus dropped (speed > 1) or repeated (speed < 1), and the
 * overlaps join in phase: same pitch, no clicks. Meant for speech (a TTS
 * model without rate control): frames of 30 ms, search ±12.5 ms (a period of
 * the lowest voices).
 *
 * Timing: output frame k (centred at (k+1)·Hs) comes from input centred at
 * (k+1)·Ha, so the input at time t sounds at t / speed, and the output is
 * exactly round(input length / speed) samples. speed 1 returns the input
 * untouched.
 *
 * Streaming: push blocks of any size; a frame is made once the input it may
 * read (its search range and window) has arrived, and the output up to the
 * next frame's start leaves at once (it lags the input by Δ + (1 + speed)·Hs:
 * 30 ms at speed 0.25, 50 ms at 1.5, 90 ms at 4). The result does not depend
 * on the block sizes: every frame reads the same samples however they came,
 * and only `flush` reads past the end (as zeros). At speeds above 1 the first
 * (speed − 1)·Hs of input (45 ms at speed 4) falls before the first frame.
 *
 * Cost: the search dominates, (2Δ+1)·Hs multiply-adds per output frame,
 * done coarse-to-fine (every other lag on every other sample, then the best
 * lag's neighbours in full), ≈ 1/4 of an exhaustive search: ≈ 0.4–0.8 s of
 * CPU per minute of 24 kHz output on the 2-core dev machine.
 */

export const MIN_SPEED = 0.25;
export const MAX_SPEED = 4;

/** Output hop: half a frame. */
const HOP_SECONDS = 0.015;
/** How far a frame may move from its nominal input position. */
const TOLERANCE_SECONDS = 0.0125;

export interface Stretcher {
  readonly speed: number;
  /** Stretches the next block; returns the output that is final now (possibly empty). */
  push(samples: Float32Array): Float32Array;
  /** Ends the input: the rest of the output, to exactly round(input length / speed) samples in all. */
  flush(): Float32Array;
}

/** Output samples for `count` input samples at `speed`. */
export function stretchedLength(count: number, speed: number): number {
  return speed === 1 ? count : Math.round(count / speed);
}

export function createStretcher(sampleRate: number, speed: number): Stretcher {
  if (!Number.isInteger(sampleRate) || sampleRate < 1000 || sampleRate > 768_000) {
    throw new RangeError(`Sample rate must be a whole number of Hz from 1000 to 768000 (got ${sampleRate})`);
  }
  if (!(speed >= MIN_SPEED && speed <= MAX_SPEED)) throw new RangeError(`speed must be from ${MIN_SPEED} to ${MAX_SPEED} (got ${speed})`);
  if (speed === 1) return identity();
  return new Wsola(sampleRate, speed);
}

/** Stretches a whole signal (one new array). */
export function stretch(samples: Float32Array, sampleRate: number, speed: number): Float32Array {
  const stretcher = createStretcher(sampleRate, speed);
  const head = stretcher.push(samples);
  const tail = stretcher.flush();
  if (tail.length === 0) return head;
  const out = new Float32Array(head.length + tail.length);
  out.set(head);
  out.set(tail, head.length);
  return out;
}

function identity(): Stretcher {
  let flushed = false;
  return {
    speed: 1,
    push(samples) {
      if (flushed) throw new Error('Stretcher already flushed');
      return samples;
    },
    flush() {
      flushed = true;
      return new Float32Array(0);
    },
  };
}

class Wsola implements Stretcher {
  private readonly hop: number;
  private readonly frame: number;
  private readonly tolerance: number;
  private readonly window: Float64Array;
  /** Input kept: input[0] is absolute sample inputStart; `received` have come. */
  private input = new Float32Array(0);
  private inputStart = 0;
  private inputLength = 0;
  private received = 0;
  /** Output being summed: acc[0] is output sample `emitted` (everything before has left); `accLength` of it written. */
  private acc: Float64Array;
  private accLength = 0;
  private emitted = 0;
  /** Next frame, and where the previous one was taken from. */
  private k = 0;
  private previous = 0;
  private flushed = false;

  constructor(
    sampleRate: number,
    readonly speed: number,
  ) {
    this.hop = 2 * Math.max(4, Math.round((sampleRate * HOP_SECONDS) / 2)); // even: the coarse search steps by 2
    this.frame = 2 * this.hop;
    this.tolerance = Math.max(2, Math.round(sampleRate * TOLERANCE_SECONDS));
    // Periodic Hann: at 50 % overlap the windows sum to exactly 1.
    this.window = new Float64Array(this.frame);
    for (let i = 0; i < this.frame; i++) this.window[i] = 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / this.frame);
    this.acc = new Float64Array(this.frame);
  }

  /** Nominal input position of frame k: its centre maps to output centre × speed. */
  private nominal(k: number): number {
    return Math.max(0, Math.round((k + 1) * this.hop * this.speed - this.hop));
  }

  /** Input samples frame k may read, counted from the start (its window anywhere in ±Δ, and the previous frame's continuation). */
  private needs(k: number): number {
    const nominal = this.nominal(k);
    return Math.max(nominal + this.tolerance + this.frame, k === 0 ? 0 : this.previous + 2 * this.hop);
  }

  push(samples: Float32Array): Float32Array {
    if (this.flushed) throw new Error('Stretcher already flushed');
    this.append(samples);
    while (this.needs(this.k) <= this.received) this.makeFrame();
    return this.take(this.k * this.hop);
  }

  flush(): Float32Array {
    if (this.flushed) return new Float32Array(0);
    this.flushed = true;
    const total = stretchedLength(this.received, this.speed);
    // Frame k completes output [k·Hs, (k+1)·Hs); the input past the end reads as zeros.
    const lastFrame = Math.max(this.k, Math.ceil(total / this.hop) - 1);
    this.append(new Float32Array(Math.max(0, this.needs(lastFrame) - this.received)), false);
    while (this.k * this.hop < total) this.makeFrame();
    return this.take(total);
  }

  private append(samples: Float32Array, counts = true): void {
    if (this.inputLength + samples.length > this.input.length) {
      // Full: drop what no later frame can read (before the next frame's search range and the previous frame's
      // continuation), then grow if still needed. Only when full, so that tiny pushes cost no copying each.
      const keepFrom = Math.min(this.nominal(this.k) - this.tolerance, this.k === 0 ? 0 : this.previous + this.hop);
      const drop = Math.max(0, Math.min(this.inputLength, keepFrom - this.inputStart));
      const kept = this.inputLength - drop;
      const size = Math.max(2 * (kept + samples.length), 4 * this.frame);
      if (size > this.input.length) {
        const next = new Float32Array(size);
        next.set(this.input.subarray(drop, this.inputLength));
        this.input = next;
      } else {
        this.input.copyWithin(0, drop, this.inputLength);
      }
      this.inputStart += drop;
      this.inputLength = kept;
    }
    this.input.set(samples, this.inputLength);
    this.inputLength += samples.length;
    if (counts) this.received += samples.length;
  }

  /** Input sample at absolute index i (zero outside what is kept: before the start, after the end). */
  private at(i: number): number {
    const j = i - this.inputStart;
    return j >= 0 && j < this.inputLength ? this.input[j]! : 0;
  }

  /** Where frame k is taken from: the nominal position moved to best continue the previous frame. */
  private position(k: number): number {
    const nominal = this.nominal(k);
    if (k === 0) return nominal;
    const natural = this.previous + this.hop;
    const low = Math.max(0, nominal - this.tolerance);
    const high = nominal + this.tolerance;
    const hop = this.hop;
    const input = this.input;
    const b = natural - this.inputStart;
    // Coarse: every other lag, over every other sample of the overlap (the candidate's energy slides along).
    const first = low + ((nominal - low) & 1); // same parity as the nominal position, which is among those tried
    let a = first - this.inputStart;
    let energy = 1e-9;
    for (let i = 0; i < hop; i += 2) energy += input[a + i]! * input[a + i]!;
    let best = -Infinity;
    let bestAt = nominal;
    for (let c = first; c <= high; c += 2, a += 2) {
      let dot = 0;
      for (let i = 0; i < hop; i += 2) dot += input[a + i]! * input[b + i]!;
      const score = dot / Math.sqrt(energy);
      // Ties (silence) keep the earliest candidate; the nominal one wins among equals below.
      if (score > best || (score === best && c === nominal)) {
        best = score;
        bestAt = c;
      }
      // Slide: drop sample a, take sample a + hop (hop is even).
      energy += input[a + hop]! * input[a + hop]! - input[a]! * input[a]!;
      if (energy < 1e-9) energy = 1e-9;
    }
    // Fine: the best coarse lag's neighbours, every sample.
    const centre = bestAt;
    best = -Infinity;
    for (let c = Math.max(low, centre - 2); c <= Math.min(high, centre + 2); c++) {
      const score = this.similarity(c, natural);
      if (score > best) {
        best = score;
        bestAt = c;
      }
    }
    return bestAt;
  }

  /** Cross-correlation of the overlap at `candidate` with the one at `natural`, over the candidate's energy. */
  private similarity(candidate: number, natural: number): number {
    const a = candidate - this.inputStart;
    const b = natural - this.inputStart;
    const input = this.input;
    let dot = 0;
    let energy = 1e-9;
    for (let i = 0; i < this.hop; i++) {
      const x = input[a + i]!;
      dot += x * input[b + i]!;
      energy += x * x;
    }
    return dot / Math.sqrt(energy);
  }

  private makeFrame(): void {
    const k = this.k;
    const p = this.position(k);
    const start = k * this.hop - this.emitted;
    if (start + this.frame > this.acc.length) {
      const next = new Float64Array(Math.max(2 * this.acc.length, start + this.frame));
      next.set(this.acc.subarray(0, this.accLength));
      this.acc = next;
    }
    this.accLength = start + this.frame;
    const acc = this.acc;
    const w = this.window;
    // The first frame's rising half is not faded in: nothing came before it.
    for (let i = 0; i < this.frame; i++) acc[start + i] += (k === 0 && i < this.hop ? 1 : w[i]!) * this.at(p + i);
    this.previous = p;
    this.k++;
  }

  /** The finished output up to absolute sample `end`. */
  private take(end: number): Float32Array {
    const count = Math.max(0, end - this.emitted);
    const out = Float32Array.from(this.acc.subarray(0, count));
    // What stays (at most the last frame's second half) moves to the front; the space it leaves is zeroed for the next sums.
    const rest = Math.max(0, this.accLength - count);
    this.acc.copyWithin(0, count, count + rest);
    this.acc.fill(0, rest, Math.max(rest, this.accLength));
    this.accLength = rest;
    this.emitted += count;
    return out;
  }
}
