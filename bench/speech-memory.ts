/**
 * Memory of the Piper speech path over many requests (not a test, not part of
 * `npm test`): one `lserve serve --metrics` child process with the suite's
 * synthetic Piper voice (test/fixtures/onnx/piper.ts, registered with
 * `lserve pull <dir> --kind tts`), N requests one after the other, and every
 * K requests the RSS of the server and of its sherpa-onnx synthesizer process
 * (from /proc), and the server's V8 heap and external memory (its own
 * /metrics). Growth that levels off is the allocators warming up; growth in
 * a straight line is a leak. The synthesizer process is replaced by a fresh
 * one every REPLACE_AFTER_SYNTHESES syntheses (src/runtimes/sherpa/
 * synthesizer.ts says why): the table lists its pids, and its growth is
 * summed up per process.
 *
 *   npx tsx bench/speech-memory.ts [--requests 2000] [--every 200] [--form wav|mp3|json|stream]
 *                                  [--sentences 2] [--heap-snapshots DIR] [--src]
 *
 * --form: how each request asks (wav, mp3: the audio bytes, OpenAI's form;
 * json: the specification's one-shot `{audio_url}`, which writes a file into
 * the cache, kept an hour; stream: a stream job, its audio fetched).
 * --heap-snapshots DIR: starts the server (and so its children, which inherit
 * NODE_OPTIONS) with --heapsnapshot-signal=SIGUSR2 and writes a heap
 * snapshot of both at the first and the last sample (a snapshot collects
 * garbage first), for Chrome DevTools' comparison view.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rename, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { syntheticPiperVoice } from '../test/fixtures/onnx/piper.js';
import { descendants, snapshot } from './load/proc.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

const { values: args } = parseArgs({
  options: {
    requests: { type: 'string', default: '2000' },
    every: { type: 'string', default: '200' },
    form: { type: 'string', default: 'wav' },
    sentences: { type: 'string', default: '2' },
    'heap-snapshots': { type: 'string' },
    src: { type: 'boolean', default: false },
  },
});
const requests = Number(args.requests);
const every = Number(args.every);
const sentences = Number(args.sentences);
const form = args.form;
if (!['wav', 'mp3', 'json', 'stream'].includes(form)) throw new Error('--form is wav, mp3, json or stream');
if (!(requests > 0 && every > 0 && sentences > 0)) throw new Error('--requests, --every and --sentences must be > 0');
if (process.platform !== 'linux') throw new Error('bench/speech-memory.ts reads /proc: Linux only');

const MODEL = 'piper-bench';
const WORDS = ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'a', 'lazy', 'dog', 'then', 'rests', 'in', 'warm', 'sun'];
const kib = (bytes: number) => Math.round(bytes / 1024);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function lserve(home: string, rest: string[], extraEnv: NodeJS.ProcessEnv = {}) {
  const argv = args.src ? ['--import', 'tsx', path.join(ROOT, 'src', 'cli', 'main.ts'), ...rest] : [path.join(ROOT, 'bin', 'lserve.js'), ...rest];
  const env: NodeJS.ProcessEnv = { ...process.env, LSERVE_HOME: home, NO_COLOR: '1', ...extraEnv };
  for (const name of ['LSERVE_HOST', 'LSERVE_PORT', 'LSERVE_API_KEY', 'LSERVE_CATALOG']) delete env[name];
  return spawn(process.execPath, argv, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
}

async function pull(home: string, dir: string): Promise<void> {
  const child = lserve(home, ['pull', dir, '--kind', 'tts', '--id', MODEL, '--quiet']);
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d));
  child.stderr!.on('data', (d: Buffer) => (output += d));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  if (code !== 0) throw new Error(`lserve pull failed (${code}):\n${output}`);
}

/** A different text each time (varying lengths), `sentences` sentences long. */
function text(i: number): string {
  const out: string[] = [];
  for (let s = 0; s < sentences; s++) {
    const n = 4 + ((i * 7 + s * 3) % 6);
    const words = Array.from({ length: n }, (_, w) => WORDS[(i * 5 + s * 11 + w * 3) % WORDS.length]!);
    out.push(`${words.join(' ').replace(/^./, (c) => c.toUpperCase())}.`);
  }
  return out.join(' ');
}

async function post(base: string, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${base}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

async function speak(base: string, i: number): Promise<void> {
  const body = { model: MODEL, input: text(i) };
  let res: Response;
  if (form === 'json') {
    res = await post(base, body);
  } else if (form === 'stream') {
    const job = await post(base, { ...body, stream: true });
    if (job.status !== 200) throw new Error(`request ${i}: ${job.status} ${await job.text()}`);
    res = await fetch(`${base}${((await job.json()) as { stream_url: string }).stream_url}`);
  } else {
    res = await post(base, { ...body, response_format: form });
  }
  if (res.status !== 200) throw new Error(`request ${i}: ${res.status} ${await res.text()}`);
  await res.arrayBuffer();
}

/** The server's V8 heap and external memory, from its own /metrics (prom-client's default metrics). */
async function serverHeap(base: string): Promise<{ heap: number; external: number }> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const read = (name: string) => Number(new RegExp(`^${name} (\\S+)`, 'm').exec(text)?.[1] ?? Number.NaN);
  return { heap: read('nodejs_heap_size_used_bytes'), external: read('nodejs_external_memory_bytes') };
}

