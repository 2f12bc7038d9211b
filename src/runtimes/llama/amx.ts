import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { writeFileWhole } from '../../core/write-whole.js';
import { moduleArgv } from '../launch/module-entry.js';

/**
 * Whether this machine may use AMX, Intel's tile matrix unit, which llama.cpp
 * (its sapphirerapids CPU variant) and ONNX Runtime (int8 GEMM) use whenever
 * the CPU reports it and the kernel grants the tile state. Virtual machines
 * can report AMX and grant it, yet not keep the tile registers across a
 * context switch: work then faults or computes garbage, and long-lived
 * worker threads are what expose it (a SIGSEGV inside an AMX kernel took the
 * whole server down before runners existed).
 *
 * So AMX is trusted only after a probe: in a child process (a fault kills
 * the probe, nothing else), twice as many threads as cores do int8 tile
 * products and give their core away between loading the tiles, multiplying
 * and storing; every product is checked against the same product computed
 * without AMX. The verdict is kept in the home, keyed by the CPU, the kernel
 * and the probe's binary, so it runs once per machine.
 *
 * When AMX is refused, runners load llama.cpp without its AMX variant (the
 * best one without AMX is chosen, runtime.ts) and install a seccomp filter
 * that denies the kernel's AMX permission to every runtime in the process,
 * ONNX Runtime included (`denyAmx`).
 *
 * LSERVE_AMX_PROBE=fail makes the probe fail (tests, and a machine known to be
 * bad); =pass trusts AMX without probing.
 */

export type AmxState =
  /** The CPU does not report AMX: nothing to decide. */
  | 'absent'
  /** The CPU reports AMX and the probe found it sound. */
  | 'trusted'
  /** The CPU reports AMX, but it is not used here. */
  | 'refused';

export interface AmxVerdict {
  state: AmxState;
  /** Why, in words, for load lines. */
  reason: string;
}

/** The shipped addon's exports the probe uses (threadpool.patch, lserveCpu.cpp). */
export interface CpuProbeBindings {
  lserveProbeAmx(threads: number, rounds: number): { reported: boolean; granted: boolean; mismatches: number; error?: string };
  lserveDenyAmx(): void;
}

const PROBE_TIMEOUT_MS = 30_000;
const PROBE_ROUNDS = 300;

/** The flags line of /proc/cpuinfo (empty elsewhere). */
function cpuFlags(): Set<string> {
  try {
    const line = /^flags\s*:(.*)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? '';
    return new Set(line.trim().split(/\s+/));
  } catch {
    return new Set();
  }
}

function cpuReportsAmx(): boolean {
  const flags = cpuFlags();
  return flags.has('amx_tile') && flags.has('amx_int8');
}

const verdicts = new Map<string, Promise<AmxVerdict>>();

/**
 * This machine's verdict on AMX: from the environment, the CPU's flags, the
 * probe's record in the home, or a probe run now with the addon that carries
 * it (`probeAddon`, asked for only when the CPU reports AMX); refused when AMX
 * is reported but no probe can run. Decided once per process.
 */
export function amxVerdict(home: string, probeAddon: () => Promise<string | undefined>, env = process.env): Promise<AmxVerdict> {
  const key = `${home}\0${env.LSERVE_AMX_PROBE ?? ''}`;
  let verdict = verdicts.get(key);
  if (!verdict) verdicts.set(key, (verdict = decide(home, probeAddon, env.LSERVE_AMX_PROBE)));
  return verdict;
}

async function decide(home: string, probeAddon: () => Promise<string | undefined>, setting: string | undefined): Promise<AmxVerdict> {
  if (setting === 'fail') return { state: 'refused', reason: 'the AMX probe failed (simulated: LSERVE_AMX_PROBE=fail)' };
  if (!cpuReportsAmx()) return { state: 'absent', reason: 'the CPU reports no AMX' };
  if (setting === 'pass') return { state: 'trusted', reason: 'AMX trusted without a probe (LSERVE_AMX_PROBE=pass)' };
  const addon = await probeAddon();
  if (!addon) return { state: 'refused', reason: 'the CPU reports AMX, but no AMX probe is available for this platform' };
  const record = path.join(home, 'llama', 'amx-probe.json');
  const identity = machineIdentity(addon);
  try {
    const saved = JSON.parse(await readFile(record, 'utf8')) as { identity: string; verdict: AmxVerdict };
    if (saved.identity === identity) return saved.verdict;
  } catch {
    // no record yet, or a damaged one: probe
  }
  const verdict = await probe(addon);
  await mkdir(path.dirname(record), { recursive: true });
  await writeFileWhole(record, `${JSON.stringify({ identity, verdict, probedAt: new Date().toISOString() }, null, 2)}\n`);
  return verdict;
}

/** The CPU, its microcode, the kernel and the probe's binary: a verdict holds while none of them changes. */
function machineIdentity(addon: string): string {
  const cpuinfo = (() => {
    try {
      return readFileSync('/proc/cpuinfo', 'utf8');
    } catch {
      return '';
    }
  })();
  const field = (name: string) => new RegExp(`^${name}\\s*:(.*)$`, 'm').exec(cpuinfo)?.[1]?.trim() ?? '';
  const hash = createHash('sha256');
  for (const part of [field('model name'), field('microcode'), field('flags'), os.release(), readFileSync(addon).length.toString()]) hash.update(`${part}\0`);
  return hash.digest('hex').slice(0, 16);
}

/** Runs the probe in a child process (amx-probe.ts): whatever it does to that process, this one is unharmed. */
function probe(addon: string): Promise<AmxVerdict> {
  const threads = 2 * os.availableParallelism();
  const argv = moduleArgv(new URL('./amx-probe.js', import.meta.url), [addon, String(threads), String(PROBE_ROUNDS)]);
  return new Promise((resolve) => {
    const child = spawn(process.execPath, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), PROBE_TIMEOUT_MS);
    const refuse = (why: string) => resolve({ state: 'refused', reason: `the AMX probe ${why}` });
    child.on('error', (error) => refuse(`could not run: ${error.message}`));
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      if (signal) return refuse(signal === 'SIGKILL' ? `did not finish within ${PROBE_TIMEOUT_MS / 1000} s` : `crashed (${signal})`);
      if (code !== 0) return refuse(`exited with code ${code}`);
      try {
        const result = JSON.parse(out) as ReturnType<CpuProbeBindings['lserveProbeAmx']>;
        if (!result.granted) return refuse(result.error ?? 'was not granted AMX');
        if (result.mismatches > 0) return refuse(`computed ${result.mismatches} wrong tile products across ${threads} descheduled threads`);
        resolve({ state: 'trusted', reason: `the AMX probe passed (${threads} threads, ${PROBE_ROUNDS} tile products each)` });
      } catch {
        refuse('gave no result');
      }
    });
  });
}

/**
 * Keeps AMX away from every runtime in this process (a runner): a seccomp
 * filter makes the kernel's AMX permission request fail, which llama.cpp and
 * ONNX Runtime both make before their first tile instruction. Must run before
 * either initialises.
 */
export function denyAmx(addon: string): void {
  (createRequire(import.meta.url)(addon) as CpuProbeBindings).lserveDenyAmx();
}
