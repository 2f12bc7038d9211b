import { Box, Text, renderToString } from 'ink';
import { DEFAULT_NOTE, EMPTY_HINT, HEADER, columnWidths, rowCells, type ModelRow } from './model-table.js';

/** The `lserve list` table on a terminal (ink); plain text is used when piped. */

const STATUS_COLORS: Record<ModelRow['status'], string> = {
  installed: 'green',
  bundled: 'cyan',
  partial: 'yellow',
  'not pulled': 'gray',
};

export function ModelTable({ rows, color }: { rows: ModelRow[]; color: boolean }) {
  const cells = rows.map(rowCells);
  const widths = columnWidths([[...HEADER], ...cells]);
  return (
    <Box flexDirection="column">
      <Box>
        {HEADER.map((title, i) => (
          <Box key={title} width={widths[i]! + 2} flexShrink={0}>
            <Text bold={color}>{title}</Text>
          </Box>
        ))}
      </Box>
      {rows.map((row, r) => (
        <Box key={row.id}>
          {cells[r]!.map((cell, i) => (
            <Box key={HEADER[i]} width={widths[i]! + 2} flexShrink={0}>
              <Text color={color && i === HEADER.length - 1 ? STATUS_COLORS[row.status] : undefined} dimColor={color && !row.installed && i < HEADER.length - 1}>
                {cell}
              </Text>
            </Box>
          ))}
        </Box>
      ))}
      {rows.length === 0 ? <Text>{EMPTY_HINT}</Text> : null}
      {rows.some((row) => row.default) ? <Text dimColor={color}>{DEFAULT_NOTE}</Text> : null}
    </Box>
  );
}

/**
 * The table as terminal text. A one-shot string rather than a live render():
 * a live ink app clears the screen when its output is taller than the
 * terminal, which would wipe the user's scrollback for a long catalog.
 */
export function modelTableText(rows: ModelRow[], options: { color: boolean; columns: number | undefined }): string {
  const widths = columnWidths([[...HEADER], ...rows.map(rowCells)]);
  const needed = widths.reduce((sum, w) => sum + w + 2, 0);
  return `${renderToString(<ModelTable rows={rows} color={options.color} />, { columns: Math.max(options.columns ?? 80, needed, EMPTY_HINT.length, DEFAULT_NOTE.length) })}\n`;
}
