/**
 * FFTs of any size whose prime factors are at most 7 (Whisper's 400 = 2⁴·5²,
 * 200, every power of two): an iterative Stockham mixed-radix transform with
 * hand-written radix-2, -3, -4 and -5 butterflies and every stage's twiddles
 * computed once per size. Stockham sorts itself (no bit reversal) by
 * ping-ponging between the caller's arrays and one scratch pair.
 *
 * Stage s has radix R and span L (the product of the earlier radices): the
 * N / R butterflies j = b·L + k read x[j + r·N/R], multiply by W_{L·R}^{r·k},
 * take an R-point DFT and write y[b·L·R + k + q·L].
 */

interface Stage {
  radix: number;
  span: number;
  /** W_{span·radix}^{r·k} for k < span, r = 1 … radix−1, at (k·(radix−1) + r−1). */
  twRe: Float64Array;
  twIm: Float64Array;
}

const C3 = -0.5;
const S3 = Math.sin((2 * Math.PI) / 3);
const C51 = Math.cos((2 * Math.PI) / 5);
const C52 = Math.cos((4 * Math.PI) / 5);
const S51 = Math.sin((2 * Math.PI) / 5);
const S52 = Math.sin((4 * Math.PI) / 5);

export class Fft {
  private readonly stages: Stage[];
  private readonly scratchRe: Float64Array;
  private readonly scratchIm: Float64Array;
  /** Forward roots W_size^t for the generic butterfly (radix 7). */
  private readonly rootRe: Float64Array;
  private readonly rootIm: Float64Array;
  private readonly yRe = new Float64Array(7);
  private readonly yIm = new Float64Array(7);

  constructor(readonly size: number) {
    if (!Number.isInteger(size) || size < 1) throw new RangeError(`FFT size must be a positive integer, got ${size}`);
    const radices = factorize(size);
    if (radices.some((f) => f > 7)) throw new Error(`FFT size ${size} has a prime factor over 7`);
    this.stages = [];
    let span = 1;
    for (const radix of radices) {
      const twRe = new Float64Array(span * (radix - 1));
      const twIm = new Float64Array(span * (radix - 1));
      for (let k = 0; k < span; k++) {
        for (let r = 1; r < radix; r++) {
          const angle = (-2 * Math.PI * r * k) / (span * radix);
          twRe[k * (radix - 1) + r - 1] = Math.cos(angle);
          twIm[k * (radix - 1) + r - 1] = Math.sin(angle);
        }
      }
      this.stages.push({ radix, span, twRe, twIm });
      span *= radix;
    }
    this.scratchRe = new Float64Array(size);
    this.scratchIm = new Float64Array(size);
    this.rootRe = Float64Array.from({ length: size }, (_, t) => Math.cos((-2 * Math.PI * t) / size));
    this.rootIm = Float64Array.from({ length: size }, (_, t) => Math.sin((-2 * Math.PI * t) / size));
  }

  /** In-place forward transform of (re, im), both of length `size`. */
  transform(re: Float64Array, im: Float64Array): void {
    let [srcRe, srcIm, dstRe, dstIm] = [re, im, this.scratchRe, this.scratchIm];
    for (const stage of this.stages) {
      switch (stage.radix) {
        case 4:
          this.radix4(stage, srcRe, srcIm, dstRe, dstIm);
          break;
        case 2:
          this.radix2(stage, srcRe, srcIm, dstRe, dstIm);
          break;
        case 5:
          this.radix5(stage, srcRe, srcIm, dstRe, dstIm);
          break;
        case 3:
          this.radix3(stage, srcRe, srcIm, dstRe, dstIm);
          break;
        default:
          this.radixAny(stage, srcRe, srcIm, dstRe, dstIm);
      }
      [srcRe, srcIm, dstRe, dstIm] = [dstRe, dstIm, srcRe, srcIm];
    }
    if (srcRe !== re) {
      re.set(srcRe);
      im.set(srcIm);
    }
  }

