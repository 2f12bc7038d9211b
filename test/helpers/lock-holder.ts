/**
 * A process that holds a model's pull lock, for tests of the lock across
 * processes (run with `node --import tsx`):
 *
 *   lock-holder.ts hold DIR HEARTBEAT_MS   takes the lock as a pull does, prints "held <pid>", keeps it until killed
 *   lock-holder.ts exit DIR HEARTBEAT_MS   takes it, then calls process.exit() without releasing it
 *   lock-holder.ts foreign FILE PID HEARTBEAT_MS
 *                                         stands in for a holder in another pid namespace (a container):
 *                                         writes a lock naming PID (not a process here) and another
 *                                         namespace, and keeps its heartbeat going until killed
 */
import { utimes, writeFile } from 'node:fs/promises';
import { acquirePullLock } from '../../src/core/download-lock.js';

const [mode, target, ...rest] = process.argv.slice(2);

if (mode === 'foreign') {
  const [pid, heartbeat] = rest;
  await writeFile(target!, `${pid} foreign-token 00000000-0000-0000-0000-000000000000/1\n`);
  setInterval(() => {
    const now = new Date();
    void utimes(target!, now, now);
  }, Number(heartbeat));
  process.stdout.write(`held ${pid}\n`);
} else {
  const lock = await acquirePullLock(target!, { heartbeatMs: Number(rest[0]) });
  process.stdout.write(`held ${process.pid}\n`);
  if (mode === 'exit') process.exit(0);
  // The heartbeat timer is unref'd (as in a pull, where the download keeps the process alive): this stands in for it.
  setInterval(() => {}, 1_000_000);
  lock.lost.addEventListener('abort', () => process.stdout.write('lost\n'));
}
