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

const SIZE_UNITS: Record<string, number> = { '': 1, b: 1, k: 1024, kb: 1024, m: 1024 ** 2, mb: 1024 ** 2, g: 1024 ** 3, gb: 1024 ** 3, t: 1024 ** 4, tb: 1024 ** 4 };

/** Byte sizes such as "512mb", "8GB", "1.5g" or a bare number of bytes (binary units). */
export function parseByteSize(value: string): number {
  const match = /^(\d+(?:\.\d+)?)\s*([a-z]*)$/i.exec(value.trim());
  const unit = match ? SIZE_UNITS[match[2]!.toLowerCase().replace(/ib$/, 'b')] : undefined;
  if (!match || unit === undefined) throw new Error(`invalid size: '${value}' (use e.g. 512mb, 8gb)`);
  return Math.round(Number(match[1]) * unit);
}

export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KB', 'MB', 'GB', 'TB'];
  let value = bytes / 1024;
  let i = 0;
  while (value >= 1024 && i < units.length - 1) {
    value /= 1024;
    i++;
  }
  return `${value >= 100 ? value.toFixed(0) : value.toFixed(1)} ${units[i]}`;
}
