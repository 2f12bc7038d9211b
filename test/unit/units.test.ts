import { describe, expect, it } from 'vitest';
import { formatBytes, parseByteSize, parseDuration } from '../../src/core/units.js';

describe('units', () => {
  it('parses keep-alive durations like Ollama', () => {
    expect(parseDuration('5m')).toBe(300_000);
    expect(parseDuration('1h30m')).toBe(5_400_000);
    expect(parseDuration('250ms')).toBe(250);
    expect(parseDuration('30d')).toBe(30 * 86_400_000);
    expect(parseDuration('1d12h')).toBe(36 * 3_600_000);
    expect(parseDuration('30')).toBe(30_000);
    expect(parseDuration(2)).toBe(2000);
    expect(parseDuration('-1')).toBe(-1);
    expect(parseDuration(-5)).toBe(-1);
    expect(() => parseDuration('5 minutes')).toThrow(/invalid duration/);
    expect(() => parseDuration('m5')).toThrow(/invalid duration/);
  });

  it('parses byte sizes in binary units', () => {
    expect(parseByteSize('512mb')).toBe(512 * 1024 ** 2);
    expect(parseByteSize('8GB')).toBe(8 * 1024 ** 3);
    expect(parseByteSize('1.5g')).toBe(1.5 * 1024 ** 3);
    expect(parseByteSize('2GiB')).toBe(2 * 1024 ** 3);
    expect(parseByteSize('100')).toBe(100);
    expect(() => parseByteSize('lots')).toThrow(/invalid size/);
  });

  it('formats byte counts', () => {
    expect(formatBytes(500)).toBe('500 B');
    expect(formatBytes(1536)).toBe('1.5 KB');
    expect(formatBytes(639 * 1024 ** 2)).toBe('639 MB');
  });
});
