import { readdirSync, readFileSync } from 'node:fs';

/**
 * Resident memory of a process and of every process below it, read from
 * /proc (Linux only): the server's own RSS (its worker threads included) and
 * its children's (sherpa-onnx's recognizer and synthesizer processes, …),
 * found by walking /proc/<pid>/stat's ppid field.
 */

export interface ProcInfo {
  pid: number;
  ppid: number;
  rssKiB: number;
  command: string;
}

export interface MemorySnapshot {
  /** ms since the epoch. */
  at: number;
  serverKiB: number;
  childrenKiB: number;
  totalKiB: number;
  children: ProcInfo[];
}

function ppidOf(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 2 is "(comm)", which may itself hold spaces or parentheses: read after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(rest[1]);
  } catch {
    return undefined; // gone meanwhile
  }
}

function rssKiB(pid: number): number {
  try {
    const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) : 0;
  } catch {
    return 0;
  }
}

/** argv joined with spaces, cut to `max` characters. */
export function commandOf(pid: number, max = 96): string {
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    const text = argv.join(' ').replace(/\s+/g, ' ');
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  } catch {
    return '?';
  }
}

/** Every live descendant of `root` (children, grandchildren, …), parents first. */
export function descendants(root: number): Array<{ pid: number; ppid: number }> {
  const byParent = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    const ppid = ppidOf(pid);
    if (ppid === undefined) continue;
    const list = byParent.get(ppid) ?? [];
    list.push(pid);
    byParent.set(ppid, list);
  }
  const out: Array<{ pid: number; ppid: number }> = [];
  const queue = [root];
  while (queue.length) {
    const parent = queue.shift()!;
    for (const pid of byParent.get(parent) ?? []) {
      out.push({ pid, ppid: parent });
      queue.push(pid);
    }
  }
  return out;
}

export function snapshot(serverPid: number): MemorySnapshot {
  const serverKiB = rssKiB(serverPid);
  const children = descendants(serverPid).map(({ pid, ppid }) => ({ pid, ppid, rssKiB: rssKiB(pid), command: commandOf(pid) }));
  const childrenKiB = children.reduce((sum, c) => sum + c.rssKiB, 0);
  return { at: Date.now(), serverKiB, childrenKiB, totalKiB: serverKiB + childrenKiB, children };
}

/** Samples every `everyMs` and keeps the peaks (server, children, their sum at one instant). */
export class MemorySampler {
  peakServerKiB = 0;
  peakChildrenKiB = 0;
  peakTotalKiB = 0;
  peakChildCount = 0;
  samples = 0;
  /** Every sample: [ms since start, server KiB, children KiB]. */
  readonly timeline: Array<[number, number, number]> = [];
  private readonly t0 = Date.now();
  /** Every pid seen below the server while sampling, with its command. */
  readonly seen = new Map<number, string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly pid: number) {}

  sample(): MemorySnapshot {
    const s = snapshot(this.pid);
    this.samples++;
    this.peakServerKiB = Math.max(this.peakServerKiB, s.serverKiB);
    this.peakChildrenKiB = Math.max(this.peakChildrenKiB, s.childrenKiB);
    this.peakTotalKiB = Math.max(this.peakTotalKiB, s.totalKiB);
    this.peakChildCount = Math.max(this.peakChildCount, s.children.length);
    this.timeline.push([s.at - this.t0, s.serverKiB, s.childrenKiB]);
    for (const c of s.children) if (!this.seen.has(c.pid)) this.seen.set(c.pid, c.command);
    return s;
  }

  start(everyMs = 1000): void {
    this.sample();
    this.timer = setInterval(() => this.sample(), everyMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
