import type { ListingRow } from '../../core/listing.js';
import { formatBytes } from '../../core/units.js';

/** One row of `lserve list`; also the `--json` object (snake_case for scripts). */
export interface ModelRow extends ListingRow {
  /** The model's directory (or the file itself for a local model); null when not installed. */
  path: string | null;
  /** Absolute path of every file, keyed by role. */
  files: Record<string, string>;
  /** The default of its kind: where requests that name no model of the kind go (core/model-choice.ts). */
  default?: true;
}

/** The marker of a kind's default beside its id, and the line that explains it. */
export const DEFAULT_MARK = ' *';
export const DEFAULT_NOTE = '* the default of its kind: requests that name no model go there (--default-model KIND=MODEL to choose)';

export const EMPTY_HINT = 'No models installed. Run `lserve list --all` to see the catalog, then `lserve pull <id>`.';

export const HEADER = ['ID', 'KIND', 'BACKEND', 'SIZE', 'SOURCE', 'LICENSE', 'STATUS'] as const;

export function rowCells(row: ModelRow): string[] {
  const size = row.size_bytes === null ? '-' : `${row.size_exact ? '' : '~'}${formatBytes(row.size_bytes)}`;
  const status = row.status === 'partial' ? `partial (${formatBytes(row.partial_bytes ?? 0)})` : row.status;
  // A chat model that takes images or audio says so beside its kind: chat+image, chat+audio, chat+image+audio.
  const kind = [row.kind, ...(row.input_modalities ?? []).filter((m) => m !== 'text')].join('+');
  return [`${row.id}${row.default ? DEFAULT_MARK : ''}`, kind, row.backend, size, row.source, row.license, status];
}

export function columnWidths(cells: readonly (readonly string[])[]): number[] {
  return HEADER.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
}

/** Aligned plain text for pipes and scripts that do not want JSON. */
export function plainTable(rows: ModelRow[]): string {
  const cells = [[...HEADER], ...rows.map(rowCells)];
  const widths = columnWidths(cells);
  const table = cells.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n') + '\n';
  if (!rows.length) return `${table}${EMPTY_HINT}\n`;
  return rows.some((row) => row.default) ? `${table}${DEFAULT_NOTE}\n` : table;
}
