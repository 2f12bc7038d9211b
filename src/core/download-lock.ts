import { randomUUID } from 'node:crypto';
import { readFileSync, readlinkSync, rmSync } from 'node:fs';
import { mkdir, open, readFile, rm, stat, utimes } from 'node:fs/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * One pull per model at a time, across processes: an `O_EXCL` lock file in
 * the model's staging directory holding "<pid> <token> <scope>". A second pull
 * waits for the first (and then finds the model installed) instead of
 * appending to the same `.part` files.
 *
 * The holder touches the file's mtime every `heartbeatMs`; a lock whose
 * heartbeat is older than `staleMs` is stale and taken over, so a killed pull
 * never blocks the next one for long. Whether its pid is alive says nothing on
 * its own: a container and its host, or two containers, sharing LSERVE_HOME
 * see different pid namespaces, where a live holder's pid does not exist (or
 * is some other process). The pid is trusted only for a lock written in this
 * very pid namespace (`scope`, below): there a dead pid is stale at once, as
 * after a SIGKILL.
 *
 * Heartbeats are judged by this process's clock: the processes sharing a
 * store must agree on the time within the stale bound, as containers on one
 * host do (they share its clock) and NTP-synced hosts do.
 */

export const LOCK_FILE = '.lock';

export interface LockTiming {
  /** How often the holder touches the lock. Default 2 s. */
  heartbeatMs?: number;
  /** A heartbeat older than this is a dead holder's. Default 20 s: ten missed beats, so a busy or slow holder keeps its lock. */
  staleMs?: number;
}

export interface PullLock {
  /** Aborts when another process took the lock over (this holder's heartbeat had stalled past the bound): stop writing. */
  readonly lost: AbortSignal;
  release(): Promise<void>;
}

export interface LockOptions extends LockTiming {
  signal?: AbortSignal;
  /** Called once when another live process holds the lock. */
  onWait?: (pid: number) => void;
  pollMs?: number;
}

const HEARTBEAT_MS = 2_000;
const STALE_MS = 20_000;

export async function acquirePullLock(dir: string, options: LockOptions = {}): Promise<PullLock> {
  const file = path.join(dir, LOCK_FILE);
  const staleMs = options.staleMs ?? STALE_MS;
  // The token tells two pulls in one process apart (they share a pid).
  const content = `${process.pid} ${randomUUID()} ${localScope()}\n`;
  let notified = false;
  let watched: { key: string; since: number } | undefined;
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
      return hold(file, content, options.heartbeatMs ?? HEARTBEAT_MS);
    } catch (error) {
      // ENOENT: the holder removed the staging directory between mkdir and open.
      if (!isCode(error, 'EEXIST') && !isCode(error, 'ENOENT')) throw error;
    }
    const lock = await observe(file);
    if (lock === undefined) continue; // released meanwhile: try again at once
    // An old heartbeat must also have stood still for a while as this pull watched it, by the monotonic
    // clock (which on Linux and macOS stands still while the machine sleeps): after a machine wakes, every
    // heartbeat looks old, but the holder wakes too and beats again. A lock already old when first seen
    // is taken at once.
    const key = `${lock.mtimeMs} ${lock.text}`;
    const firstLook = watched === undefined;
    if (watched?.key !== key) watched = { key, since: performance.now() };
    if (isStale(lock, staleMs, firstLook || performance.now() - watched.since >= staleMs / 4)) {
      // Only if unchanged since judged, so a lock a live process has just taken over is kept.
      const again = await observe(file);
      if (again && `${again.mtimeMs} ${again.text}` === key) await rm(file, { force: true });
      continue;
    }
    const holder = parseHolder(lock.text);
    if (holder !== undefined && !notified) {
      notified = true;
      options.onWait?.(holder.pid);
    }
    await sleep(options.pollMs ?? 200, undefined, { signal: options.signal });
  }
}

/**
 * The pid of the live process holding the pull lock in `dir` (a model's
 * staging directory), or undefined when no pull is running there: no lock, a
 * lock still being written, or a stale lock (which the next pull takes over
 * anyway, so it must not block anything else either). The pid is as the
 * holder sees it, which may be another pid namespace (a container).
 */
