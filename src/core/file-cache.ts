import { randomBytes } from 'node:crypto';
import { mkdir, readdir, rm, stat } from 'node:fs/promises';
import { writeFileWhole } from './write-whole.js';
import path from 'node:path';

/**
 * Files the server writes for clients to fetch later by URL: synthesised
 * speech (`/v1/audio/files/<name>`) and generated images
 * (`/v1/images/cache/<name>`). Names are random and only ever come from
 * `put()`, so a request can only reach a file this cache wrote: anything that
 * is not exactly `<32 hex>.<known extension>` (traversal, encoded
 * separators, absolute paths, other files) is simply not found. Files expire
 * after `ttlMs`, and the oldest go first once the folder holds more than
 * `maxBytes`.
 */

export interface FileCacheOptions {
  /** How long a file is served after it was written. */
  ttlMs: number;
  /** Most bytes kept; the oldest files are removed beyond it. */
  maxBytes: number;
  /** Extensions this cache writes, with their Content-Type. */
  types: Readonly<Record<string, string>>;
}

export interface CachedFile {
  name: string;
  path: string;
  size: number;
  contentType: string;
  /** When it stops being served (ms since the epoch). */
  expiresAt: number;
}

interface Entry {
  size: number;
  writtenAt: number;
}

export class FileCache {
  private readonly entries = new Map<string, Entry>();
  private bytes = 0;
  private ready: Promise<void> | undefined;

  constructor(
    readonly dir: string,
    private readonly options: FileCacheOptions,
  ) {}

  /** Writes `bytes` under a new random name (whole or not at all) and returns it. */
  async put(bytes: Uint8Array, extension: string): Promise<CachedFile> {
    if (!(extension in this.options.types)) throw new Error(`FileCache: unknown extension '${extension}'`);
    await this.init();
    const name = `${randomBytes(16).toString('hex')}.${extension}`;
    const file = path.join(this.dir, name);
    await writeFileWhole(file, bytes, path.join(this.dir, `.${name}.part`));
    const entry = { size: bytes.byteLength, writtenAt: Date.now() };
    this.entries.set(name, entry);
    this.bytes += entry.size;
    // The file just written stays even alone over the cap: its name is about to be handed out.
    await this.sweep(Date.now(), name);
    return this.describe(name, entry);
  }

  /** The file behind a requested name, or undefined when this cache did not write it or it expired. */
  async get(name: string): Promise<CachedFile | undefined> {
    if (!this.isOwnName(name)) return undefined;
    await this.init();
    const entry = this.entries.get(name);
    if (!entry) return undefined;
    if (this.expired(entry, Date.now())) {
      await this.remove(name);
      return undefined;
    }
    return this.describe(name, entry);
  }

  /** Removes expired files, then the oldest (never `keep`) while over the size cap. */
  async sweep(now = Date.now(), keep?: string): Promise<void> {
    for (const [name, entry] of this.entries) if (this.expired(entry, now)) await this.remove(name);
    if (this.bytes <= this.options.maxBytes) return;
    const oldestFirst = [...this.entries].sort((a, b) => a[1].writtenAt - b[1].writtenAt);
    for (const [name] of oldestFirst) {
      if (this.bytes <= this.options.maxBytes) break;
      if (name !== keep) await this.remove(name);
    }
  }

  private isOwnName(name: string): boolean {
    const match = /^[0-9a-f]{32}\.([a-z0-9]{1,5})$/.exec(name);
    return match !== null && match[1]! in this.options.types;
  }

  private expired(entry: Entry, now: number): boolean {
    return now - entry.writtenAt >= this.options.ttlMs;
  }

  private describe(name: string, entry: Entry): CachedFile {
    return {
      name,
      path: path.join(this.dir, name),
      size: entry.size,
      contentType: this.options.types[name.slice(name.lastIndexOf('.') + 1)]!,
      expiresAt: entry.writtenAt + this.options.ttlMs,
    };
  }

  private async remove(name: string): Promise<void> {
    const entry = this.entries.get(name);
    if (!entry) return;
    this.entries.delete(name);
    this.bytes -= entry.size;
    await rm(path.join(this.dir, name), { force: true });
  }

  /** Creates the folder and adopts the files an earlier run of the server wrote (half-written ones are removed). */
  private init(): Promise<void> {
    this.ready ??= (async () => {
      await mkdir(this.dir, { recursive: true });
      for (const name of await readdir(this.dir)) {
        const file = path.join(this.dir, name);
        if (name.endsWith('.part')) {
          await rm(file, { force: true });
          continue;
        }
        if (!this.isOwnName(name)) continue;
        const info = await stat(file).catch(() => undefined);
        if (!info?.isFile()) continue;
        this.entries.set(name, { size: info.size, writtenAt: info.mtimeMs });
        this.bytes += info.size;
      }
    })();
    return this.ready;
  }
}
