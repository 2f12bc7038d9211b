import { describe, expect, it } from 'vitest';
import { compressionRatio } from '../../src/families/whisper/segments.js';

/**
 * Whisper's compression ratio counts bytes as stock zlib does (Python's
 * zlib.compress, level 6): the expected lengths below are Python's
 * (zlib 1.2.13); Node's bundled zlib fork gives other lengths for some.
 */

/** The same pseudo-random text as the Python that produced the expectations. */
function lcg(seed: number, n: number, alphabet: string): string {
  let x = seed;
  let out = '';
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1103515245) + 12345) & 0x7fffffff;
    out += alphabet[x % alphabet.length];
  }
  return out;
}

const CASES: Array<[string, string, number]> = [
  ['la × 223', 'la '.repeat(223).trim(), 17],
  ['a repeated sentence', 'The quick brown fox jumps over the lazy dog. '.repeat(40), 68],
  ['one byte', 'a', 9],
  ['three bytes', 'abc', 11],
  ['random over 9 letters', lcg(1, 2000, 'abcdefgh '), 993],
  ['alternating', lcg(2, 5000, 'ab'), 30],
  ['Cyrillic and CJK', lcg(3, 300, 'Привет мир 世界 '), 225],
  ['16 000 bytes', lcg(4, 16000, 'abcdefghijklmnopqrstuvwxyz0123456789 '), 10808],
  ['100 000 bytes (several deflate blocks)', lcg(5, 100_000, 'abc def ghij '), 49073],
];

describe('compressionRatio counts bytes as stock zlib does (level 6)', () => {
  it.each(CASES)('%s', (_name, text, expected) => {
    expect(compressionRatio(text)).toBe(Buffer.byteLength(text, 'utf8') / expected);
  });

  it('is 0 for no text', () => {
    expect(compressionRatio('')).toBe(0);
  });
});
