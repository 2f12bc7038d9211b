import { randomBytes } from 'node:crypto';
import type { Readable } from 'node:stream';

/**
 * Files the server writes for clients to fetch later by URL: synthesised
 * speech (`/v1/audio/files/<name>`) and generated images
 * (`/v1/images/cache/<name>`), kept in a directory (directory.ts) or in
 * S3-compatible object storage (s3.ts), so that several replicas of the
 * server can serve each other's files.
 *
 * Names are random and only ever come from `put()`: anything that is not
 * exactly `<32 hex>.<known extension>` (traversal, encoded separators,
 * absolute paths, other files) is simply not found, and never reaches a
 * path or an object key. Files expire `ttlMs` after they were written, and
 * the oldest go first once a store holds more than `maxBytes`.
 */
export interface FileStore {
  /** Writes `bytes` under a new random name (whole or not at all) and describes it. */
  put(bytes: Uint8Array, extension: string): Promise<StoredFile>;
  /** The file behind a requested name, or undefined when it is not one of this store's names, is gone or expired. */
  get(name: string): Promise<StoredFile | undefined>;
  /**
   * The bytes of a file `get()` described (`range` inclusive), or undefined
   * when it went away since. Rejects with an LserveError when the storage fails.
   */
  open(file: StoredFile, range?: ByteRange): Promise<Readable | undefined>;
  /** Where the bytes are, for messages: "on disk", "in object storage". */
  readonly where: string;
}

/** Where a server keeps its generated files: a directory (shared or not), or a bucket and key prefix of S3-compatible storage. */
export type FilesLocation = { dir: string } | { s3: S3Location };

export interface S3Location {
  bucket: string;
  /** Key prefix without leading or trailing '/'; '' for the bucket's root. */
  prefix: string;
}

/** The stores of one location, one per kind of file (`<dir>/<kind>/`, `<prefix>/<kind>/`). */
export interface FileStores {
  open(kind: 'audio' | 'images', options: FileStoreOptions): FileStore;
  /** Lets background work end and releases connections. */
  close(): Promise<void>;
}

export interface FileStoreOptions {
  /** How long a file is served after it was written. */
  ttlMs: number;
  /** Most bytes kept; the oldest files are removed beyond it. */
  maxBytes: number;
  /** Extensions this store writes, with their Content-Type. */
  types: Readonly<Record<string, string>>;
}

export interface StoredFile {
  name: string;
  size: number;
  /** Always the store's type for the extension, never one read back from storage. */
  contentType: string;
  /** When it stops being served (ms since the epoch). */
  expiresAt: number;
  /** A validator for conditional requests, quoted (`"…"` or `W/"…"`). */
  etag: string;
  lastModified: Date;
}

export interface ByteRange {
  start: number;
  /** Inclusive. */
  end: number;
}

/** A fresh name for a file of this extension (128 random bits). */
export function newFileName(extension: string, options: FileStoreOptions): string {
  if (!(extension in options.types)) throw new Error(`FileStore: unknown extension '${extension}'`);
  return `${randomBytes(16).toString('hex')}.${extension}`;
}

/** Whether `name` is one a store with these types could have written: the only names that reach a path or a key. */
export function isFileName(name: string, options: FileStoreOptions): boolean {
  const match = /^[0-9a-f]{32}\.([a-z0-9]{1,5})$/.exec(name);
  return match !== null && match[1]! in options.types;
}

export function contentTypeOf(name: string, options: FileStoreOptions): string {
  return options.types[name.slice(name.lastIndexOf('.') + 1)]!;
}

/**
 * Which files to remove: every expired one, then the oldest (never `keep`)
 * while the rest hold more than `maxBytes`.
 */
export function filesToRemove<T extends { name: string; size: number; writtenAt: number }>(files: readonly T[], options: FileStoreOptions, now: number, keep?: string): T[] {
  const removed: T[] = [];
  const kept: T[] = [];
  for (const file of files) (now - file.writtenAt >= options.ttlMs ? removed : kept).push(file);
  let bytes = kept.reduce((sum, file) => sum + file.size, 0);
  // Oldest first; names break ties (object storage dates have whole seconds) so replicas agree.
  kept.sort((a, b) => a.writtenAt - b.writtenAt || (a.name < b.name ? -1 : 1));
  for (const file of kept) {
    if (bytes <= options.maxBytes) break;
    if (file.name === keep) continue;
    removed.push(file);
    bytes -= file.size;
  }
  return removed;
}
