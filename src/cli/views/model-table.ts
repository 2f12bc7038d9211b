import type { ModelKind } from '../../core/catalog.js';
import type { ModelSource } from '../../core/store.js';
import { formatBytes } from '../../core/units.js';

/** One row of `lserve list`; also the `--json` object (snake_case for scripts). */
export interface ModelRow {
  id: string;
  kind: ModelKind;
  backend: string;
  source: ModelSource;
  /** Installed size, or the catalog's total when every file lists a size, else the catalog's estimate; null when unknown. */
  size_bytes: number | null;
  /** False when size_bytes is an estimate (shown with "~"). */
  size_exact: boolean;
  installed: boolean;
  status: 'installed' | 'bundled' | 'not pulled' | 'partial';
  /** Bytes already downloaded by an interrupted pull. */
  partial_bytes?: number;
  /** The model's directory (or the file itself for a local model); null when not installed. */
  path: string | null;
  /** Absolute path of every file, keyed by role. */
  files: Record<string, string>;
  aliases: string[];
  description: string;
  /** The model's licence as its catalog entry names it (e.g. apache-2.0, mit, sai-nc-community); 'unknown' for a user's own file. */
  license: string;
}

export const EMPTY_HINT = 'No models installed. Run `lserve list --all` to see the catalog, then `lserve pull <id>`.';

export const HEADER = ['ID', 'KIND', 'BACKEND', 'SIZE', 'SOURCE', 'LICENSE', 'STATUS'] as const;

export function rowCells(row: ModelRow): string[] {
  const size = row.size_bytes === null ? '-' : `${row.size_exact ? '' : '~'}${formatBytes(row.size_bytes)}`;
  const status = row.status === 'partial' ? `partial (${formatBytes(row.partial_bytes ?? 0)})` : row.status;
  return [row.id, row.kind, row.backend, size, row.source, row.license, status];
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
