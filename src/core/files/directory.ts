import type { Stats } from 'node:fs';
import { mkdir, open, readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { writeFileWhole } from '../write-whole.js';
import { contentTypeOf, filesToRemove, isFileName, newFileName, type ByteRange, type FileStore, type FileStoreOptions, type StoredFile } from './store.js';

/** A half-written file older than this was left by a writer that died: a whole write takes seconds. */
const PART_GRACE_MS = 10 * 60_000;
/** The folder is scanned for expired files at most this often, and whenever it may be over its size cap. */
const SCAN_INTERVAL_MS = 60_000;

const isMissing = (error: unknown) => ['ENOENT', 'ENOTDIR'].includes((error as NodeJS.ErrnoException).code ?? '');

/**
 * A FileStore in a folder that several server processes may share (one
 * machine, or a network filesystem): nothing is known of a file but what the
 * disk says. A file is found by its name (stat), expires by its mtime, and
 * is written to a `.part` file renamed into place, so no process ever sees
 * half of one. Each writer sweeps the whole folder, and any file may vanish
 * under it because another process removed it first.
 */
export class DirectoryFileStore implements FileStore {
  readonly where = 'on disk';
  private ready: Promise<void> | undefined;
  /** What the folder held at the last scan plus what this process wrote since. */
  private knownBytes = 0;
  private scannedAt = 0;

  constructor(
    readonly dir: string,
    private readonly options: FileStoreOptions,
  ) {}

  async put(bytes: Uint8Array, extension: string): Promise<StoredFile> {
    const name = newFileName(extension, this.options);
    this.ready ??= mkdir(this.dir, { recursive: true }).then(() => undefined);
    await this.ready;
    const file = path.join(this.dir, name);
    await writeFileWhole(file, bytes, path.join(this.dir, `.${name}.part`));
    const info = await stat(file);
    this.knownBytes += info.size;
    // The file just written stays even alone over the cap: its name is about to be handed out.
    if (this.knownBytes > this.options.maxBytes || Date.now() - this.scannedAt >= SCAN_INTERVAL_MS) await this.sweep(Date.now(), name);
    return this.describe(name, info);
  }

  async get(name: string): Promise<StoredFile | undefined> {
    if (!isFileName(name, this.options)) return undefined;
    const file = path.join(this.dir, name);
    const info = await stat(file).catch((error: unknown) => {
      if (isMissing(error)) return undefined;
      throw error;
    });
    if (!info?.isFile()) return undefined;
    if (Date.now() - info.mtimeMs >= this.options.ttlMs) {
      await rm(file, { force: true });
      return undefined;
    }
    return this.describe(name, info);
  }

  async open(file: StoredFile, range?: ByteRange): Promise<Readable | undefined> {
    const handle = await open(path.join(this.dir, file.name)).catch((error: unknown) => {
      if (isMissing(error)) return undefined;
      throw error;
    });
    const start = range?.start ?? 0;
    return handle?.createReadStream({ start, end: Math.max(start, range?.end ?? file.size - 1) });
  }

  /** Removes expired files, abandoned `.part` files, then the oldest (never `keep`) while over the size cap. */
  async sweep(now = Date.now(), keep?: string): Promise<void> {
    const names = await readdir(this.dir).catch((error: unknown) => {
      if (isMissing(error)) return [];
      throw error;
    });
    const files: Array<{ name: string; size: number; writtenAt: number }> = [];
    const stale: string[] = [];
    const ours = names.filter((name) => name.endsWith('.part') || isFileName(name, this.options));
    // Gone since the listing (another process swept it): nothing to count.
    const infos = await Promise.all(ours.map((name) => stat(path.join(this.dir, name)).catch(() => undefined)));
    ours.forEach((name, i) => {
      const info = infos[i];
      if (!info?.isFile()) return;
      if (!name.endsWith('.part')) files.push({ name, size: info.size, writtenAt: info.mtimeMs });
      else if (now - info.mtimeMs >= PART_GRACE_MS) stale.push(name);
    });
    const removed = filesToRemove(files, this.options, now, keep);
    await Promise.all([...stale, ...removed.map((file) => file.name)].map((name) => rm(path.join(this.dir, name), { force: true })));
    this.knownBytes = files.reduce((sum, file) => sum + file.size, 0) - removed.reduce((sum, file) => sum + file.size, 0);
    this.scannedAt = now;
  }

  private describe(name: string, info: Stats): StoredFile {
    return {
      name,
      size: info.size,
      contentType: contentTypeOf(name, this.options),
      expiresAt: info.mtimeMs + this.options.ttlMs,
      // send's (and so express.static's) validator: the same on every process that sees this file.
      etag: `W/"${info.size.toString(16)}-${info.mtime.getTime().toString(16)}"`,
      lastModified: info.mtime,
    };
  }
}
