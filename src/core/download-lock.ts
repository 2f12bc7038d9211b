import { randomUUID } from 'node:crypto';
import { mkdir, open, readFile, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * One pull per model at a time, across processes: an `O_EXCL` lock file in
 * the model's staging directory holding "<pid> <token>". A second pull waits
 * for the first (and then finds the model installed) instead of appending to
 * the same `.part` files. A lock whose pid is dead is stale and taken over, so
 * a killed pull never blocks the next one.
 */

export const LOCK_FILE = '.lock';

export interface PullLock {
  release(): Promise<void>;
}

export interface LockOptions {
  signal?: AbortSignal;
  /** Called once when another live process holds the lock. */
  onWait?: (pid: number) => void;
  pollMs?: number;
}

export async function acquirePullLock(dir: string, options: LockOptions = {}): Promise<PullLock> {
  const file = path.join(dir, LOCK_FILE);
  // The token tells two pulls in one process apart (they share a pid).
  const content = `${process.pid} ${randomUUID()}\n`;
  let notified = false;
  for (;;) {
    options.signal?.throwIfAborted();
    await mkdir(dir, { recursive: true });
    try {
      const handle = await open(file, 'wx');
      try {
        await handle.writeFile(content);
      } finally {
        await handle.close();
      }
      return { release: () => releaseIfOurs(file, content) };
    } catch (error) {
      // ENOENT: the holder removed the staging directory between mkdir and open.
      if (!isCode(error, 'EEXIST') && !isCode(error, 'ENOENT')) throw error;
    }
    const holder = await readHolder(file);
    if (holder === undefined && (await isAbandoned(file))) {
      await rm(file, { force: true });
      continue;
    }
    if (holder !== undefined && !isAlive(holder)) {
      // Re-read right before removing so a lock a live process has just taken over is kept.
      if ((await readHolder(file)) === holder) await rm(file, { force: true });
      continue;
    }
    if (holder !== undefined && !notified) {
      notified = true;
      options.onWait?.(holder);
    }
    await sleep(options.pollMs ?? 200, undefined, { signal: options.signal });
  }
}

/**
 * The pid of the live process holding the pull lock in `dir` (a model's
 * staging directory), or undefined when no pull is running there: no lock, a
 * lock still being written, or a stale lock whose process is dead (which the
 * next pull takes over anyway, so it must not block anything else either).
 */
export async function pullLockHolder(dir: string): Promise<number | undefined> {
  const holder = await readHolder(path.join(dir, LOCK_FILE));
  return holder !== undefined && isAlive(holder) ? holder : undefined;
}

async function releaseIfOurs(file: string, content: string): Promise<void> {
  try {
    if ((await readFile(file, 'utf8')) === content) await rm(file, { force: true });
  } catch {
    // already gone (the staging directory was removed): nothing to release
  }
}

/** The pid in a lock file; undefined while it is missing or still being written. */
async function readHolder(file: string): Promise<number | undefined> {
  try {
    const pid = Number.parseInt((await readFile(file, 'utf8')).split(' ')[0] ?? '', 10);
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** A lock file left empty for seconds: its writer died between creating and writing it. */
async function isAbandoned(file: string): Promise<boolean> {
  try {
    return Date.now() - (await stat(file)).mtimeMs > 5_000;
  } catch {
    return false;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to another user.
    return isCode(error, 'EPERM');
  }
}

export function isCode(error: unknown, code: string): boolean {
  return typeof error === 'object' && error !== null && 'code' in error && (error as { code: unknown }).code === code;
}
