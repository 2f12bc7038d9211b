import { readFileSync } from 'node:fs';

/** A process's resident memory in bytes (VmRSS in /proc/<pid>/status: Linux); undefined where it cannot be read. */
export function residentBytes(pid: number): number | undefined {
  try {
    const kib = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kib === undefined ? undefined : Number(kib) * 1024;
  } catch {
    return undefined;
  }
}
