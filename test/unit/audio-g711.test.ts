import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { encodeG711 } from '../../src/audio/encode/g711.js';
import { decodeG711, g711ToLinear, linearToAlaw, linearToUlaw, type G711Law } from '../../src/audio/g711.js';

/**
 * G.711 against its known codes, the shape of the decode tables, the
 * round trip of every code, Python's audioop (test/golden/g711-audioop.json,
 * written by scripts/golden/g711_audioop.py) over every 16-bit sample, and
 * the standard's quantizer bound (each sample within half a step of its code's value).
 */

interface Golden {
  decode: number[];
  encodeRuns: Array<[number, number]>;
}
const golden = JSON.parse(readFileSync(new URL('../golden/g711-audioop.json', import.meta.url), 'utf8')) as Record<G711Law, Golden>;

const encoders: Record<G711Law, (x: number) => number> = { ulaw: linearToUlaw, alaw: linearToAlaw };
const ALL_SAMPLES = Array.from({ length: 65536 }, (_, i) => i - 32768);

/** audioop's code for every sample, expanded from its runs. */
function goldenCodes(law: G711Law): Map<number, number> {
  const runs = golden[law].encodeRuns;
  const codes = new Map<number, number>();
  for (let r = 0; r < runs.length; r++) {
    const [start, code] = runs[r]!;
    const end = r + 1 < runs.length ? runs[r + 1]![0] : 32768;
    for (let x = start; x < end; x++) codes.set(x, code);
  }
  return codes;
}

/**
 * Codes in the order the standard lays the levels out, from the most negative
 * to the most positive. μ-law: 0x00…0x7F (−max … −0), then 0xFF…0x80 (+0 … +max).
 * A-law, once the even bits are restored (^0x55): 0x7F…0x00 (−max … −min), then 0x80…0xFF.
 */
function codesInLevelOrder(law: G711Law): number[] {
  const index = Array.from({ length: 128 }, (_, i) => i);
  if (law === 'ulaw') return [...index, ...index.map((i) => 0xff - i)];
  return [...index.map((i) => (0x7f - i) ^ 0x55), ...index.map((i) => (0x80 + i) ^ 0x55)];
}

describe('G.711: known codes', () => {
  it('μ-law: silence is 0xFF, full scale 0x80 / 0x00, the top level ±32124', () => {
    expect(linearToUlaw(0)).toBe(0xff);
    expect(linearToUlaw(32767)).toBe(0x80);
    expect(linearToUlaw(-32768)).toBe(0x00);
    expect(g711ToLinear(0xff, 'ulaw')).toBe(0);
    expect(g711ToLinear(0x7f, 'ulaw')).toBe(0);
    expect(g711ToLinear(0x80, 'ulaw')).toBe(32124);
    expect(g711ToLinear(0x00, 'ulaw')).toBe(-32124);
    // Inside the zero step (magnitude < 4 in 16-bit units, < 1 at the standard's 14-bit scale).
    expect(linearToUlaw(3)).toBe(0xff);
    expect(linearToUlaw(-3)).toBe(0x7f);
    expect(linearToUlaw(4)).toBe(0xfe);
  });

  it('A-law: zero is 0xD5 (+8), −1 is 0x55 (−8), full scale 0xAA / 0x2A at ±32256', () => {
    expect(linearToAlaw(0)).toBe(0xd5);
    expect(linearToAlaw(-1)).toBe(0x55);
    expect(linearToAlaw(32767)).toBe(0xaa);
    expect(linearToAlaw(-32768)).toBe(0x2a);
    expect(g711ToLinear(0xd5, 'alaw')).toBe(8);
    expect(g711ToLinear(0x55, 'alaw')).toBe(-8);
    expect(g711ToLinear(0xaa, 'alaw')).toBe(32256);
    expect(g711ToLinear(0x2a, 'alaw')).toBe(-32256);
  });
});

