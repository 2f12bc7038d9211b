/**
 * IEEE half-precision conversions for tensors that cross into and out of
 * fp16 graphs (Node 20 has no Float16Array): ORT takes and returns float16
 * data as raw 16-bit patterns in a Uint16Array.
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** One float's nearest half (round to nearest even; overflow to ±Infinity; NaN kept). */
export function toHalf(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exponent = (x >>> 23) & 0xff;
  let mantissa = x & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 : 0);
  const e = exponent - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    // Subnormal half (or zero): shift the implicit bit in, then round.
    if (e < -10) return sign;
    mantissa |= 0x800000;
    const shift = 14 - e;
    const half = mantissa >>> shift;
    const rest = mantissa & ((1 << shift) - 1);
    const midpoint = 1 << (shift - 1);
    return sign | (rest > midpoint || (rest === midpoint && half & 1) ? half + 1 : half);
  }
  const half = (e << 10) | (mantissa >>> 13);
  const rest = mantissa & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent (up to Infinity).
  return sign | (rest > 0x1000 || (rest === 0x1000 && half & 1) ? half + 1 : half);
}

let table: Float32Array | undefined;

/** Every half's float value, built once (256 KiB): converting is then one lookup per element. */
function halfTable(): Float32Array {
  if (table) return table;
  table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exponent = (h >>> 10) & 0x1f;
    const mantissa = h & 0x3ff;
    table[h] =
      exponent === 0 ? sign * mantissa * 2 ** -24
      : exponent === 0x1f ? (mantissa ? NaN : sign * Infinity)
      : sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
  }
  return table;
}

export function fromHalf(bits: number): number {
  return halfTable()[bits & 0xffff]!;
}

export function floatsToHalves(values: ArrayLike<number>, out = new Uint16Array(values.length)): Uint16Array {
  for (let i = 0; i < values.length; i++) out[i] = toHalf(values[i]!);
  return out;
}

export function halvesToFloats(bits: Uint16Array, out = new Float32Array(bits.length)): Float32Array {
  const t = halfTable();
  for (let i = 0; i < bits.length; i++) out[i] = t[bits[i]!]!;
  return out;
}
