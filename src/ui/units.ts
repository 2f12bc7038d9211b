/** Units the playground shows, with no DOM (the unit tests run it under Node). */

/** Bytes in decimal units (500 B, 1.5 kB, 639 MB): the same as the CLI's (src/core/units.ts formatBytes). */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined) return '—';
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = bytes;
  let unit = 0;
  while (Math.abs(value) >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  if (unit > 0 && unit < units.length - 1 && Math.abs(value) >= 999.5) {
    value /= 1000;
    unit++;
  }
  return `${unit === 0 ? Math.round(value) : Math.abs(value) >= 99.95 ? value.toFixed(0) : value.toFixed(1)} ${units[unit]}`;
}