describe.each(['ulaw', 'alaw'] as const)('G.711 %s', (law) => {
  const encode = encoders[law];

  it('decodes every code to audioop’s value', () => {
    expect(Array.from({ length: 256 }, (_, c) => g711ToLinear(c, law))).toEqual(golden[law].decode);
  });

  it('decode table: symmetric (the sign bit flips the value) and strictly increasing in level order', () => {
    for (let c = 0; c < 256; c++) expect(g711ToLinear(c ^ 0x80, law) + g711ToLinear(c, law)).toBe(0);
    const values = codesInLevelOrder(law).map((c) => g711ToLinear(c, law));
    for (let i = 1; i < values.length; i++) {
      // μ-law's two zeros (0x7F, 0xFF) are the one tie.
      if (law === 'ulaw' && i === 128) expect(values[i]).toBe(values[i - 1]);
      else expect(values[i]!).toBeGreaterThan(values[i - 1]!);
    }
  });

  it('encode(decode(code)) gives the code back (μ-law −0 becomes +0)', () => {
    for (let c = 0; c < 256; c++) {
      const expected = law === 'ulaw' && c === 0x7f ? 0xff : c;
      expect(encode(g711ToLinear(c, law))).toBe(expected);
    }
  });

  it('encode is monotonic and puts every sample within half a step of its code’s level (clipped at the top level)', () => {
    const top = law === 'ulaw' ? 32124 : 32256;
    const failures: number[] = [];
    let previous = -Infinity;
    for (const x of ALL_SAMPLES) {
      const code = encode(x);
      const value = g711ToLinear(code, law);
      // Step size of the code's segment in 16-bit units: μ-law 8·2^s; A-law 16 in segments 0 and 1, then doubling.
      const segment = law === 'ulaw' ? ((~code & 0xff) >> 4) & 7 : ((code ^ 0x55) >> 4) & 7;
      const step = law === 'ulaw' ? 8 << segment : 16 << Math.max(segment - 1, 0);
      const target = Math.max(-top - step / 2, Math.min(top + step / 2, x));
      // A-law's grid is centred on −½ (x and −x − 1 mirror each other), μ-law's on 0.
      const centre = law === 'alaw' ? value - 0.5 : value;
      if (value < previous || Math.abs(target - centre) > step / 2) failures.push(x);
      previous = value;
    }
    expect(failures).toEqual([]);
  });

  it('agrees with audioop on every 16-bit sample (μ-law: audioop drops 2 bits before taking the magnitude)', () => {
    const reference = goldenCodes(law);
    expect(reference.size).toBe(65536);
    const mismatches: number[] = [];
    for (const x of ALL_SAMPLES) {
      // audioop's μ-law quantizes to 14 bits by flooring (x >> 2) and only then negates, so a negative sample's
      // magnitude is rounded up: it gives −1 the code of −4. Ours takes |x| first (−x and x mirror each other).
      const same = law === 'ulaw' ? 4 * Math.floor(x / 4) : x;
      if (encode(same) !== reference.get(x)) mismatches.push(x);
    }
    expect(mismatches).toEqual([]);
    if (law === 'ulaw') {
      const asymmetric = ALL_SAMPLES.filter((x) => x > 0 && linearToUlaw(-x) !== (linearToUlaw(x) & 0x7f));
      expect(asymmetric).toEqual([]);
    }
  });

  it('float arrays: decode is code / 32768; encode clamps and rounds to 16 bits first', () => {
    const codes = Uint8Array.from({ length: 256 }, (_, c) => c);
    const floats = decodeG711(codes, law);
    for (let c = 0; c < 256; c++) expect(floats[c]).toBe(g711ToLinear(c, law) / 32768);
    expect(Array.from(encodeG711(floats, law))).toEqual(Array.from(codes, (c) => (law === 'ulaw' && c === 0x7f ? 0xff : c)));
    const edge = encodeG711(Float32Array.of(1.5, -1.5, 1, -1, 0.5 / 32768, NaN), law);
    expect(Array.from(edge)).toEqual([encode(32767), encode(-32768), encode(32767), encode(-32768), encode(1), encode(0)]);
  });
});
