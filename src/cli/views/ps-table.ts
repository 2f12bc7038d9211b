import type { RunningModel } from '../../api/ps.js';
import { formatBytes } from '../../core/units.js';

/** The `lserve ps` table: the running server's loaded models, aligned like `lserve list`'s plain table. */

export const PS_HEADER = ['ID', 'KIND', 'PID', 'MEMORY', 'ACTIVE', 'QUEUED', 'UNTIL'] as const;

export const PS_EMPTY_HINT = 'No models loaded. A model loads with the first request that names it.';

/** PID: the model's runner process ('-' in the server's); MEMORY: that process's resident memory, else the runtime's estimate. */
export function psCells(model: RunningModel, now: number): string[] {
  return [model.id, model.kind, model.pid === null ? '-' : String(model.pid), formatBytes(model.rss_bytes ?? model.memory_bytes), String(model.active_requests), String(model.queued), until(model, now)];
}

/** When the model unloads: "4 minutes from now"; "in use" while requests hold it; "forever" when kept loaded (keep-alive -1). */
export function until(model: RunningModel, now: number): string {
  if (model.expires_at === null) return model.active_requests > 0 || model.queued > 0 ? 'in use' : 'forever';
  const seconds = Math.max(0, Math.round((Date.parse(model.expires_at) - now) / 1000));
  const [value, unit] =
    seconds < 60 ? [seconds, 'second'] : seconds < 3600 ? [Math.round(seconds / 60), 'minute'] : seconds < 48 * 3600 ? [Math.round(seconds / 3600), 'hour'] : [Math.round(seconds / 86_400), 'day'];
  return `${value} ${unit}${value === 1 ? '' : 's'} from now`;
}

export function psTable(models: readonly RunningModel[], now = Date.now()): string {
  const cells = [[...PS_HEADER], ...models.map((m) => psCells(m, now))];
  const widths = PS_HEADER.map((_, i) => Math.max(...cells.map((r) => r[i]!.length)));
  const table = cells.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')).join('\n') + '\n';
  return models.length ? table : `${table}${PS_EMPTY_HINT}\n`;
}