  private radix2({ span, twRe, twIm }: Stage, xr: Float64Array, xi: Float64Array, yr: Float64Array, yi: Float64Array): void {
    const q = this.size / 2;
    for (let k = 0; k < span; k++) {
      const w1r = twRe[k]!;
      const w1i = twIm[k]!;
      for (let j = k, o = k; j < q; j += span, o += 2 * span) {
        const a0r = xr[j]!;
        const a0i = xi[j]!;
        const a1r = xr[j + q]! * w1r - xi[j + q]! * w1i;
        const a1i = xr[j + q]! * w1i + xi[j + q]! * w1r;
        yr[o] = a0r + a1r;
        yi[o] = a0i + a1i;
        yr[o + span] = a0r - a1r;
        yi[o + span] = a0i - a1i;
      }
    }
  }

  private radix3({ span, twRe, twIm }: Stage, xr: Float64Array, xi: Float64Array, yr: Float64Array, yi: Float64Array): void {
    const q = this.size / 3;
    for (let k = 0; k < span; k++) {
      const w1r = twRe[2 * k]!;
      const w1i = twIm[2 * k]!;
      const w2r = twRe[2 * k + 1]!;
      const w2i = twIm[2 * k + 1]!;
      for (let j = k, o = k; j < q; j += span, o += 3 * span) {
        const a0r = xr[j]!;
        const a0i = xi[j]!;
        const a1r = xr[j + q]! * w1r - xi[j + q]! * w1i;
        const a1i = xr[j + q]! * w1i + xi[j + q]! * w1r;
        const a2r = xr[j + 2 * q]! * w2r - xi[j + 2 * q]! * w2i;
        const a2i = xr[j + 2 * q]! * w2i + xi[j + 2 * q]! * w2r;
        const tr = a1r + a2r;
        const ti = a1i + a2i;
        const mr = a0r + C3 * tr;
        const mi = a0i + C3 * ti;
        // −i·S3·(a1 − a2)
        const dr = S3 * (a1i - a2i);
        const di = -S3 * (a1r - a2r);
        yr[o] = a0r + tr;
        yi[o] = a0i + ti;
        yr[o + span] = mr + dr;
        yi[o + span] = mi + di;
        yr[o + 2 * span] = mr - dr;
        yi[o + 2 * span] = mi - di;
      }
    }
  }

  private radix4({ span, twRe, twIm }: Stage, xr: Float64Array, xi: Float64Array, yr: Float64Array, yi: Float64Array): void {
    const q = this.size / 4;
    for (let k = 0; k < span; k++) {
      const w1r = twRe[3 * k]!;
      const w1i = twIm[3 * k]!;
      const w2r = twRe[3 * k + 1]!;
      const w2i = twIm[3 * k + 1]!;
      const w3r = twRe[3 * k + 2]!;
      const w3i = twIm[3 * k + 2]!;
      for (let j = k, o = k; j < q; j += span, o += 4 * span) {
        const a0r = xr[j]!;
        const a0i = xi[j]!;
        const a1r = xr[j + q]! * w1r - xi[j + q]! * w1i;
        const a1i = xr[j + q]! * w1i + xi[j + q]! * w1r;
        const a2r = xr[j + 2 * q]! * w2r - xi[j + 2 * q]! * w2i;
        const a2i = xr[j + 2 * q]! * w2i + xi[j + 2 * q]! * w2r;
        const a3r = xr[j + 3 * q]! * w3r - xi[j + 3 * q]! * w3i;
        const a3i = xr[j + 3 * q]! * w3i + xi[j + 3 * q]! * w3r;
        const s02r = a0r + a2r;
        const s02i = a0i + a2i;
        const d02r = a0r - a2r;
        const d02i = a0i - a2i;
        const s13r = a1r + a3r;
        const s13i = a1i + a3i;
        // −i·(a1 − a3)
        const d13r = a1i - a3i;
        const d13i = a3r - a1r;
        yr[o] = s02r + s13r;
        yi[o] = s02i + s13i;
        yr[o + span] = d02r + d13r;
        yi[o + span] = d02i + d13i;
        yr[o + 2 * span] = s02r - s13r;
        yi[o + 2 * span] = s02i - s13i;
        yr[o + 3 * span] = d02r - d13r;
        yi[o + 3 * span] = d02i - d13i;
      }
    }
  }

