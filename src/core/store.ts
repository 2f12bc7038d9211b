import { lstat, mkdir, readdir, readFile, realpath, rm, stat } from 'node:fs/promises';
import { writeFileWhole } from './write-whole.js';
import { existsSync, statSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import path from 'node:path';
import os from 'node:os';
import { z } from 'zod';
import { Catalog, MODEL_KINDS, isBundled, type CatalogEntry, type FileSpec, type ModelKind } from './catalog.js';
import { InvalidRequestError, StoreError } from './errors.js';
import { pullLockHolder } from './download-lock.js';

/**
 * The local model store: `$LSERVE_HOME/models/<id>/` holds a model's files and
 * a `manifest.json` written last. A directory without a manifest is not a
 * model, so an interrupted pull is never listed as installed. Downloads stage
 * under `models/.partial/<id>/` and are renamed into place when verified
 * (see download.ts).
 */

export type ModelSource = 'bundled' | 'catalog' | 'local' | 'url';

export interface InstalledModel {
  id: string;
  entry: CatalogEntry;
  source: ModelSource;
  /** Absolute path of every file, keyed by role. */
  files: Record<string, string>;
  sizeBytes: number;
  /** ISO time of installation; absent for bundled models. */
  installedAt?: string;
}

/** What a user says about their own file or URL at `lserve pull`. */
export interface UserModelOptions {
  kind: ModelKind;
  id?: string;
  backend?: string;
  /** Tokens per context for a text model (`--ctx-size`); stored as the entry's defaults.context_size. */
  contextSize?: number;
}

const manifestSchema = z.object({
  id: z.string(),
  source: z.enum(['catalog', 'local', 'url']),
  installedAt: z.string(),
  /** Present for models that are not in the catalog (a user's own file). */
  entry: z.unknown().optional(),
  files: z.record(
    z.string(),
    z.object({ name: z.string(), size: z.number(), sha256: z.string().optional(), path: z.string().optional() }),
  ),
});
export type Manifest = z.infer<typeof manifestSchema>;

export const MANIFEST = 'manifest.json';

export function defaultHome(): string {
  return process.env.LSERVE_HOME || path.join(os.homedir(), '.lserve');
}

/** Local file name for a catalog file: the basename of its repo path or URL. */
export function fileNameOf(spec: FileSpec, role: string): string {
  const source = spec.path ?? (spec.url ? new URL(spec.url).pathname : undefined);
  const base = source ? path.posix.basename(source) : '';
  return base && base !== '.' && base !== '..' ? base : role;
}

export class ModelStore {
  readonly modelsDir: string;

  constructor(
    readonly home: string,
    readonly catalog: Catalog,
  ) {
    this.modelsDir = path.join(home, 'models');
  }

  /** Directory of an installed model; ids are validated so they cannot escape the store. */
  modelDir(id: string): string {
    if (!/^[a-z0-9][a-z0-9._-]*$/i.test(id) || id.includes('..')) {
      throw new InvalidRequestError(`'${id}' is not a valid model id`, { param: 'model' });
    }
    return path.join(this.modelsDir, id);
  }

  partialDir(id: string): string {
    return path.join(this.modelsDir, '.partial', path.basename(this.modelDir(id)));
  }

  /** Bundled models whose package is installed, then pulled models, sorted by id. */
  async list(): Promise<InstalledModel[]> {
    const found = new Map<string, InstalledModel>();
    for (const entry of this.catalog.entries) {
      if (!isBundled(entry)) continue;
      const model = bundledModel(entry);
      if (model) found.set(entry.id, model);
    }
    let names: string[] = [];
    try {
      names = await readdir(this.modelsDir);
    } catch {
      // no store yet: only bundled models
    }
    for (const name of names) {
      if (name.startsWith('.')) continue;
      const model = await this.readInstalled(name);
      if (model) found.set(model.id, model);
    }
    return [...found.values()].sort((a, b) => a.id.localeCompare(b.id));
  }

  /** An installed or bundled model by id or alias, or undefined. */
  async resolve(name: string): Promise<InstalledModel | undefined> {
    const entry = this.catalog.get(name);
    const id = entry?.id ?? name;
    if (entry && isBundled(entry)) return bundledModel(entry);
    if (!/^[a-z0-9][a-z0-9._-]*$/i.test(id)) return undefined;
    return this.readInstalled(id);
  }

  private async readInstalled(id: string): Promise<InstalledModel | undefined> {
    const dir = this.modelDir(id);
    let manifest: Manifest;
    try {
      manifest = manifestSchema.parse(JSON.parse(await readFile(path.join(dir, MANIFEST), 'utf8')));
    } catch {
      return undefined;
    }
    const entry = manifest.entry ? Catalog.parse({ version: 1, models: [manifest.entry] }, `${dir}/${MANIFEST}`).entries[0] : this.catalog.get(manifest.id);
    if (!entry) return undefined;
    const files: Record<string, string> = {};
    let sizeBytes = 0;
    for (const [role, file] of Object.entries(manifest.files)) {
      files[role] = file.path ?? path.join(dir, file.name);
      sizeBytes += file.size;
    }
    return { id: manifest.id, entry, source: manifest.source, files, sizeBytes, installedAt: manifest.installedAt };
  }

  /**
   * Registers a user's own model file (`lserve pull ./my.gguf --kind chat`).
   * The file is referenced in place, not copied: model files are large.
   */
  async registerLocal(file: string, options: UserModelOptions): Promise<InstalledModel> {
    const absolute = path.resolve(file);
    let info;
    try {
      info = await stat(absolute);
    } catch {
      throw new StoreError(`No such file: ${absolute}`, 'file_not_found');
    }
    if (!info.isFile()) throw new StoreError(`Not a regular file: ${absolute}`, 'not_a_file');
    const entry = this.userEntry({
      ...options,
      id: options.id ?? idFromFileName(absolute),
      description: `Local file ${absolute}`,
      file: { url: `file://${absolute}` },
    });
    const manifest: Manifest = {
      id: entry.id,
      source: 'local',
      installedAt: new Date().toISOString(),
      entry,
      files: { model: { name: path.basename(absolute), size: info.size, path: absolute } },
    };
    await this.writeManifest(entry.id, manifest);
    return (await this.readInstalled(entry.id))!;
  }

  /**
   * The catalog entry lserve synthesizes for a user's own model (a local file
   * or a URL); it is stored in the model's manifest. Ids of catalog models are
   * refused so a user's file never shadows a catalog model.
   */
  userEntry(
    options: UserModelOptions & {
      id: string;
      description: string;
      file: FileSpec;
      /** Every file by role, for a multi-file model (a directory); `file` is then the first. */
      files?: Record<string, FileSpec>;
      defaults?: Record<string, unknown>;
    },
  ): CatalogEntry {
    if (!MODEL_KINDS.includes(options.kind)) throw new StoreError(`Unknown kind '${options.kind}' (use one of ${MODEL_KINDS.join(', ')})`, 'invalid_kind');
    this.modelDir(options.id);
    const taken = this.catalog.get(options.id);
    if (taken) throw new StoreError(`'${options.id}' is the name of catalog model '${taken.id}'; choose another id with --id`, 'id_taken');
    const name = fileNameOf(options.file, 'model');
    return {
      id: options.id,
      kind: options.kind,
      backend: options.backend ?? (name.toLowerCase().endsWith('.gguf') ? 'llama' : 'onnx'),
      description: options.description,
      aliases: [],
      owned_by: 'user',
      license: 'unknown',
      files: options.files ?? { model: options.file },
      defaults: { ...options.defaults, ...(options.contextSize === undefined ? {} : { context_size: options.contextSize }) },
    };
  }

  /**
   * Registers a model directory in place (`lserve pull ./whisper-base --kind asr
   * --id my-whisper`): an export cloned from a hub, laid out as the catalog's
   * entries of that kind are. Each catalog entry of the kind (and backend, when
   * given) whose files are repo paths is a candidate layout; the first whose
   * every file exists in the directory wins, and its roles map to those files.
   * The entry's backend and defaults carry over, so the model loads exactly as
   * the catalog model would. Files are referenced, not copied; a file that
   * resolves outside the directory (`..` in a path, a symlink pointing out) is
   * refused.
   */
  async registerDirectory(dir: string, options: UserModelOptions): Promise<{ model: InstalledModel; layout: CatalogEntry }> {
    const absolute = path.resolve(dir);
    let root: string;
    try {
      if (!(await stat(absolute)).isDirectory()) throw new StoreError(`Not a directory: ${absolute}`, 'not_a_directory');
      root = await realpath(absolute);
    } catch (error) {
      if (error instanceof StoreError) throw error;
      throw new StoreError(`No such directory: ${absolute}`, 'file_not_found');
    }
    if (!MODEL_KINDS.includes(options.kind)) throw new StoreError(`Unknown kind '${options.kind}' (use one of ${MODEL_KINDS.join(', ')})`, 'invalid_kind');
    if (options.contextSize !== undefined) {
      throw new StoreError('--ctx-size applies to a single-file (GGUF) text model, not to a model directory', 'invalid_option');
    }
    const layouts = directoryLayouts(this.catalog, options.kind, options.backend);
    if (!layouts.length) {
      const what = `${options.kind}${options.backend ? ` (backend ${options.backend})` : ''}`;
      throw new StoreError(
        `No catalog model of kind ${what} is a multi-file export, so lserve knows no directory layout for it; register the model file itself (e.g. a .gguf) instead`,
        'no_layout',
      );
    }
    let closest: { layout: CatalogEntry; missing: string[] } | undefined;
    // Several families share a layout (every onnx-community Whisper export); the one that uses the most of the directory's files wins.
    let best: { layout: CatalogEntry; files: Record<string, { path: string; size: number }> } | undefined;
    for (const layout of layouts) {
      const found = await matchLayout(absolute, root, layout);
      if ('files' in found) {
        if (!best || Object.keys(found.files).length > Object.keys(best.files).length) best = { layout, files: found.files };
        continue;
      }
      if (!closest || found.missing.length < closest.missing.length) closest = { layout, missing: found.missing };
    }
    if (best) {
      const { layout } = best;
      const files: Record<string, FileSpec> = {};
      const manifestFiles: Manifest['files'] = {};
      for (const [role, file] of Object.entries(best.files)) {
        files[role] = { url: pathToFileURL(file.path).href, path: layout.files[role]!.path! };
        manifestFiles[role] = { name: path.basename(file.path), size: file.size, path: file.path };
      }
      const first = Object.values(files)[0]!;
      const entry = this.userEntry({
        ...options,
        backend: layout.backend,
        id: options.id ?? idFromFileName(absolute),
        description: `Local directory ${absolute} (${layout.id} layout)`,
        file: first,
        files,
        defaults: layout.defaults,
      });
      await this.writeManifest(entry.id, { id: entry.id, source: 'local', installedAt: new Date().toISOString(), entry, files: manifestFiles });
      return { model: (await this.readInstalled(entry.id))!, layout };
    }
    const tried = layouts.map((l) => l.id).join(', ');
    throw new StoreError(
      `${absolute} does not have the layout of any ${options.kind} model in the catalog (tried ${tried}). ` +
        `Closest: ${closest!.layout.id}${repoOf(closest!.layout)}, which needs ${closest!.missing.join(', ')} (missing)`,
      'layout_mismatch',
    );
  }

  /** Bytes of an unfinished download of `id` in the staging directory (0 when there is none). */
  async partialBytes(id: string): Promise<number> {
    return directorySize(this.partialDir(id));
  }

  /** Writes a manifest atomically (temp file + rename) into the model's directory. */
  async writeManifest(id: string, manifest: Manifest): Promise<void> {
    const dir = this.modelDir(id);
    await mkdir(dir, { recursive: true });
    await writeFileWhole(path.join(dir, MANIFEST), JSON.stringify(manifest, null, 2), path.join(dir, `.${MANIFEST}.${process.pid}.tmp`));
  }

  /**
   * Merges `defaults` into the defaults of a model registered by the user (a
   * local file or directory, or a URL: its manifest carries its own entry)
   * and returns the model as it now reads.
   */
  async setUserDefaults(id: string, defaults: Record<string, unknown>): Promise<InstalledModel> {
    const installed = await this.resolve(id);
    if (!installed || installed.source === 'catalog' || installed.source === 'bundled') throw new StoreError(`'${id}' is not a model of your own: only those take new defaults`, 'not_user_model');
    const file = path.join(this.modelDir(installed.id), MANIFEST);
    const manifest = manifestSchema.parse(JSON.parse(await readFile(file, 'utf8')));
    await this.writeManifest(installed.id, { ...manifest, entry: { ...installed.entry, defaults: { ...installed.entry.defaults, ...defaults } } });
    return (await this.resolve(installed.id))!;
  }

  /** Removes an installed model (and any partial download of it). Bundled models cannot be removed. */
  async remove(name: string): Promise<boolean> {
    const entry = this.catalog.get(name);
    if (entry && isBundled(entry)) throw new StoreError(`'${entry.id}' is bundled with lserve and cannot be removed`, 'bundled');
    const id = entry?.id ?? name;
    const dir = this.modelDir(id);
    const partial = this.partialDir(id);
    // Deleting the staging directory under a running pull would break it midway (its .part files and
    // lock vanish); the user stops or awaits that pull first. A stale lock (a dead pull's) does not count.
    const holder = await pullLockHolder(partial);
    if (holder !== undefined) {
      throw new StoreError(
        `a pull of '${id}' is running (pid ${holder}); stop it (Ctrl-C) or wait for it to finish, then run \`lserve rm ${id}\` again`,
        'pull_in_progress',
      );
    }
    const existed = existsSync(path.join(dir, MANIFEST)) || existsSync(partial);
    // Drop the manifest first so a crash midway never leaves a listed-but-broken model.
    await rm(path.join(dir, MANIFEST), { force: true });
    await rm(dir, { recursive: true, force: true });
    await rm(partial, { recursive: true, force: true });
    return existed;
  }
}

/**
 * Catalog entries whose layout a model directory can have: the kind's
 * multi-file entries (of `backend`, when given) whose files are all repo
 * paths, ONNX exports first. Single-file models (a GGUF) register as files.
 */
export function directoryLayouts(catalog: Catalog, kind: ModelKind, backend?: string): CatalogEntry[] {
  const layouts = catalog.entries.filter((e) => {
    const files = Object.values(e.files);
    return e.kind === kind && (backend === undefined || e.backend === backend) && files.length > 1 && files.every((f) => f.repo !== undefined && f.path !== undefined);
  });
  return [...layouts.filter((e) => e.backend === 'onnx'), ...layouts.filter((e) => e.backend !== 'onnx')];
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
async function matchLayout(
  dir: string,
  root: string,
  layout: CatalogEntry,
): Promise<{ files: Record<string, { path: string; size: number }> } | { missing: string[] }> {
  const files: Record<string, { path: string; size: number }> = {};
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

function bundledModel(entry: CatalogEntry): InstalledModel | undefined {
  const files: Record<string, string> = {};
  let sizeBytes = 0;
  for (const [role, spec] of Object.entries(entry.files)) {
    const resolved = resolveNpmFile(spec.npm!);
    if (!resolved) return undefined;
    files[role] = resolved.path;
    sizeBytes += resolved.size;
  }
  return { id: entry.id, entry, source: 'bundled', files, sizeBytes };
}

/** Resolves "<package>/<file inside it>" to an absolute path, if the package is installed. */
function resolveNpmFile(spec: string): { path: string; size: number } | undefined {
  const parts = spec.split('/');
  const pkg = spec.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!;
  const inner = parts.slice(spec.startsWith('@') ? 2 : 1).join('/');
  let root: string | undefined;
  for (const dir of packageSearchPaths()) {
    const candidate = path.join(dir, pkg);
    if (existsSync(path.join(candidate, 'package.json'))) {
      root = candidate;
      break;
    }
  }
  if (!root) return undefined;
  const file = path.resolve(root, inner);
  if (!file.startsWith(root + path.sep)) return undefined;
  try {
    return { path: file, size: statSizeSync(file) };
  } catch {
    return undefined;
  }
}

/** node_modules folders from this package upwards (works for local, global and npx installs). */
function packageSearchPaths(): string[] {
  const dirs: string[] = [];
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (;;) {
    dirs.push(path.join(dir, 'node_modules'));
    const parent = path.dirname(dir);
    if (parent === dir) break;
    if (path.basename(dir) === 'node_modules') dirs.push(dir);
    dir = parent;
  }
  return dirs;
}

async function directorySize(dir: string): Promise<number> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  let total = 0;
  for (const entry of entries) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) total += await directorySize(full);
    else if (entry.isFile() && !entry.name.startsWith('.')) total += (await stat(full)).size;
  }
  return total;
}

function statSizeSync(file: string): number {
  const info = statSync(file);
  if (!info.isFile()) throw new Error('not a file');
  return info.size;
}
