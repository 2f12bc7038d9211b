import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';

/** The child processes of a native build (threadpool-addon.ts, cpu-variant-build.ts): compilers, git, cmake. */

export function succeeds(command: string, args: string[]): Promise<boolean> {
  return run(command, args).then(() => true, () => false);
}

/**
 * Runs a command; rejects with the tail of its output. `lowPriority`: niced,
 * so a serving process keeps the CPU first (the processes it starts, such as
 * cmake's compilers, inherit it).
 */
export function run(command: string, args: string[], cwd?: string, lowPriority = false): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    if (lowPriority && child.pid !== undefined) {
      try {
        os.setPriority(child.pid, 10);
      } catch {
        // not permitted: run at normal priority
      }
    }
    let output = '';
    const keep = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-4000);
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`${path.basename(command)} ${args[0] ?? ''} failed (exit ${code}): ${output.trim().split('\n').slice(-8).join('\n')}`))));
  });
}
