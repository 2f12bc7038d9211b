import { createHash } from 'node:crypto';
import type { CatalogEntry } from '../../core/catalog.js';
import type { PullEvent } from '../../core/download.js';
import { localFileNames } from '../../core/store-paths.js';
import type { OllamaProgress } from './models.js';

/**
 * A pull's progress (core/download.ts PullEvent) as Ollama's status lines:
 * `pulling manifest`; per file `pulling <12 hex>` with its `digest`,
 * `total` and `completed` (a layer, to Ollama's clients); then `verifying
 * sha256 digest`, `writing manifest`, `success` (the route sends those
 * once the pull returned: every file was verified, and the manifest
 * written, by then).
 *
 * A file's digest is its sha256 where the catalog records it; otherwise the
 * sha256 of `<model id>/<file name>`, an identifier stable across pulls
 * (the bytes' own hash is known only when the file is done, and a client
 * tracks a layer's progress by one digest from start to end).
 */

/** Progress lines per file go out at most this often (the download core reports every chunk). */
const PROGRESS_INTERVAL_MS = 150;

export interface PullProgress {
  /** Lines for a pull event (none when throttled). */
  onEvent(event: PullEvent): OllamaProgress[];
  /** A line per file, all done: what a pull of a model already installed reports. */
  complete(sizes: Record<string, number>): OllamaProgress[];
}

export function pullProgress(entry: CatalogEntry, now: () => number = Date.now): PullProgress {
  const names = localFileNames(entry);
  const byName = new Map(Object.entries(names).map(([role, name]) => [name, role]));
  const digests = new Map(
    Object.entries(entry.files).map(([role, spec]) => [role, `sha256:${spec.sha256 ?? createHash('sha256').update(`${entry.id}/${names[role]}`).digest('hex')}`]),
  );
  const totals = new Map<string, number>(Object.entries(entry.files).flatMap(([role, spec]) => (spec.size ? [[role, spec.size] as [string, number]] : [])));
  const lastSent = new Map<string, number>();
  const line = (role: string, completed: number, total: number | undefined): OllamaProgress => {
    const digest = digests.get(role)!;
    // Go's omitempty: a zero total or completed is left out, as Ollama sends it.
    return { status: `pulling ${digest.slice(7, 19)}`, digest, ...(total ? { total } : {}), ...(completed ? { completed } : {}) };
  };
  return {
    onEvent(event) {
      if (event.type === 'waiting') return [{ status: `waiting for another pull of ${event.id} (process ${event.pid})` }];
      const role = byName.get(event.file) ?? event.role;
      if (!digests.has(role)) return [];
      switch (event.type) {
        case 'file-start':
          if (event.totalBytes !== undefined) totals.set(role, event.totalBytes);
          lastSent.set(role, now());
          return [line(role, event.resumedFrom, totals.get(role))];
        case 'progress': {
          if (event.totalBytes !== undefined) totals.set(role, event.totalBytes);
          const total = totals.get(role);
          if (now() - (lastSent.get(role) ?? 0) < PROGRESS_INTERVAL_MS && event.receivedBytes !== total) return [];
          lastSent.set(role, now());
          return [line(role, event.receivedBytes, total)];
        }
        case 'retry':
          return [{ status: `retrying ${event.file} (attempt ${event.attempt}): ${event.message}` }];
        case 'file-done':
          totals.set(role, event.sizeBytes);
          return [line(role, event.sizeBytes, event.sizeBytes)];
      }
    },
    complete(sizes) {
      return Object.keys(entry.files).map((role) => line(role, sizes[role] ?? totals.get(role) ?? 0, sizes[role] ?? totals.get(role)));
    },
  };
}
