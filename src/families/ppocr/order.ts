import type { Quad } from '../../image/types.js';

/**
 * Reading order: lines grouped into rows (boxes whose vertical centres are
 * within half a line height of each other), rows top to bottom, boxes in a
 * row left to right. The detector sometimes splits one printed line at a wide
 * gap; the row grouping lets the page text join those pieces with a space.
 */
export function readingRows<T extends { quad: Quad }>(items: readonly T[]): T[][] {
  const info = items.map((item) => {
    const ys = item.quad.map((p) => p[1]);
    const top = Math.min(...ys);
    const bottom = Math.max(...ys);
    return { item, cy: (top + bottom) / 2, h: bottom - top, left: Math.min(...item.quad.map((p) => p[0])) };
  });
  info.sort((a, b) => a.cy - b.cy || a.left - b.left);
  const rows: (typeof info)[] = [];
  for (const box of info) {
    const row = rows[rows.length - 1];
    const anchor = row?.[0];
    if (row && anchor && Math.abs(box.cy - anchor.cy) < 0.5 * Math.min(box.h, anchor.h)) row.push(box);
    else rows.push([box]);
  }
  return rows.map((row) => row.sort((a, b) => a.left - b.left).map((b) => b.item));
}
