import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { acquirePullLock, LOCK_FILE, pullLockHolder, type PullLock } from '../../src/core/download-lock.js';

/**
 * The pull lock across real processes, including processes that see other
 * pids: a holder in another pid namespace (a container sharing LSERVE_HOME)
 * whose pid is no process here must keep its lock while its heartbeat goes
 * on, and lose it once the heartbeat stops. Short intervals keep this fast;
 * every bound asserted is several heartbeats wide.
 */

const HOLDER = fileURLToPath(new URL('../helpers/lock-holder.ts', import.meta.url));
const HEARTBEAT = 100;
const STALE = 1_000;

/** `unshare` can make a user + pid namespace here (not in every container or CI sandbox). */
const canUnshare = spawnSync('unshare', ['-Urpf', '--mount-proc', '--kill-child', 'true']).status === 0;

interface Holder {
  child: ChildProcess;
  /** The holder's pid as it sees it (what it writes in the lock). */
  pid: number;
  kill(): Promise<void>;
}

/** Starts test/helpers/lock-holder.ts (behind `prefix`, e.g. unshare) and waits until it holds the lock. */
async function startHolder(args: string[], prefix: string[] = []): Promise<Holder> {
  const command = [...prefix, process.execPath, '--import', 'tsx', HOLDER, ...args];
  const child = spawn(command[0]!, command.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.on('close', () => resolve()));
  let output = '';
  const pid = await new Promise<number>((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      output += d;
      const held = /held (\d+)/.exec(output);
      if (held) resolve(Number(held[1]));
    });
    child.stderr!.on('data', (d: Buffer) => (output += d));
    void exited.then(() => reject(new Error(`the lock holder exited before holding the lock:\n${output}`)));
  });
  return {
    child,
    pid,
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Whether `promise` settles within `ms` (a rejection is thrown). */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  const timeout = Symbol('timeout');
  return (await Promise.race([promise, sleep(ms, timeout)])) !== timeout;
}

/** A pid that no process has here: one that just exited. */
function deadPid(): number {
  return spawnSync(process.execPath, ['-e', '']).pid!;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

describe('pull lock across processes', () => {
  let dir: string;
  const holders: Holder[] = [];
  const locks: PullLock[] = [];
  beforeEach(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-lock-'));
  });
  afterEach(async () => {
    for (const holder of holders.splice(0)) await holder.kill();
    for (const lock of locks.splice(0)) await lock.release();
    await rm(dir, { recursive: true, force: true });
  });

  /** Waits for the lock as a second pull does, noting whom it waits for. */
  const waitForLock = (staleMs: number) => {
    const waitedFor: number[] = [];
    const acquiring = acquirePullLock(dir, { heartbeatMs: HEARTBEAT, staleMs, pollMs: 50, onWait: (pid) => waitedFor.push(pid) }).then((lock) => {
      locks.push(lock);
      return lock;
    });
    return { acquiring, waitedFor };
  };

  /** The holder keeps its lock for longer than the stale bound; once killed, the lock is taken after the bound, not before. */
  const expectHeldUntilHeartbeatStops = async (holder: Holder) => {
    const { acquiring, waitedFor } = waitForLock(STALE);
    expect(await settlesWithin(acquiring, 2 * STALE)).toBe(false);
    expect(waitedFor).toEqual([holder.pid]);
    expect(await pullLockHolder(dir, { staleMs: STALE })).toBe(holder.pid);

    await holder.kill();
    const killedAt = Date.now();
    await acquiring;
    // Its last heartbeat was at most one interval before the kill.
    expect(Date.now() - killedAt).toBeGreaterThanOrEqual(STALE - 2 * HEARTBEAT);
    expect(await pullLockHolder(dir, { staleMs: STALE })).toBe(process.pid);
  };

  it('keeps the lock of a holder whose pid is no process here while its heartbeat goes on', async () => {
    const pid = deadPid();
    const holder = await startHolder(['foreign', path.join(dir, LOCK_FILE), String(pid), String(HEARTBEAT)]);
    holders.push(holder);
    expect(isAlive(pid)).toBe(false);
    await expectHeldUntilHeartbeatStops(holder);
  });

  it.skipIf(!canUnshare)('keeps the lock of a pull running in another pid namespace, and takes it over after it is killed', async () => {
    // The holder gets a pid of our choosing in its namespace, one that no process has here.
    let pid = 20_000 + Math.floor(Math.random() * 10_000);
    while (isAlive(pid)) pid++;
    const prefix = ['unshare', '-Urpf', '--mount-proc', '--kill-child', 'sh', '-c', `echo ${pid - 1} > /proc/sys/kernel/ns_last_pid && "$@"; exit $?`, 'sh'];
    // Killing unshare kills the namespace's init (sh), and with it the holder.
    const holder = await startHolder(['hold', dir, String(HEARTBEAT)], prefix);
    holders.push(holder);
    expect(holder.pid).toBe(pid);
    expect(isAlive(pid)).toBe(false);
    await expectHeldUntilHeartbeatStops(holder);
  });

  it('takes over at once the lock of a SIGKILLed holder in this pid namespace', async () => {
    const holder = await startHolder(['hold', dir, String(HEARTBEAT)]);
    holders.push(holder);
    // A stale bound far beyond the test's time: only the dead pid can free the lock.
    const { acquiring, waitedFor } = waitForLock(600_000);
    expect(await settlesWithin(acquiring, 5 * HEARTBEAT)).toBe(false);
    expect(waitedFor).toEqual([holder.pid]);
    await holder.kill();
    expect(await settlesWithin(acquiring, 10_000)).toBe(true);
  });

  it('takes a lock whose heartbeat is already stale when first seen without waiting', async () => {
    const file = path.join(dir, LOCK_FILE);
    await writeFile(file, `${deadPid()} old-token 00000000-0000-0000-0000-000000000000/1\n`);
    const then = new Date(Date.now() - 10 * 60_000);
    await utimes(file, then, then);
    expect(await pullLockHolder(dir, { staleMs: 60_000 })).toBeUndefined();
    // A lock that stopped beating while watched is taken only after staleMs / 4 of watching (15 s here).
    const { acquiring } = waitForLock(60_000);
    expect(await settlesWithin(acquiring, 5_000)).toBe(true);
  });

  it('takes over an empty lock (its writer died before writing it) once stale', async () => {
    const file = path.join(dir, LOCK_FILE);
    await writeFile(file, '');
    const { acquiring, waitedFor } = waitForLock(STALE);
    expect(await settlesWithin(acquiring, STALE / 2)).toBe(false);
    await acquiring;
    expect(waitedFor).toEqual([]);
  });

  it('removes its locks when the process exits without releasing them', async () => {
    const holder = await startHolder(['exit', dir, String(HEARTBEAT)]);
    await new Promise((resolve) => (holder.child.exitCode === null ? holder.child.on('close', resolve) : resolve(undefined)));
    expect(existsSync(path.join(dir, LOCK_FILE))).toBe(false);
  });

  it("signals a holder whose lock another process took over, and never removes the other's lock", async () => {
    const lock = await acquirePullLock(dir, { heartbeatMs: 20 });
    const file = path.join(dir, LOCK_FILE);
    const other = `${process.pid + 1} other-token -\n`;
    await writeFile(file, other);
    const reason = await new Promise<unknown>((resolve) => lock.lost.addEventListener('abort', () => resolve(lock.lost.reason)));
    expect(String(reason)).toContain('took over');
    await lock.release();
    expect(existsSync(file)).toBe(true);
  });
});