  private radix5({ span, twRe, twIm }: Stage, xr: Float64Array, xi: Float64Array, yr: Float64Array, yi: Float64Array): void {
    const q = this.size / 5;
    for (let k = 0; k < span; k++) {
      const t = 4 * k;
      const w1r = twRe[t]!;
      const w1i = twIm[t]!;
      const w2r = twRe[t + 1]!;
      const w2i = twIm[t + 1]!;
      const w3r = twRe[t + 2]!;
      const w3i = twIm[t + 2]!;
      const w4r = twRe[t + 3]!;
      const w4i = twIm[t + 3]!;
      for (let j = k, o = k; j < q; j += span, o += 5 * span) {
        const a0r = xr[j]!;
        const a0i = xi[j]!;
        const a1r = xr[j + q]! * w1r - xi[j + q]! * w1i;
        const a1i = xr[j + q]! * w1i + xi[j + q]! * w1r;
        const a2r = xr[j + 2 * q]! * w2r - xi[j + 2 * q]! * w2i;
        const a2i = xr[j + 2 * q]! * w2i + xi[j + 2 * q]! * w2r;
        const a3r = xr[j + 3 * q]! * w3r - xi[j + 3 * q]! * w3i;
        const a3i = xr[j + 3 * q]! * w3i + xi[j + 3 * q]! * w3r;
        const a4r = xr[j + 4 * q]! * w4r - xi[j + 4 * q]! * w4i;
        const a4i = xr[j + 4 * q]! * w4i + xi[j + 4 * q]! * w4r;
        const t1r = a1r + a4r;
        const t1i = a1i + a4i;
        const t2r = a2r + a3r;
        const t2i = a2i + a3i;
        const t3r = a1r - a4r;
        const t3i = a1i - a4i;
        const t4r = a2r - a3r;
        const t4i = a2i - a3i;
        const m1r = a0r + C51 * t1r + C52 * t2r;
        const m1i = a0i + C51 * t1i + C52 * t2i;
        const m2r = a0r + C52 * t1r + C51 * t2r;
        const m2i = a0i + C52 * t1i + C51 * t2i;
        // X1,4 = m1 ∓ i·b1 and X2,3 = m2 ∓ i·b2, with b1 = S51·t3 + S52·t4, b2 = S52·t3 − S51·t4.
        const b1r = S51 * t3r + S52 * t4r;
        const b1i = S51 * t3i + S52 * t4i;
        const b2r = S52 * t3r - S51 * t4r;
        const b2i = S52 * t3i - S51 * t4i;
        yr[o] = a0r + t1r + t2r;
        yi[o] = a0i + t1i + t2i;
        yr[o + span] = m1r + b1i;
        yi[o + span] = m1i - b1r;
        yr[o + 2 * span] = m2r + b2i;
        yi[o + 2 * span] = m2i - b2r;
        yr[o + 3 * span] = m2r - b2i;
        yi[o + 3 * span] = m2i + b2r;
        yr[o + 4 * span] = m1r - b1i;
        yi[o + 4 * span] = m1i + b1r;
      }
    }
  }

  /** Any radix (7 here): twiddle, then a direct R-point DFT. */
  private radixAny({ radix, span, twRe, twIm }: Stage, xr: Float64Array, xi: Float64Array, yr: Float64Array, yi: Float64Array): void {
    const q = this.size / radix;
    const rootStep = this.size / radix;
    const { yRe, yIm, rootRe, rootIm } = this;
    for (let k = 0; k < span; k++) {
      for (let j = k, o = k; j < q; j += span, o += radix * span) {
        yRe[0] = xr[j]!;
        yIm[0] = xi[j]!;
        for (let r = 1; r < radix; r++) {
          const wr = twRe[k * (radix - 1) + r - 1]!;
          const wi = twIm[k * (radix - 1) + r - 1]!;
          const vr = xr[j + r * q]!;
          const vi = xi[j + r * q]!;
          yRe[r] = vr * wr - vi * wi;
          yIm[r] = vr * wi + vi * wr;
        }
        for (let s = 0; s < radix; s++) {
          let accR = 0;
          let accI = 0;
          for (let r = 0; r < radix; r++) {
            const t = ((r * s) % radix) * rootStep;
            accR += yRe[r]! * rootRe[t]! - yIm[r]! * rootIm[t]!;
            accI += yRe[r]! * rootIm[t]! + yIm[r]! * rootRe[t]!;
          }
          yr[o + s * span] = accR;
          yi[o + s * span] = accI;
        }
      }
    }
  }
}

