import { mkdtempSync, readdirSync, rmSync, statfsSync } from 'node:fs';
import { rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { LlamaContextSequence, Token } from 'node-llama-cpp';

/**
 * Conversations kept in host memory when their sequence is needed for
 * something else (llama-server's prompt cache, `--cache-ram`): an agent's
 * long conversation stays restorable while a side request (a title, a
 * summary) takes its sequence, so its next turn is restored in a fraction
 * of a second instead of evaluated again for minutes.
 *
 * A sequence's KV state is saved with llama.cpp's own state files
 * (node-llama-cpp's saveStateToFile / loadStateFromFile, into any sequence
 * of the same model), in a folder of the process's own in the temporary
 * directory: the page cache keeps fresh files in memory, and the system may
 * write them out when it needs the memory more (a restore then reads the
 * disk, still far quicker than evaluating the conversation again). The
 * folder goes with the cache; folders left by processes that died are
 * removed when the next one starts. Entries are dropped least recently used
 * first beyond `limitBytes`.
 */

export interface CachedConversation {
  readonly tokens: readonly Token[];
  readonly bytes: number;
}

interface Entry extends CachedConversation {
  file: string;
  lastUsed: number;
  /** Restores reading the file now: it is not removed until they end. */
  readers: number;
  dropped: boolean;
}

const PREFIX = 'lserve-kv-';

export class SequenceStateCache {
  private readonly entries = new Set<Entry>();
  private next = 0;

  private constructor(
    private readonly dir: string,
    readonly limitBytes: number,
  ) {}

  /** A cache of at most `limitBytes`, less what the temporary directory has room for. */
  static create(limitBytes: number): SequenceStateCache {
    const base = os.tmpdir();
    removeAbandoned(base);
    limitBytes = Math.min(limitBytes, roomIn(base));
    return new SequenceStateCache(mkdtempSync(path.join(base, `${PREFIX}${process.pid}-`)), limitBytes);
  }

  get bytes(): number {
    let total = 0;
    for (const entry of this.entries) total += entry.bytes;
    return total;
  }

  /** The entry sharing the longest prefix with `tokens`, when that is longer than `than` tokens. */
  best(tokens: readonly Token[], than: number): { entry: CachedConversation; shared: number } | undefined {
    let found: { entry: CachedConversation; shared: number } | undefined;
    for (const entry of this.entries) {
      const shared = commonPrefix(entry.tokens, tokens);
      if (shared > than && shared > (found?.shared ?? 0)) found = { entry, shared };
    }
    return found;
  }

  /** Whether what `tokens` holds is kept already (an entry holds all of it). */
  covers(tokens: readonly Token[]): boolean {
    for (const entry of this.entries) if (entry.tokens.length >= tokens.length && commonPrefix(entry.tokens, tokens) === tokens.length) return true;
    return false;
  }

  /** Saves what `sequence` holds; entries it holds all of are replaced. */
  async save(sequence: LlamaContextSequence): Promise<void> {
    const tokens = sequence.contextTokens;
    if (tokens.length === 0 || this.covers(tokens)) return;
    const file = path.join(this.dir, `${this.next++}.state`);
    try {
      await sequence.saveStateToFile(file);
    } catch (error) {
      await rm(file, { force: true });
      throw error;
    }
    const bytes = (await stat(file)).size;
    for (const entry of this.entries) if (commonPrefix(entry.tokens, tokens) === entry.tokens.length) this.drop(entry);
    this.entries.add({ tokens: [...tokens], bytes, file, lastUsed: performance.now(), readers: 0, dropped: false });
    this.trim();
  }

  /** Loads `conversation` into `sequence`, replacing what it held. */
  async restore(conversation: CachedConversation, sequence: LlamaContextSequence): Promise<void> {
    const entry = [...this.entries].find((e) => e === conversation);
    if (!entry) throw new Error('that conversation is no longer cached');
    entry.readers++;
    entry.lastUsed = performance.now();
    try {
      await sequence.loadStateFromFile(entry.file, { acceptRisk: true });
    } finally {
      entry.readers--;
      if (entry.dropped && entry.readers === 0) void rm(entry.file, { force: true });
    }
  }

  async dispose(): Promise<void> {
    this.entries.clear();
    await rm(this.dir, { recursive: true, force: true });
  }

  private trim(): void {
    let bytes = this.bytes;
    const oldestFirst = [...this.entries].sort((a, b) => a.lastUsed - b.lastUsed);
    for (const entry of oldestFirst) {
      if (bytes <= this.limitBytes) break;
      bytes -= entry.bytes;
      this.drop(entry);
    }
  }

  private drop(entry: Entry): void {
    this.entries.delete(entry);
    entry.dropped = true;
    if (entry.readers === 0) void rm(entry.file, { force: true });
  }
}

function commonPrefix(a: readonly Token[], b: readonly Token[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** Bytes free for an unprivileged writer in `dir`; 0 when it cannot be told. */
function roomIn(dir: string): number {
  try {
    const fs = statfsSync(dir);
    return fs.bavail * fs.bsize;
  } catch {
    return 0;
  }
}

/** Folders of caches whose process is gone (killed before it could remove its own). */
function removeAbandoned(base: string): void {
  let names: string[];
  try {
    names = readdirSync(base).filter((name) => name.startsWith(PREFIX));
  } catch {
    return;
  }
  for (const name of names) {
    const pid = Number(/^lserve-kv-(\d+)-/.exec(name)?.[1]);
    if (!Number.isInteger(pid) || pid === process.pid || alive(pid)) continue;
    rmSync(path.join(base, name), { recursive: true, force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
