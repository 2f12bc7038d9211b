import type { ListingRow } from '../../core/listing.js';
import { formatBytes } from '../../core/units.js';

/** One row of `lserve list`; also the `--json` object (snake_case for scripts). */
export interface ModelRow extends ListingRow {
  /** The model's directory (or the file itself for a local model); null when not installed. */
  path: string | null;
  /** Absolute path of every file, keyed by role. */
  files: Record<string, string>;
}

export const EMPTY_HINT = 'No models installed. Run `lserve list --all` to see the catalog, then `lserve pull <id>`.';

export const HEADER = ['ID', 'KIND', 'BACKEND', 'SIZE', 'SOURCE', 'LICENSE', 'STATUS'] as const;

export function rowCells(row: ModelRow): string[] {
  const size = row.size_bytes === null ? '-' : `${row.size_exact ? '' : '~'}${formatBytes(row.size_bytes)}`;
  const status = row.status === 'partial' ? `partial (${formatBytes(row.partial_bytes ?? 0)})` : row.status;
  // A chat model that takes images or audio says so beside its kind: chat+image, chat+audio, chat+image+audio.
  const kind = [row.kind, ...(row.input_modalities ?? []).filter((m) => m !== 'text')].join('+');
  return [row.id, kind, row.backend, size, row.source, row.license, status];
}

export function columnWidths(cells: readonly (readonly string[])[]): number[] {
  return HEADER.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
}

/** Aligned plain text for pipes and scripts that do not want JSON. */
export function plainTable(rows: ModelRow[]): string {
  const cells = [[...HEADER], ...rows.map(rowCells)];
  const widths = columnWidths(cells);
  const table = cells.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n') + '\n';
  return rows.length ? table : `${table}${EMPTY_HINT}\n`;
}
