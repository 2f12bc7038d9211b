/** Parsing of the human units users type in flags and request fields. */

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Durations as Ollama accepts keep-alives: "5m", "30s", "1h30m", a bare
 * number of seconds, or a negative value for "forever"; and days ("30d"),
 * for retention. Returns milliseconds (negative = forever).
 */
export function parseDuration(value: string | number): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new Error(`invalid duration: ${value}`);
    return value < 0 ? -1 : Math.round(value * 1000);
  }
  const text = value.trim();
  if (/^-?\d+(\.\d+)?$/.test(text)) return parseDuration(Number(text));
  if (text.startsWith('-')) return -1;
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) throw new Error(`invalid duration: '${value}' (use e.g. 30s, 5m, 1h)`);
  return Math.round(parts.reduce((sum, p) => sum + Number(p[1]) * DURATION_UNITS[p[2]!]!, 0));
}

/**
 * One size unit everywhere (CLI, playground, logs, messages, and the sizes
 * users type): decimal SI, as Hugging Face, Ollama and npm show them. kB, MB,
 * GB and TB are powers of 1000; KiB, MiB, GiB and TiB, when typed, powers of
 * 1024.
 */
const SIZE_UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1e3,
  kb: 1e3,
  m: 1e6,
  mb: 1e6,
  g: 1e9,
  gb: 1e9,
  t: 1e12,
  tb: 1e12,
  ki: 1024,
  kib: 1024,
  mi: 1024 ** 2,
  mib: 1024 ** 2,
  gi: 1024 ** 3,
  gib: 1024 ** 3,
  ti: 1024 ** 4,
  tib: 1024 ** 4,
};

/** Byte sizes such as "512mb", "8GB", "1.5g" (decimal), "2GiB" (binary) or a bare number of bytes. */
export function parseByteSize(value: string): number {
  const match = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(value.trim());
  const unit = match ? SIZE_UNITS[match[2]!.toLowerCase()] : undefined;
  if (!match || unit === undefined) throw new Error(`invalid size: '${value}' (use e.g. 512mb, 8gb)`);
  return Math.round(Number(match[1]) * unit);
}

const BYTE_UNITS = ['B', 'kB', 'MB', 'GB', 'TB'];

/** Bytes in decimal units: 500 B, 1.5 kB, 639 MB, 4.2 GB (three significant figures at most). The playground's formatBytes is the same. */
export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1000 && unit < BYTE_UNITS.length - 1) {
    value /= 1000;
    unit++;
  }
  // 999.96 kB rounds to "1000 kB": say 1.0 MB.
  if (unit > 0 && unit < BYTE_UNITS.length - 1 && Math.abs(value) >= 999.5) {
    value /= 1000;
    unit++;
  }
  return `${unit === 0 ? Math.round(value) : Math.abs(value) >= 99.95 ? value.toFixed(0) : value.toFixed(1)} ${BYTE_UNITS[unit]}`;
}
