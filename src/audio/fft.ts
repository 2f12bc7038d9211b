/**
 * A complex FFT of any size whose prime factors are small (Whisper's 400 =
 * 2⁴·5², and every power of two): recursive mixed-radix decimation in time
 * with twiddles and scratch space computed once per size. A direct DFT of
 * 400 points would cost 160k multiply-adds a frame; this costs ~8k.
 */
export class Fft {
  private readonly cos: Float64Array;
  private readonly sin: Float64Array;
  private readonly factors: number[];
  private readonly scratchRe: Float64Array;
  private readonly scratchIm: Float64Array;
  /** One butterfly's twiddled inputs (the largest radix is 7). */
  private readonly yRe = new Float64Array(7);
  private readonly yIm = new Float64Array(7);

  constructor(readonly size: number) {
    this.factors = factorize(size);
    if (this.factors.some((f) => f > 7)) throw new Error(`FFT size ${size} has a prime factor over 7`);
    this.cos = new Float64Array(size);
    this.sin = new Float64Array(size);
    for (let k = 0; k < size; k++) {
      this.cos[k] = Math.cos((2 * Math.PI * k) / size);
      this.sin[k] = -Math.sin((2 * Math.PI * k) / size);
    }
    this.scratchRe = new Float64Array(size);
    this.scratchIm = new Float64Array(size);
  }

  /** In-place forward transform of (re, im), both of length `size`. */
  transform(re: Float64Array, im: Float64Array): void {
    this.scratchRe.set(re);
    this.scratchIm.set(im);
    this.step(this.scratchRe, this.scratchIm, 0, 1, re, im, 0, this.size, 0);
  }

  /**
   * Transforms the `n` inputs at inOff, inOff+stride, … into out[outOff …
   * outOff+n). `depth` indexes the factor used at this level.
   */
  private step(inRe: Float64Array, inIm: Float64Array, inOff: number, stride: number, outRe: Float64Array, outIm: Float64Array, outOff: number, n: number, depth: number): void {
    if (n === 1) {
      outRe[outOff] = inRe[inOff]!;
      outIm[outOff] = inIm[inOff]!;
      return;
    }
    const p = this.factors[depth]!;
    const m = n / p;
    // Sub-transforms of every p-th input, laid out one after another in out.
    for (let r = 0; r < p; r++) this.step(inRe, inIm, inOff + r * stride, stride * p, outRe, outIm, outOff + r * m, m, depth + 1);
    // Butterflies: X[k + q·m] = Σ_r W_n^{r(k+q·m)} · Y_r[k].
    const twiddleStep = this.size / n;
    const rootStep = this.size / p;
    const { yRe, yIm } = this;
    for (let k = 0; k < m; k++) {
      for (let r = 0; r < p; r++) {
        const i = outOff + r * m + k;
        const t = (r * k * twiddleStep) % this.size;
        const c = this.cos[t]!;
        const s = this.sin[t]!;
        yRe[r] = outRe[i]! * c - outIm[i]! * s;
        yIm[r] = outRe[i]! * s + outIm[i]! * c;
      }
      for (let q = 0; q < p; q++) {
        let accRe = 0;
        let accIm = 0;
        for (let r = 0; r < p; r++) {
          // W_n^{r·q·m} = W_p^{r·q}
          const t = ((r * q) % p) * rootStep;
          accRe += yRe[r]! * this.cos[t]! - yIm[r]! * this.sin[t]!;
          accIm += yRe[r]! * this.sin[t]! + yIm[r]! * this.cos[t]!;
        }
        outRe[outOff + q * m + k] = accRe;
        outIm[outOff + q * m + k] = accIm;
      }
    }
  }
}

function factorize(n: number): number[] {
  const factors: number[] = [];
  for (const p of [2, 3, 5, 7]) {
    while (n % p === 0) {
      factors.push(p);
      n /= p;
    }
  }
  if (n !== 1) factors.push(n);
  return factors;
}
