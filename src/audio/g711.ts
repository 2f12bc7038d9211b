/**
 * ITU-T G.711 companding, 16-bit linear PCM ↔ 8-bit codes: μ-law (North
 * America, Japan) and A-law (everywhere else), the formats of telephony and of
 * the Realtime API's `audio/pcmu` and `audio/pcma`. Each code is a sign, a
 * 3-bit segment (a power-of-two range) and a 4-bit step within it.
 *
 * The standard defines the quantizer on sign-magnitude samples (14-bit for
 * μ-law, 13-bit for A-law); it leaves open how two's complement 16-bit input
 * maps onto that. Here:
 * - μ-law has a zero level (mid-tread), so the magnitude is |x|, as in the
 *   classic 16-bit coder (bias 0x84, clip 32635): −x encodes as x with the
 *   sign flipped, and −3…3 are all silence.
 * - A-law has no zero (its smallest levels are ±8), so a sample and its one's
 *   complement (−x − 1) mirror each other, as in ITU-T G.191's reference
 *   coder: [−32768, 32767] splits evenly about −½.
 *
 * Both the WAV/AIFF reader and the encoders use this file, so, like crc.ts,
 * it imports neither side; encoding whole float signals is encode/g711.ts.
 */

export type G711Law = 'ulaw' | 'alaw';

/** μ-law adds this to the magnitude so that every segment starts at a power of two. */
const ULAW_BIAS = 0x84;
/** Largest μ-law magnitude: CLIP + BIAS = 32767, the top of segment 7. */
const ULAW_CLIP = 32635;

/** 16-bit sample (an integer in [−32768, 32767]) → μ-law code. */
export function linearToUlaw(sample: number): number {
  const sign = sample < 0 ? 0x80 : 0;
  const biased = Math.min(Math.abs(sample), ULAW_CLIP) + ULAW_BIAS;
  // Segment s holds biased magnitudes [256·2^s, 512·2^s): the highest set bit above bit 7.
  const segment = 31 - Math.clz32(biased) - 7;
  const step = (biased >> (segment + 3)) & 0x0f;
  // Codes go out inverted, so that silence (0xFF) is rich in ones for the line's clock recovery.
  return ~(sign | (segment << 4) | step) & 0xff;
}

/** 16-bit sample → A-law code. */
export function linearToAlaw(sample: number): number {
  const sign = sample < 0 ? 0 : 0x80;
  const magnitude = (sample < 0 ? ~sample : sample) >> 4;
  // Segment 0 and 1 share one step size (the linear part near zero); from 2 on each doubles it.
  const segment = magnitude < 16 ? 0 : 31 - Math.clz32(magnitude) - 3;
  const step = (segment === 0 ? magnitude : magnitude >> (segment - 1)) & 0x0f;
  // Even bits inverted (0x55), again for the line's ones density.
  return (sign | (segment << 4) | step) ^ 0x55;
}

/** The 16-bit value of every code: the middle of the range of samples that encode to it. */
function decodeTable(law: G711Law): Int16Array {
  const table = new Int16Array(256);
  for (let code = 0; code < 256; code++) {
    if (law === 'ulaw') {
      const u = ~code & 0xff;
      const magnitude = ((((u & 0x0f) << 3) + ULAW_BIAS) << ((u >> 4) & 7)) - ULAW_BIAS;
      table[code] = u & 0x80 ? -magnitude : magnitude;
    } else {
      const a = code ^ 0x55;
      const segment = (a >> 4) & 7;
      const step = a & 0x0f;
      const magnitude = segment === 0 ? (step << 4) + 8 : ((step << 4) + 0x108) << (segment - 1);
      table[code] = a & 0x80 ? magnitude : -magnitude;
    }
  }
  return table;
}

const LINEAR = { ulaw: decodeTable('ulaw'), alaw: decodeTable('alaw') };
const FLOAT = { ulaw: Float32Array.from(LINEAR.ulaw, (v) => v / 32768), alaw: Float32Array.from(LINEAR.alaw, (v) => v / 32768) };

/** Code → 16-bit sample. */
export function g711ToLinear(code: number, law: G711Law): number {
  return LINEAR[law][code & 0xff]!;
}

/** Code → float sample (the 16-bit value / 32768), as a table that the caller must not modify; the WAV/AIFF reader indexes it directly. */
export function g711FloatTable(law: G711Law): Float32Array {
  return FLOAT[law];
}

/** Codes → float samples in [−1, 1]. */
export function decodeG711(codes: Uint8Array, law: G711Law): Float32Array {
  const table = FLOAT[law];
  const out = new Float32Array(codes.length);
  for (let i = 0; i < codes.length; i++) out[i] = table[codes[i]!]!;
  return out;
}
