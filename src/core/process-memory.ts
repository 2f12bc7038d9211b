import { readFileSync } from 'node:fs';

/** A process's resident memory in bytes (VmRSS in /proc/<pid>/status: Linux); undefined where it cannot be read. */
export function residentBytes(pid: number): number | undefined {
  return statusBytes(pid, 'VmRSS');
}

/** The most a process has held resident since it started (Linux's VmHWM), in bytes; undefined where unknown. */
export function peakResidentBytes(pid: number): number | undefined {
  return statusBytes(pid, 'VmHWM');
}

function statusBytes(pid: number, field: 'VmRSS' | 'VmHWM'): number | undefined {
  try {
    const kib = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kib === undefined ? undefined : Number(kib) * 1024;
  } catch {
    return undefined;
  }
}
