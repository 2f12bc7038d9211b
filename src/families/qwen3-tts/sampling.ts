import type { Sampling } from './config.js';

/**
 * Seeded sampling for the talker's first code and the residual groups, in
 * upstream's (transformers') order: repetition penalty, temperature, top-k,
 * top-p, then a draw. The same seed gives the same draws, so the same request
 * gives the same audio. Buffers are allocated once per sampler: this runs 16
 * times per 80 ms frame.
 */

/** xoshiro128** seeded through splitmix32: fast, 2^128 period, good enough for sampling. */
export class Rng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(seed: number) {
    // Any finite number seeds it: the low and high 32 bits both count.
    let s = (Math.trunc(seed) >>> 0) ^ Math.imul(Math.floor(Math.trunc(seed) / 2 ** 32) >>> 0, 0x9e3779b9);
    const next = () => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
  }

  /** Uniform in [0, 1). */
  next(): number {
    const result = Math.imul(rotl(Math.imul(this.b, 5), 7), 9) >>> 0;
    const t = this.b << 9;
    this.c ^= this.a;
    this.d ^= this.b;
    this.b ^= this.c;
    this.a ^= this.d;
    this.c ^= t;
    this.d = rotl(this.d, 11);
    return result / 4294967296;
  }
}

const rotl = (x: number, k: number) => (x << k) | (x >>> (32 - k));

export class Sampler {
  private readonly ids: Int32Array;
  private readonly values: Float32Array;

  constructor(private readonly maxK: number) {
    this.ids = new Int32Array(Math.max(1, maxK));
    this.values = new Float32Array(Math.max(1, maxK));
  }

  /**
   * Draws an index of `logits[0, n)` (−Infinity entries are never drawn).
   * Greedy when sampling is off or the temperature is 0.
   */
  sample(logits: Float32Array, n: number, params: Sampling, rng: Rng): number {
    if (!params.doSample || params.temperature <= 0) return argmax(logits, n);
    const k = params.topK > 0 ? Math.min(params.topK, this.maxK, n) : Math.min(this.maxK, n);
    const count = this.topK(logits, n, k);
    if (count === 0) throw new Error('every code is masked');
    const ids = this.ids;
    const weights = this.values;
    // Softmax weights relative to the best (sorted descending), at the temperature.
    const best = weights[0]!;
    let total = 0;
    for (let i = 0; i < count; i++) {
      weights[i] = Math.exp((weights[i]! - best) / params.temperature);
      total += weights[i]!;
    }
    let kept = count;
    if (params.topP < 1) {
      // Keep the smallest prefix whose mass reaches top_p (at least one).
      let mass = 0;
      for (let i = 0; i < count; i++) {
        mass += weights[i]!;
        if (mass >= params.topP * total) {
          kept = i + 1;
          total = mass;
          break;
        }
      }
    }
    let r = rng.next() * total;
    for (let i = 0; i < kept; i++) {
      r -= weights[i]!;
      if (r < 0) return ids[i]!;
    }
    return ids[kept - 1]!;
  }

  /** The k largest finite entries of logits[0, n), descending, into ids/values; returns how many. */
  private topK(logits: Float32Array, n: number, k: number): number {
    const ids = this.ids;
    const values = this.values;
    let count = 0;
    for (let i = 0; i < n; i++) {
      const v = logits[i]!;
      if (v === -Infinity || Number.isNaN(v)) continue;
      if (count === k && v <= values[k - 1]!) continue;
      let j = count < k ? count++ : k - 1;
      while (j > 0 && values[j - 1]! < v) {
        values[j] = values[j - 1]!;
        ids[j] = ids[j - 1]!;
        j--;
      }
      values[j] = v;
      ids[j] = i;
    }
    return count;
  }
}

export function argmax(logits: Float32Array, n: number): number {
  let best = -1;
  let value = -Infinity;
  for (let i = 0; i < n; i++) {
    if (logits[i]! > value) {
      value = logits[i]!;
      best = i;
    }
  }
  if (best < 0) throw new Error('every code is masked');
  return best;
}

/**
 * The talker's first code of a frame: only audio codes (below `audioCodes`)
 * and eos may be drawn, eos not before `minFrames`, and codes drawn before in
 * this utterance are penalised (transformers' repetition penalty).
 */
export class FirstCodeSampler {
  private readonly scratch: Float32Array;
  private readonly seen: Uint8Array;
  private readonly sampler: Sampler;

  constructor(
    private readonly vocab: number,
    private readonly audioCodes: number,
    private readonly eos: number,
    private readonly params: Sampling,
    private readonly minFrames: number,
  ) {
    this.scratch = new Float32Array(vocab);
    this.seen = new Uint8Array(vocab);
    this.sampler = new Sampler(Math.max(1, params.topK > 0 ? params.topK : vocab));
  }

  sample(logits: Float32Array, frame: number, rng: Rng): number {
    const x = this.scratch;
    const penalty = this.params.repetitionPenalty;
    for (let i = 0; i < this.audioCodes; i++) {
      const v = logits[i]!;
      x[i] = this.seen[i] && penalty !== 1 ? (v < 0 ? v * penalty : v / penalty) : v;
    }
    x.fill(-Infinity, this.audioCodes, this.vocab);
    if (frame >= this.minFrames) x[this.eos] = logits[this.eos]!;
    const code = this.sampler.sample(x, this.vocab, this.params, rng);
    if (code < this.audioCodes) this.seen[code] = 1;
    return code;
  }
}