export async function pullLockHolder(dir: string, timing: LockTiming = {}): Promise<number | undefined> {
  const lock = await observe(path.join(dir, LOCK_FILE)).catch(() => undefined);
  if (lock === undefined || isStale(lock, timing.staleMs ?? STALE_MS, true)) return undefined;
  return parseHolder(lock.text)?.pid;
}

/** Locks this process holds (token content → file), removed if it exits without releasing them. */
const held = new Map<string, string>();
let exitHooked = false;

function hold(file: string, content: string, heartbeatMs: number): PullLock {
  const lost = new AbortController();
  let beating = false;
  const beat = async () => {
    try {
      if ((await readFile(file, 'utf8')) === content) {
        const now = new Date();
        await utimes(file, now, now);
        return;
      }
    } catch (error) {
      if (!isCode(error, 'ENOENT')) return; // a passing I/O error: the next beat tries again
    }
    stop();
    lost.abort(new Error('another process took over the pull lock'));
  };
  // Unref'd: a pull that forgets to release must not keep its process alive.
  const timer = setInterval(() => {
    if (beating) return;
    beating = true;
    void beat().finally(() => (beating = false));
  }, heartbeatMs).unref();
  const stop = () => {
    clearInterval(timer);
    held.delete(content);
  };
  if (!exitHooked) {
    exitHooked = true;
    process.once('exit', releaseAllSync);
  }
  held.set(content, file);
  return {
    lost: lost.signal,
    release: async () => {
      stop();
      await releaseIfOurs(file, content);
    },
  };
}

async function releaseIfOurs(file: string, content: string): Promise<void> {
  try {
    if ((await readFile(file, 'utf8')) === content) await rm(file, { force: true });
  } catch {
    // already gone (the staging directory was removed): nothing to release
  }
}

/** On process.exit() with pulls in flight (a server's second Ctrl-C): their locks go now, not when stale. */
function releaseAllSync(): void {
  for (const [content, file] of held) {
    try {
      if (readFileSync(file, 'utf8') === content) rmSync(file, { force: true });
    } catch {
      // gone already
    }
  }
}

interface Observed {
  text: string;
  mtimeMs: number;
}

/** The lock's content and heartbeat; undefined when there is none. Other errors (EACCES) are thrown, not waited on forever. */
async function observe(file: string): Promise<Observed | undefined> {
  try {
    const { mtimeMs } = await stat(file);
    return { text: await readFile(file, 'utf8'), mtimeMs };
  } catch (error) {
    if (isCode(error, 'ENOENT')) return undefined;
    throw error;
  }
}

/**
 * A dead holder's lock: one written in this pid namespace whose pid is gone,
 * or one whose heartbeat is older than `staleMs` (when `settled`: see the
 * caller). An empty lock (its writer died between creating and writing it)
 * goes stale by its mtime like any other.
 */
function isStale(lock: Observed, staleMs: number, settled: boolean): boolean {
  const holder = parseHolder(lock.text);
  if (holder !== undefined && holder.scope !== '-' && holder.scope === localScope() && !isAlive(holder.pid)) return true;
  return settled && Date.now() - lock.mtimeMs > staleMs;
}

/** The pid and scope in a lock file; undefined while it is still being written. */
function parseHolder(text: string): { pid: number; scope: string | undefined } | undefined {
  const [pidText, , scope] = text.trim().split(' ');
  const pid = Number.parseInt(pidText ?? '', 10);
  return Number.isInteger(pid) && pid > 0 ? { pid, scope } : undefined;
}

let scope: string | undefined;

/**
 * Where this process's pid means something: the kernel's boot id and the
 * inode of its pid namespace (Linux), so two processes with the same scope
 * see the same pids, and processes in other containers or on other hosts
 * never share one. '-' where neither can be read (macOS, Windows): such
 * locks go stale by their heartbeat only.
 */
function localScope(): string {
  if (scope === undefined) {
    try {
      const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
      const namespace = /\[(\d+)\]/.exec(readlinkSync('/proc/self/ns/pid'))?.[1];
      scope = boot && namespace ? `${boot}/${namespace}` : '-';
    } catch {
      scope = '-';
    }
  }
  return scope;
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
