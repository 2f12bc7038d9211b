import { lstat, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Catalog, CatalogEntry, ModelKind } from './catalog.js';
import { StoreError } from './errors.js';

/**
 * Which catalog layout a user's model directory has (`lserve pull ./dir
 * --kind K`): an export cloned from a hub, laid out as the catalog's entries
 * of that kind are. Each catalog entry of the kind (and backend, when given)
 * whose files are repo paths is a candidate; one whose every file exists in
 * the directory matches, and its roles map to those files.
 */

/** A regular file of the directory, by its real path. */
export interface MatchedFile {
  path: string;
  size: number;
}

/**
 * Catalog entries whose layout a model directory can have: the kind's
 * multi-file entries (of `backend`, when given) whose files are all repo
 * paths, ONNX exports first. Single-file models (a GGUF) register as files,
 * and so does a GGUF chat model with its projector (role mmproj: found
 * beside the model file, or named with --mmproj), whatever its files are called.
 */
export function directoryLayouts(catalog: Catalog, kind: ModelKind, backend?: string): CatalogEntry[] {
  const layouts = catalog.entries.filter((e) => {
    const files = Object.values(e.files);
    const exported = files.length > 1 && e.files.mmproj === undefined;
    return e.kind === kind && (backend === undefined || e.backend === backend) && exported && files.every((f) => f.repo !== undefined && f.path !== undefined);
  });
  return [...layouts.filter((e) => e.backend === 'onnx'), ...layouts.filter((e) => e.backend !== 'onnx')];
}

/**
 * The catalog layout `dir` (whose real path is `root`) has, with its files by
 * role. Several families share a layout (every onnx-community Whisper
 * export): the one that uses the most of the directory's files wins. When
 * none matches, the error names the closest layout and what it misses.
 */
export async function matchDirectory(
  catalog: Catalog,
  dir: string,
  root: string,
  kind: ModelKind,
  backend?: string,
): Promise<{ layout: CatalogEntry; files: Record<string, MatchedFile> }> {
  const layouts = directoryLayouts(catalog, kind, backend);
  if (!layouts.length) {
    const what = `${kind}${backend ? ` (backend ${backend})` : ''}`;
    throw new StoreError(
      `No catalog model of kind ${what} is a multi-file export, so lserve knows no directory layout for it; register the model file itself (e.g. a .gguf) instead`,
      'no_layout',
    );
  }
  let closest: { layout: CatalogEntry; missing: string[] } | undefined;
  let best: { layout: CatalogEntry; files: Record<string, MatchedFile> } | undefined;
  for (const layout of layouts) {
    const found = await matchLayout(dir, root, layout);
    if ('files' in found) {
      if (!best || Object.keys(found.files).length > Object.keys(best.files).length) best = { layout, files: found.files };
      continue;
    }
    if (!closest || found.missing.length < closest.missing.length) closest = { layout, missing: found.missing };
  }
  if (best) return best;
  const tried = layouts.map((l) => l.id).join(', ');
  throw new StoreError(
    `${dir} does not have the layout of any ${kind} model in the catalog (tried ${tried}). ` +
      `Closest: ${closest!.layout.id}${repoOf(closest!.layout)}, which needs ${closest!.missing.join(', ')} (missing)`,
    'layout_mismatch',
  );
}

function repoOf(entry: CatalogEntry): string {
  const repos = [...new Set(Object.values(entry.files).map((f) => f.repo).filter(Boolean))];
  return repos.length ? ` (${repos.join(', ')})` : '';
}

/**
 * Looks for `layout`'s files in `dir` (`root` is its real path): every role's
 * repo path as a regular file inside the directory (optional ones when
 * present), or the paths that are missing. A path that leaves the directory,
 * itself or through a symlink, is an error rather than a mismatch: it is
 * never registered.
 */
async function matchLayout(dir: string, root: string, layout: CatalogEntry): Promise<{ files: Record<string, MatchedFile> } | { missing: string[] }> {
  const files: Record<string, MatchedFile> = {};
  const missing: string[] = [];
  for (const [role, spec] of Object.entries(layout.files)) {
    const relative = spec.path!;
    const candidate = path.resolve(dir, relative);
    if (path.isAbsolute(relative) || !isInside(path.resolve(dir), candidate)) {
      throw new StoreError(`${layout.id}'s file '${relative}' lies outside the directory; refusing to register it`, 'path_outside');
    }
    try {
      await lstat(candidate);
    } catch {
      // A file the layout can do without (FileSpec.optional) is simply not registered.
      if (!spec.optional) missing.push(relative);
      continue;
    }
    let real: string;
    try {
      real = await realpath(candidate);
    } catch {
      // A dangling symlink: there is no file to use.
      missing.push(relative);
      continue;
    }
    if (!isInside(root, real)) {
      throw new StoreError(
        `${path.join(dir, relative)} resolves to ${real}, outside the directory; refusing to register a file outside it ` +
          '(copy the files into the directory, e.g. download with --local-dir instead of into a cache of symlinks)',
        'path_outside',
      );
    }
    const info = await stat(real);
    if (!info.isFile()) {
      missing.push(relative);
      continue;
    }
    files[role] = { path: real, size: info.size };
  }
  return missing.length ? { missing } : { files };
}

function isInside(dir: string, file: string): boolean {
  const relative = path.relative(dir, file);
  return relative !== '' && relative !== '..' && !relative.startsWith(`..${path.sep}`) && !path.isAbsolute(relative);
}
