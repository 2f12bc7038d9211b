import path from 'node:path';
import os from 'node:os';
import type { CatalogEntry, FileSpec } from './catalog.js';

/**
 * How the store lays out its home folder: `$LSERVE_HOME/models/<id>/` holds a
 * model's files under local names derived from the catalog, and a
 * `manifest.json` written last.
 */

export const MANIFEST = 'manifest.json';

export function defaultHome(): string {
  return process.env.LSERVE_HOME || path.join(os.homedir(), '.lserve');
}

/** The characters of a model id: it names a folder, so no separators (the store refuses `..` as well). */
export const STORE_ID = /^[a-z0-9][a-z0-9._-]*$/i;

/** Local file name for a catalog file: the basename of its repo path or URL. */
export function fileNameOf(spec: FileSpec, role: string): string {
  const source = spec.path ?? (spec.url ? new URL(spec.url).pathname : undefined);
  const base = source ? path.posix.basename(source) : '';
  return base && base !== '.' && base !== '..' ? base : role;
}

/**
 * Local names of a model's files, keyed by role. Basenames when they are
 * distinct (the common case); when two files share a basename (e.g. ONNX
 * exports with `unet/model.onnx` and `vae_decoder/model.onnx`), or the entry
 * says `keep_paths` (a voice's espeak-ng-data tree), every file keeps its
 * repo-relative path instead, so files stay where the runtime looks for them.
 */
export function localFileNames(entry: CatalogEntry): Record<string, string> {
  const roles = Object.entries(entry.files);
  const flat = roles.map(([role, spec]) => fileNameOf(spec, role));
  const nested = entry.keep_paths === true || new Set(flat).size !== flat.length;
  const names: Record<string, string> = {};
  roles.forEach(([role, spec], i) => {
    names[role] = nested ? relativePathOf(spec, role) : flat[i]!;
  });
  return names;
}

function relativePathOf(spec: FileSpec, role: string): string {
  const parts = (spec.path ?? `${role}/${fileNameOf(spec, role)}`).split('/').filter((p) => p && p !== '.' && p !== '..');
  return parts.length ? parts.join('/') : role;
}

/** A user model's id from its file name: lowercase, store-safe. */
export function idFromFileName(file: string): string {
  const stem = path.basename(file).replace(/\.(gguf|onnx|bin)$/i, '');
  return stem.toLowerCase().replace(/[^a-z0-9._-]+/g, '-').replace(/^[^a-z0-9]+/, '') || 'model';
}