async function heapSnapshots(pids: number[], into: string, label: string, cwd: string): Promise<void> {
  for (const pid of pids) process.kill(pid, 'SIGUSR2');
  // Node writes Heap.<date>.<pid>.<tid>.<seq>.heapsnapshot into its working directory.
  for (const pid of pids) {
    const deadline = Date.now() + 60_000;
    for (;;) {
      const file = (await readdir(cwd)).find((f) => f.includes(`.${pid}.`) && f.endsWith('.heapsnapshot'));
      if (file) {
        await sleep(2000); // written in one go, but give it time to finish
        await rename(path.join(cwd, file), path.join(into, `${label}-${pid}.heapsnapshot`));
        break;
      }
      if (Date.now() > deadline) throw new Error(`no heap snapshot from ${pid}`);
      await sleep(200);
    }
  }
}

interface Sample {
  requests: number;
  serverKiB: number;
  synthKiB: number;
  synthPids: number[];
  heapKiB: number;
  externalKiB: number;
  msPerRequest: number;
}

/**
 * The server's growth per request from the first sample after warm-up to the
 * last; the synthesizer's range per process (a fresh one takes over every so
 * many syntheses and warms up again, so one slope through all samples would
 * say nothing). A leak shows as the server's slope, or as a synthesizer
 * process whose later samples keep rising past the earlier ones.
 */
function summarize(rows: Sample[]): void {
  const from = rows.find((r) => r.requests === every) ?? rows[0]!;
  const to = rows[rows.length - 1]!;
  const span = to.requests - from.requests;
  if (span <= 0) return;
  const per = (a: number, b: number) => `${(((b - a) * 1024) / span).toFixed(0)} B`;
  console.log(`server, from ${from.requests} to ${to.requests} requests, per request: RSS ${per(from.serverKiB, to.serverKiB)}, V8 heap ${per(from.heapKiB, to.heapKiB)}, external ${per(from.externalKiB, to.externalKiB)}`);
  const alone = rows.filter((r) => r.requests >= every && r.synthPids.length === 1);
  for (const pid of new Set(alone.map((r) => r.synthPids[0]!))) {
    const mine = alone.filter((r) => r.synthPids[0] === pid);
    const kibs = mine.map((r) => r.synthKiB);
    console.log(`synthesizer pid ${pid}: ${mine.length} samples from ${mine[0]!.requests} to ${mine[mine.length - 1]!.requests} requests, RSS ${Math.min(...kibs)}–${Math.max(...kibs)} KiB`);
  }
}

async function main(): Promise<void> {
  const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-speech-memory-'));
  const snapshots = args['heap-snapshots'] ? path.resolve(args['heap-snapshots']) : undefined;
  if (snapshots) await mkdir(snapshots, { recursive: true });
  await pull(home, await syntheticPiperVoice());
  const env = snapshots ? { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --heapsnapshot-signal=SIGUSR2`.trim() } : {};
  const server = lserve(home, ['serve', '--host', '127.0.0.1', '--port', '0', '--metrics', '--keep-alive', '-1', '--log-format', 'text'], env);
  // The server's working directory is ROOT; its snapshots are written there, then moved.
  const base = await new Promise<string>((resolve, reject) => {
    let seen = '';
    for (const stream of [server.stdout!, server.stderr!]) {
      stream.on('data', (d: Buffer) => {
        seen += d.toString();
        const m = /lserve listening on (http:\/\/127\.0\.0\.1:\d+)\/v1/.exec(seen);
        if (m) resolve(m[1]!);
      });
    }
    server.on('exit', (code) => reject(new Error(`lserve serve exited (${code}):\n${seen}`)));
  });
  const pid = server.pid!;
  try {
    console.log(`server pid ${pid}, ${requests} requests (${form}, ${sentences} sentence(s) each), a sample every ${every}; ${os.cpus().length} CPUs, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
    console.log('requests  server RSS KiB  synth RSS KiB  synth pids  heap KiB  external KiB  ms/request');
    let last = performance.now();
    const rows: Sample[] = [];
    for (let i = 1; i <= requests; i++) {
      await speak(base, i);
      if (i % every !== 0 && i !== 1) continue;
      await sleep(200);
      const mem = snapshot(pid);
      // sherpa-onnx's synthesizer processes run runtimes/sherpa/synthesizer-child; during a replacement there are two for a moment.
      const synth = mem.children.filter((c) => c.command.includes('synthesizer-child.'));
      const heap = await serverHeap(base);
      const row: Sample = {
        requests: i,
        serverKiB: mem.serverKiB,
        synthKiB: synth.reduce((sum, c) => sum + c.rssKiB, 0),
        synthPids: synth.map((c) => c.pid),
        heapKiB: kib(heap.heap),
        externalKiB: kib(heap.external),
        msPerRequest: Math.round((performance.now() - last) / (i === 1 ? 1 : every)),
      };
      last = performance.now();
      rows.push(row);
      const cells = [row.requests, row.serverKiB, row.synthKiB, row.synthPids.join(','), row.heapKiB, row.externalKiB, row.msPerRequest];
      console.log(cells.map((v, c) => String(v).padStart([8, 15, 15, 12, 10, 14, 12][c]!)).join(''));
      if (snapshots && (i === every || i === requests)) {
        await heapSnapshots([pid, ...descendants(pid).map((d) => d.pid)], snapshots, i === every ? 'first' : 'last', ROOT);
      }
    }
    summarize(rows);
  } finally {
    server.kill('SIGTERM');
    await new Promise((resolve) => server.on('close', resolve));
    await rm(home, { recursive: true, force: true });
  }
}

await main();