/**
 * The spectrum of a real signal of even length N from one complex FFT of N/2
 * points: the even samples as real parts, the odd ones as imaginary, then
 * one pass that separates the two halves' spectra and combines them. Half
 * the work of a complex transform with a zero imaginary part.
 */
export class RealFft {
  private readonly half: Fft;
  /**
   * The input of the next `spectrum` call, packed: sample 2n in packedRe[n],
   * sample 2n+1 in packedIm[n]. A caller may fill them directly (the mel
   * windows each frame as it packs it) instead of calling `load`.
   */
  readonly packedRe: Float64Array;
  readonly packedIm: Float64Array;
  /** W_N^k for k ≤ N/2, halved (the split's ½ folded in). */
  private readonly wRe: Float64Array;
  private readonly wIm: Float64Array;

  constructor(readonly size: number) {
    if (!Number.isInteger(size) || size < 2 || size % 2 !== 0) throw new RangeError(`real FFT size must be even, got ${size}`);
    this.half = new Fft(size / 2);
    this.packedRe = new Float64Array(size / 2);
    this.packedIm = new Float64Array(size / 2);
    this.wRe = Float64Array.from({ length: size / 2 + 1 }, (_, k) => 0.5 * Math.cos((2 * Math.PI * k) / size));
    this.wIm = Float64Array.from({ length: size / 2 + 1 }, (_, k) => -0.5 * Math.sin((2 * Math.PI * k) / size));
  }

  /** Packs `signal` (length `size`) for `spectrum`. */
  load(signal: ArrayLike<number>): this {
    const { packedRe: zRe, packedIm: zIm } = this;
    for (let n = 0; n < zRe.length; n++) {
      zRe[n] = signal[2 * n]!;
      zIm[n] = signal[2 * n + 1]!;
    }
    return this;
  }

  /** Bins 0 … N/2 of the packed signal's DFT into `re` and `im` (each at least N/2 + 1 long); overwrites the packed input. */
  spectrum(re: Float64Array, im: Float64Array): void {
    const { packedRe: zRe, packedIm: zIm, wRe, wIm } = this;
    const m = zRe.length;
    this.half.transform(zRe, zIm);
    for (let k = 0; k <= m; k++) {
      const a = k === m ? 0 : k;
      const b = k === 0 ? 0 : m - k;
      const ar = zRe[a]!;
      const ai = zIm[a]!;
      const br = zRe[b]!;
      const bi = zIm[b]!;
      // Even part E = (Z[k] + conj Z[m−k]) / 2, odd part O = (Z[k] − conj Z[m−k]) / 2i; X[k] = E + W^k·O.
      const er = 0.5 * (ar + br);
      const ei = 0.5 * (ai - bi);
      const or = ai + bi;
      const oi = br - ar;
      const wr = wRe[k]!;
      const wi = wIm[k]!;
      re[k] = er + wr * or - wi * oi;
      im[k] = ei + wr * oi + wi * or;
    }
  }
}

/** Radices in the order the stages use them: fours first (fewest stages), then 2, 3, 5, 7, and any larger prime. */
function factorize(n: number): number[] {
  const factors: number[] = [];
  while (n % 4 === 0) {
    factors.push(4);
    n /= 4;
  }
  for (const p of [2, 3, 5, 7]) {
    while (n % p === 0) {
      factors.push(p);
      n /= p;
    }
  }
  if (n !== 1) factors.push(n);
  return factors;
}
