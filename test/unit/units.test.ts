import { describe, expect, it } from 'vitest';
import { formatBytes, parseByteSize, parseDuration } from '../../src/core/units.js';
import { formatBytes as uiFormatBytes } from '../../src/ui/units.js';

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

  it('parses byte sizes in decimal units, and in binary ones when they say so', () => {
    expect(parseByteSize('512mb')).toBe(512_000_000);
    expect(parseByteSize('8GB')).toBe(8_000_000_000);
    expect(parseByteSize('1.5g')).toBe(1_500_000_000);
    expect(parseByteSize('64 kB')).toBe(64_000);
    expect(parseByteSize('2GiB')).toBe(2 * 1024 ** 3);
    expect(parseByteSize('256MiB')).toBe(256 * 1024 ** 2);
    expect(parseByteSize('100')).toBe(100);
    expect(() => parseByteSize('lots')).toThrow(/invalid size/);
    expect(() => parseByteSize('5xb')).toThrow(/invalid size/);
  });

  it('formats byte counts in decimal units, as they are parsed', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(500)).toBe('500 B');
    expect(formatBytes(1536)).toBe('1.5 kB');
    expect(formatBytes(400_000)).toBe('400 kB');
    expect(formatBytes(639_000_000)).toBe('639 MB');
    expect(formatBytes(4_200_000_000)).toBe('4.2 GB');
    expect(formatBytes(99_960)).toBe('100 kB');
    expect(formatBytes(999_960)).toBe('1.0 MB');
    expect(formatBytes(123.4)).toBe('123 B');
    for (const typed of ['512mb', '8gb', '64kb', '1.5gb']) expect(parseByteSize(formatBytes(parseByteSize(typed)).replace(' ', ''))).toBe(parseByteSize(typed));
  });

  it('the playground formats sizes exactly as the CLI does', () => {
    for (const bytes of [0, 7, 999, 1000, 1536, 99_960, 400_000, 999_960, 1_000_000, 639_000_000, 4_200_000_000, 3e12, 5e15]) expect(uiFormatBytes(bytes)).toBe(formatBytes(bytes));
    expect(uiFormatBytes(null)).toBe('—');
  });
});
