/**
 * Load and leak check (not a test, not part of `npm test`): every route at
 * once against one `lserve serve` child process on the suite's synthetic
 * models, with half of the streamed requests and WebSocket streams cut off
 * part-way, then checks that the server cleaned up after itself.
 *
 *   npx tsx bench/load.ts [--minutes 3] [--clients 6] [--seed 1] [--max-queue 1]
 *                         [--timeout 120] [--check-timeout 30] [--settle 10] [--per-route K/3]
 *                         [--max-loaded 16] [--keep-alive 5m] [--json out.json]
 *                         [--only route[:model],…]
 *                         [--src] [--keep]
 *   npx tsx bench/load.ts --churn [--rounds 5] [--minutes 1.5] [--builds default,prebuilt]
 *   npx tsx bench/load.ts --cycles 200 [--isolation process|server]
 *
 * 1. A fresh LSERVE_HOME in a temp dir, the fixtures written into it
 *    (test/fixtures/index.ts), each registered with `lserve pull <path> --kind`,
 *    then `lserve serve --host 127.0.0.1 --port 0 --max-queue N` (the built
 *    bin/lserve.js; `--src` runs src/cli/main.ts through tsx instead).
 * 2. One uncut request of every route × model, in turn; after each, the RSS of
 *    the server and of every process below it (/proc): the per-kind baselines.
 * 3. K clients for N minutes, each picking a route then a model with its own
 *    seeded PRNG; streamed requests and WebSocket streams are cut in half of
 *    the cases. RSS sampled every second (peaks).
 * 4. `--settle` seconds idle, then the final RSS and the child processes;
 *    /health, /v1/models and one uncut request of every route × model again,
 *    each within `--check-timeout` (a slot or lease leaked by a cut request
 *    would show as a hang or a 503 here: the server exposes no counter).
 * 5. PASS/FAIL per criterion, the tables, and `--json` with everything.
 *
 * --churn: the mixed load as a user with several models meets it: the
 * server's own default of three loaded models (`--max-loaded 3`), so models
 * are evicted and loaded again all the time, and every kind of route busy.
 * `--rounds` rounds, each running the load once per llama.cpp binary of
 * `--builds` (`default`: what a fresh install runs; `prebuilt`:
 * LSERVE_LLAMA_BUILD=prebuilt), in alternating order, on fresh servers over
 * the same fixtures. Then, per run and over all: server crashes, requests
 * answered (200 / clean WebSocket close) against the prebuilt binary's in
 * the same round, 5xx, the server tree's RSS after the run against its level
 * after the warm-up round (target ≤ 1.25 × + 256 MB; after the run means
 * after the checks, which replay the warm-up round, so the same three models
 * are loaded at both points), and processes left after SIGTERM. Each
 * client's sequence of requests comes from its seeded generator alone (no
 * per-route cap), so every run of a round does the same work.
 *
 * --cycles N: load/unload cycles over every kind, one request at a time with
 * `--keep-alive 0`, so each request loads its model and unloads it after; a
 * cycle is one request to one model of each kind (chat, embedding, rerank,
 * OCR, Whisper, the streaming recognizer, Qwen3-TTS, Piper, image). The
 * server tree's RSS (everything unloaded, after a second's settle) after 10
 * cycles and after N: memory a model leaves behind when it goes shows as
 * growth (target ≤ 1.10 ×).
 * `--isolation server` runs the models in the server's process
 * (LSERVE_RUNNERS=off), for comparison.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { seededRandom } from '../test/fixtures/gguf/format.js';
import { writeFixtures } from '../test/fixtures/index.js';
import { allOps, http, loadInputs, type Op, type Result } from './load/ops.js';
import { registerFixtures, startLserve, stopLserve, type Fixture, type Server } from './load/lserve.js';
import { commandOf, MemorySampler, snapshot, type MemorySnapshot, type ProcInfo } from './load/proc.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

const { values: args } = parseArgs({
  options: {
    minutes: { type: 'string', default: '3' },
    clients: { type: 'string', default: '6' },
    seed: { type: 'string', default: '1' },
    'max-queue': { type: 'string', default: '1' },
    timeout: { type: 'string', default: '120' },
    'check-timeout': { type: 'string', default: '30' },
    'per-route': { type: 'string' },
    settle: { type: 'string', default: '10' },
    'max-loaded': { type: 'string' },
    'keep-alive': { type: 'string', default: '5m' },
    only: { type: 'string' },
    json: { type: 'string' },
    src: { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
    churn: { type: 'boolean', default: false },
    rounds: { type: 'string', default: '5' },
    builds: { type: 'string', default: 'default,prebuilt' },
    cycles: { type: 'string' },
    isolation: { type: 'string', default: 'process' },
  },
});
const churn = args.churn;
if (churn && args.minutes === '3') args.minutes = '1.5';
// Churn runs at the server's default (3); the plain load check keeps every model loaded.
const maxLoaded = args['max-loaded'] ?? (churn ? '3' : '16');
const rounds = Number(args.rounds);
const builds = args.builds.split(',').filter(Boolean);
const minutes = Number(args.minutes);
const clients = Number(args.clients);
const seed = Number(args.seed);
const timeoutMs = Number(args.timeout) * 1000;
const checkTimeoutMs = Number(args['check-timeout']) * 1000;
const settleMs = Number(args.settle) * 1000;
/** Most clients in one route at once, so that a slow route (synthetic Whisper decodes to its token limit) does not absorb every client. */
const perRoute = Number(args['per-route'] ?? Math.max(1, Math.ceil(clients / 3)));
for (const [name, value] of Object.entries({ minutes, clients, seed, 'per-route': perRoute, timeout: timeoutMs, 'check-timeout': checkTimeoutMs, settle: settleMs })) {
  if (!Number.isFinite(value) || value < 0) throw new Error(`--${name} must be a number ≥ 0`);
}
if (process.platform !== 'linux') throw new Error('bench/load.ts reads /proc: Linux only');


const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const mib = (kib: number) => `${(kib / 1024).toFixed(0)} MiB`;
const pad = (s: string, n: number) => (s.length >= n ? s : s + ' '.repeat(n - s.length));
const lpad = (s: string, n: number) => (s.length >= n ? s : ' '.repeat(n - s.length) + s);
/** The serve flags of a run: queue bound, loaded models, keep-alive. */
const servingFlags = (maxQueue: string, keepAlive = args['keep-alive']) => ['--max-queue', maxQueue, '--max-loaded', maxLoaded, '--keep-alive', keepAlive];
const elapsed = (t0: number) => `${((performance.now() - t0) / 1000).toFixed(1)} s`;
const log = (message: string) => console.log(message);

// ---------------------------------------------------------------------------------------------
// The server

/** Server log lines that are routine (model loads, process starts, shutdown), not worth printing. */
const ROUTINE = /^(lserve listening on |playground: |loading \S+$|unloaded \S+$|evicting \S+ to make room for |unloading \S+: more models are loaded|SIGTERM: shutting down|started the sherpa-onnx \S+ \S+ process|replacing the sherpa-onnx \S+ \S+ process|sherpa-onnx [\d.]+ ready|\S+: context (plan|ready)|qwen3-tts \S+: \w+ model loaded in|qwen3-tts \S+: tok_decoder takes|\S+: sherpa-onnx .* loaded in |\S+: (text encoder (int8|fp32)|UNet and VAE decoder in fp32) )/;

/** A request log line (`POST /v1/ocr 200 12ms`) → its status, or undefined for other lines. */
function statusOf(line: string): number | undefined {
  const m = /^(GET|POST|PUT|DELETE|PATCH|HEAD|OPTIONS) \S+ (\d{3}) \d+ms$/.exec(line.trim());
  return m ? Number(m[2]) : undefined;
}

// ---------------------------------------------------------------------------------------------
// Bookkeeping

interface Record_ {
  route: string;
  model?: string;
  outcome: string;
  ms: number;
  cutAsked: boolean;
}

interface Problem extends Result {
  phase: string;
  route: string;
  model?: string;
  at: string;
}

const kindOf = (op: Op) => (op.model ? `${op.route} ${op.model}` : op.route);
/** An outcome that means the server failed (the load's cuts, 503s and 4xx are not failures). */
const serverError = (outcome: string) => (/^5\d\d$/.test(outcome) && outcome !== '503') || outcome === 'ws:1011';
const success = (outcome: string) => outcome === '200' || outcome === 'ws:1000';
const clientFailure = (outcome: string) => outcome.startsWith('error:') || (outcome.startsWith('ws:') && outcome !== 'ws:1000' && outcome !== 'ws:1011');

function percentile(values: number[], p: number): number {
  if (!values.length) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

// ---------------------------------------------------------------------------------------------

/** The fixtures registered into `home`; every op over them, narrowed by --only. */
async function registeredOps(home: string, fixtures: Fixture[]): Promise<Op[]> {
  const models = await registerFixtures(home, fixtures, { src: args.src });
  // --only chat.stream,speech:piper narrows every phase to those routes (and models whose id contains the text after ':').
  const only = args.only?.split(',').filter(Boolean).map((entry) => entry.split(':') as [string, string | undefined]);
  const ops = allOps(models, await loadInputs()).filter((op) => !only || only.some(([route, model]) => op.route === route && (!model || (op.model ?? '').includes(model))));
  if (!ops.length) throw new Error(`--only ${args.only} matches no route`);
  return ops;
}

/** What the churn mode compares across runs. */
interface RunOutcome {
  label: string;
  requests: number;
  /** Requests answered: 200, or a WebSocket stream closed cleanly. */
  answered: number;
  fiveXX: number;
  crashed: string | undefined;
  /** The server tree's RSS after the warm-up round (one request of each kind), and after the load, the settle and the checks (the same round again, so the same models are loaded). */
  warmKiB: number;
  finalKiB: number;
  lingering: number;
  loads: number;
  passed: boolean;
}

/** One load run against a fresh server (its own home, the fixtures registered into it), with its tables and criteria. */
async function loadRun(label: string, fixtures: Fixture[], extraEnv: NodeJS.ProcessEnv, jsonFile: string | undefined): Promise<RunOutcome> {
  const started = performance.now();
  const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-load-'));
  const problems: Problem[] = [];
  let server: Server | undefined;
  try {
    log(`\n=== ${label}: ${clients} clients × ${minutes} min, seed ${seed}, --max-queue ${args['max-queue']}, --max-loaded ${maxLoaded}, timeout ${timeoutMs / 1000} s, node ${process.version}, ${os.availableParallelism()} CPUs, ${mib(os.totalmem() / 1024)} RAM`);
    log(`home ${home}${args.src ? ' (server from src/ through tsx)' : ''}`);

    // 1. Fixtures, registered as a user would.
    const ops = await registeredOps(home, fixtures);
    log(`${fixtures.length} fixtures registered (${elapsed(started)})`);
    const routes = [...new Set(ops.map((o) => o.route))];

    server = await startLserve(home, servingFlags(args['max-queue']), extraEnv, { src: args.src });
    const base = server.base;
    const idle = snapshot(server.pid);
    log(`server pid ${server.pid} on ${base}: ${mib(idle.serverKiB)} RSS idle, ${idle.children.length} children (${elapsed(started)})`);

    // 2. One request of each kind, uncut, with the RSS after it.
    const baseline: Array<{ kind: string; outcome: string; ms: number; memory: Omit<MemorySnapshot, 'children'> & { childCount: number } }> = [];
    const firstRng = seededRandom(seed * 7919 + 1);
    log('\nFirst request of each kind (RSS 1 s after it: server + children = total):');
    for (const op of ops) {
      const t0 = performance.now();
      const r = await op.run({ base, rng: firstRng, cut: false, timeoutMs });
      const ms = Math.round(performance.now() - t0);
      await sleep(1000);
      const s = snapshot(server.pid);
      baseline.push({ kind: kindOf(op), outcome: r.outcome, ms, memory: { at: s.at, serverKiB: s.serverKiB, childrenKiB: s.childrenKiB, totalKiB: s.totalKiB, childCount: s.children.length } });
      if (!success(r.outcome)) problems.push({ ...r, phase: 'first', route: op.route, model: op.model, at: new Date().toISOString() });
      log(`  ${pad(kindOf(op), 62)} ${lpad(r.outcome, 7)} ${lpad(String(ms), 6)} ms   ${lpad(mib(s.serverKiB), 9)} + ${lpad(mib(s.childrenKiB), 8)} = ${lpad(mib(s.totalKiB), 9)}  (${s.children.length} children)`);
    }
    const baselineMax = baseline.reduce((m, b) => (b.memory.totalKiB > m.memory.totalKiB ? b : m), baseline[0]!);
    const before = snapshot(server.pid);
    log(`baseline (max of the per-kind figures): ${mib(baselineMax.memory.totalKiB)} after '${baselineMax.kind}' (${elapsed(started)})`);

    // 3. The load.
    const sampler = new MemorySampler(server.pid);
    sampler.start(1000);
    const records: Record_[] = [];
    const durationMs = minutes * 60_000;
    const loadStart = Date.now();
    const deadline = loadStart + durationMs;
    const maxPerClient = Math.max(10, Math.ceil((durationMs / 1000) * 20)); // ≤ 20 requests/s per client: a bound, never reached in practice
    const inFlight = new Map<number, { kind: string; since: number }>();
    const busy = new Map<string, number>();
    log(`\nLoad: ${clients} clients for ${minutes} min over ${routes.length} routes (${ops.length} route × model kinds), ${churn ? 'each client its own seeded sequence' : `at most ${perRoute} in one route at once`}…`);
    const progress = setInterval(() => {
      const open = [...inFlight.values()].map((f) => `${f.kind} ${Math.round((Date.now() - f.since) / 1000)}s`).join('; ');
      log(`  ${Math.round((Date.now() - loadStart) / 1000)} s: ${records.length} requests, RSS ${mib(sampler.peakTotalKiB)} peak; in flight: ${open || 'none'}`);
    }, 30_000);
    progress.unref();
    await Promise.all(
      Array.from({ length: clients }, async (_, k) => {
        const rng = seededRandom(seed * 1_000_003 + k + 17);
        for (let n = 0; n < maxPerClient && Date.now() < deadline && !server!.exited; n++) {
          // Churn compares binaries on the same work: each client's sequence of requests comes from its
          // own generator alone, not from which routes others keep busy at that moment.
          const free = churn ? routes : routes.filter((r) => (busy.get(r) ?? 0) < perRoute);
          const open = free.length ? free : routes;
          const route = open[Math.floor(rng() * open.length)]!;
          busy.set(route, (busy.get(route) ?? 0) + 1);
          const variants = ops.filter((o) => o.route === route);
          const op = variants[Math.floor(rng() * variants.length)]!;
          const cut = op.streamed && rng() < 0.5;
          const t0 = performance.now();
          inFlight.set(k, { kind: kindOf(op), since: Date.now() });
          const r = await op.run({ base, rng, cut, timeoutMs });
          inFlight.delete(k);
          busy.set(route, busy.get(route)! - 1);
          records.push({ route: op.route, model: op.model, outcome: r.outcome, ms: performance.now() - t0, cutAsked: cut });
          if (!success(r.outcome) && r.outcome !== 'cut' && r.outcome !== '503') problems.push({ ...r, phase: 'load', route: op.route, model: op.model, at: new Date().toISOString() });
        }
      }),
    );
    clearInterval(progress);
    const loadMs = Date.now() - loadStart;
    log(`load done: ${records.length} requests in ${(loadMs / 1000).toFixed(0)} s (${elapsed(started)})`);

    // 4. Settle, then the final state and the checks.
    await sleep(settleMs);
    const final = sampler.sample();
    sampler.stop();
    const checks: Array<{ kind: string; outcome: string; ms: number }> = [];
    const checkRng = seededRandom(seed * 7919 + 2);
    const probe = async (kind: string, run: () => Promise<Result>) => {
      const t0 = performance.now();
      const r = await run();
      const ms = Math.round(performance.now() - t0);
      checks.push({ kind, outcome: r.outcome, ms });
      if (!success(r.outcome)) problems.push({ ...r, phase: 'after', route: kind, at: new Date().toISOString() });
      return r;
    };
    const ctx = { base, rng: checkRng, cut: false, timeoutMs: checkTimeoutMs };
    const health = await probe('GET /health', () => http(ctx, '/health', { method: 'GET' }));
    const modelsList = await probe('GET /v1/models', () => http(ctx, '/v1/models', { method: 'GET' }));
    for (const op of ops) await probe(kindOf(op), () => op.run(ctx));
    const afterChecks = snapshot(server.pid);
    // Every runner alive after the load holds a model the server lists as loaded: none was orphaned.
    const listed = ((await (await fetch(`${base}/v1/ps`)).json()) as { models: Array<{ id: string; pid: number | null }> }).models;
    const orphans = afterChecks.children.filter((c) => c.command.includes('runner.') && !listed.some((m) => m.pid === c.pid));

    // 5. Shutdown: the server and every child it had must go.
    const exitedDuringRun = server.exited ? { ...server.exited } : undefined;
    const knownChildren = new Map<number, string>([...before.children, ...final.children, ...afterChecks.children].map((c) => [c.pid, c.command]));
    const stopped = await stopLserve(server);
    await sleep(500);
    const lingering = [...knownChildren].filter(([pid, command]) => existsSync(`/proc/${pid}`) && commandOf(pid) === command);
    for (const [pid] of lingering) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }

    // Server log: request lines by status, 5xx lines, and anything that is not a request line.
    // Model loads and unloads are routine; during the load they mean eviction or a reload.
    const logStatus = new Map<number, number>();
    const log5xx: string[] = [];
    const otherLog: string[] = [];
    const loadPhase = { loads: 0, unloads: 0 };
    for (const { at, line } of server.logs) {
      if (/^\s+at /.test(line) && otherLog.length) {
        otherLog[otherLog.length - 1] += `\n${line}`; // a stack trace's frames belong to the line above
        continue;
      }
      const status = statusOf(line);
      const during = at >= loadStart && at <= loadStart + loadMs;
      if (status !== undefined) {
        logStatus.set(status, (logStatus.get(status) ?? 0) + 1);
        if (status >= 500 && status !== 503) log5xx.push(line);
      } else if (ROUTINE.test(line)) {
        if (during && line.startsWith('loading ')) loadPhase.loads++;
        if (during && line.startsWith('unloaded ')) loadPhase.unloads++;
      } else if (line.trim()) otherLog.push(line);
    }

    // Tables.
    const byRoute = new Map<string, Record_[]>();
    for (const r of records) byRoute.set(r.route, [...(byRoute.get(r.route) ?? []), r]);
    const outcomesOf = (list: Record_[]) => {
      const counts = new Map<string, number>();
      for (const r of list) counts.set(r.outcome, (counts.get(r.outcome) ?? 0) + 1);
      return [...counts].sort((a, b) => b[1] - a[1]);
    };
    log('\nRequests during the load (cut: how many were to be cut; outcome×count; ms over completed 200 / ws:1000):');
    log(`  ${pad('route', 20)} ${lpad('n', 5)} ${lpad('cut', 4)}  ${pad('outcomes', 46)} ${lpad('p50', 6)} ${lpad('p95', 6)} ${lpad('max', 6)}`);
    for (const route of routes) {
      const list = byRoute.get(route) ?? [];
      const ok = list.filter((r) => success(r.outcome)).map((r) => r.ms);
      const f = (v: number) => (Number.isFinite(v) ? String(Math.round(v)) : '–');
      const cuts = ops.some((o) => o.route === route && o.streamed) ? String(list.filter((r) => r.cutAsked).length) : '';
      log(`  ${pad(route, 20)} ${lpad(String(list.length), 5)} ${lpad(cuts, 4)}  ${pad(outcomesOf(list).map(([o, n]) => `${o}×${n}`).join(' ') || '–', 46)} ${lpad(f(percentile(ok, 50)), 6)} ${lpad(f(percentile(ok, 95)), 6)} ${lpad(f(ok.length ? Math.max(...ok) : Number.NaN), 6)}`);
    }
    log(`  ${pad('all', 20)} ${lpad(String(records.length), 5)} ${lpad(String(records.filter((r) => r.cutAsked).length), 4)}  ${outcomesOf(records).map(([o, n]) => `${o}×${n}`).join(' ')}`);
    log(`  server log: ${[...logStatus].sort((a, b) => a[0] - b[0]).map(([s, n]) => `${s}×${n}`).join(' ')}; during the load ${loadPhase.loads} model loads, ${loadPhase.unloads} unloads${otherLog.length ? `; ${otherLog.length} unexpected lines (below)` : ''}`);

    const row = (label: string, server: number, children: number, total: number) => log(`  ${pad(label, 36)} ${lpad(mib(server), 10)} ${lpad(mib(children), 10)} ${lpad(mib(total), 10)}`);
    log('\nMemory (RSS):');
    log(`  ${pad('', 36)} ${lpad('server', 10)} ${lpad('children', 10)} ${lpad('total', 10)}`);
    row('idle, before any request', idle.serverKiB, idle.childrenKiB, idle.totalKiB);
    row(`baseline: after first requests (max)`, baselineMax.memory.serverKiB, baselineMax.memory.childrenKiB, baselineMax.memory.totalKiB);
    row('peak during load (1 s samples)', sampler.peakServerKiB, sampler.peakChildrenKiB, sampler.peakTotalKiB);
    row(`final, after ${settleMs / 1000} s idle`, final.serverKiB, final.childrenKiB, final.totalKiB);
    const tenth = (i: number) => sampler.timeline[Math.min(sampler.timeline.length - 1, Math.round((i / 10) * (sampler.timeline.length - 1)))]!;
    log(`  total over the load and settle, in tenths: ${Array.from({ length: 11 }, (_, i) => (tenth(i)[1] + tenth(i)[2]) / 1024).map((v) => v.toFixed(0)).join(' ')} MiB`);
    const ratio = final.totalKiB / baselineMax.memory.totalKiB;
    log(`  final / baseline: ${ratio.toFixed(3)} total, ${(final.serverKiB / baselineMax.memory.serverKiB).toFixed(3)} server, ${baselineMax.memory.childrenKiB ? (final.childrenKiB / baselineMax.memory.childrenKiB).toFixed(3) : '–'} children`);

    const listChildren = (label: string, list: ProcInfo[]) => {
      log(`  ${label}: ${list.length}`);
      for (const c of list) log(`    ${lpad(String(c.pid), 7)} ${lpad(mib(c.rssKiB), 8)}  ${c.command}`);
    };
    log('\nChild processes:');
    listChildren('before the load', before.children);
    listChildren(`after the load + ${settleMs / 1000} s`, final.children);
    const beforePids = new Set(before.children.map((c) => c.pid));
    const seenDuring = [...sampler.seen].filter(([pid]) => !beforePids.has(pid));
    if (seenDuring.length) log(`  started during the load (seen by the sampler): ${seenDuring.length}, ${seenDuring.filter(([, cmd]) => cmd.includes('runner.')).length} of them runners`);
    log(`  after shutdown: server exit ${stopped.code ?? stopped.signal} in ${stopped.ms} ms; ${lingering.length ? `${lingering.length} children left behind (killed): ${lingering.map(([pid]) => pid).join(', ')}` : 'no children left behind'}`);

    log('\nAfter the load (each within the check timeout):');
    const slowest = checks.reduce((m, c) => (c.ms > m.ms ? c : m), checks[0]!);
    const failed = checks.filter((c) => !success(c.outcome));
    log(`  ${checks.length - failed.length}/${checks.length} answered; slowest ${slowest.kind} ${slowest.ms} ms${failed.length ? `; FAILED: ${failed.map((c) => `${c.kind} → ${c.outcome} (${c.ms} ms)`).join('; ')}` : ''}`);

    // Criteria.
    const allOutcomes = [...records.map((r) => r.outcome), ...baseline.map((b) => b.outcome), ...checks.map((c) => c.outcome)];
    const fiveXX = allOutcomes.filter(serverError);
    const clientFailures = records.filter((r) => clientFailure(r.outcome));
    const criteria: Array<{ name: string; pass: boolean; detail: string }> = [
      {
        name: 'no 5xx except 503 (queue full)',
        pass: fiveXX.length === 0 && log5xx.length === 0,
        detail: `${fiveXX.length} answers (${[...new Set(fiveXX)].join(', ') || 'none'}), ${log5xx.length} in the server log; 503×${allOutcomes.filter((o) => o === '503').length}`,
      },
      {
        name: 'no hangs or dropped connections (besides our cuts)',
        pass: clientFailures.length === 0,
        detail: clientFailures.length ? outcomesOf(clientFailures).map(([o, n]) => `${o}×${n}`).join(' ') : 'none',
      },
      {
        name: 'server stayed up',
        pass: !exitedDuringRun,
        detail: exitedDuringRun ? `exited ${exitedDuringRun.code ?? exitedDuringRun.signal} at ${new Date(exitedDuringRun.at).toISOString()}` : `pid ${server.pid} up until shutdown`,
      },
      {
        name: 'memory within 25 % of the baseline',
        pass: ratio <= 1.25,
        detail: `final ${mib(final.totalKiB)} / baseline ${mib(baselineMax.memory.totalKiB)} = ${ratio.toFixed(3)} (peak ${mib(sampler.peakTotalKiB)})`,
      },
      {
        name: 'no leaked child processes',
        pass: orphans.length === 0 && lingering.length === 0,
        detail: `${afterChecks.children.length} after the checks for ${listed.length} loaded models${orphans.length ? `; runners of no loaded model: ${orphans.map((c) => c.pid).join(', ')}` : ''}; ${lingering.length} left after shutdown; peak ${sampler.peakChildCount}`,
      },
      {
        name: '/health and /v1/models answer at the end',
        pass: success(health.outcome) && success(modelsList.outcome),
        detail: `/health ${health.outcome}, /v1/models ${modelsList.outcome}`,
      },
      {
        name: 'slots and leases released: every kind answers after the load',
        pass: failed.length === 0,
        detail: `${checks.length - 2 - failed.filter((c) => !c.kind.startsWith('GET /')).length}/${checks.length - 2} kinds within ${checkTimeoutMs / 1000} s, slowest ${slowest.ms} ms`,
      },
    ];
    log('\nCriteria:');
    for (const c of criteria) log(`  ${c.pass ? 'PASS' : 'FAIL'}  ${pad(c.name, 62)} ${c.detail}`);

    if (problems.length) {
      log(`\nProblems (${problems.length}; first 12):`);
      for (const p of problems.slice(0, 12)) log(`  [${p.phase}] ${p.route}${p.model ? ` ${p.model}` : ''} → ${p.outcome}: ${p.detail ?? ''}\n      request: ${p.request ?? '?'}`);
    }
    if (log5xx.length || otherLog.length) {
      log('\nServer log (5xx request lines, then unexpected lines; first 20 each):');
      for (const line of log5xx.slice(0, 20)) log(`  ${line}`);
      const firsts = new Map<string, number>(); // the same message (first line) once, with a count
      for (const entry of otherLog) {
        const [first, ...frames] = entry.split('\n');
        const key = `${first}${frames.length ? ` (+${frames.length} stack lines; ${frames[0]!.trim()})` : ''}`;
        firsts.set(key, (firsts.get(key) ?? 0) + 1);
      }
      for (const [line, n] of [...firsts].slice(0, 20)) log(`  ${n > 1 ? `${n}× ` : ''}${line}`);
    }
    log(`\n(${elapsed(started)} in all)`);

    if (jsonFile) {
      const result = {
        args: { minutes, clients, seed, perRoute, only: args.only, maxQueue: Number(args['max-queue']), timeoutMs, checkTimeoutMs, settleMs, maxLoaded: Number(args['max-loaded']), keepAlive: args['keep-alive'], src: args.src },
        machine: { node: process.version, cpus: os.availableParallelism(), totalMemKiB: Math.round(os.totalmem() / 1024) },
        server: { pid: server.pid, base, exitedDuringRun, stopped, lingeringChildren: lingering.map(([pid, command]) => ({ pid, command })) },
        criteria,
        baseline,
        baselineMaxKiB: baselineMax.memory.totalKiB,
        memory: {
          idle: { serverKiB: idle.serverKiB, childrenKiB: idle.childrenKiB, totalKiB: idle.totalKiB },
          peak: { serverKiB: sampler.peakServerKiB, childrenKiB: sampler.peakChildrenKiB, totalKiB: sampler.peakTotalKiB, childCount: sampler.peakChildCount },
          final: { serverKiB: final.serverKiB, childrenKiB: final.childrenKiB, totalKiB: final.totalKiB },
          afterChecks: { serverKiB: afterChecks.serverKiB, childrenKiB: afterChecks.childrenKiB, totalKiB: afterChecks.totalKiB },
          finalOverBaseline: ratio,
          timeline: sampler.timeline,
        },
        children: { before: before.children, after: final.children, afterChecks: afterChecks.children, seenDuringLoad: [...sampler.seen].map(([pid, command]) => ({ pid, command })) },
        load: {
          ms: loadMs,
          requests: records.length,
          byRoute: Object.fromEntries(routes.map((route) => [route, Object.fromEntries(outcomesOf(byRoute.get(route) ?? []))])),
          byRouteAndModel: Object.fromEntries(ops.map((op) => [kindOf(op), Object.fromEntries(outcomesOf(records.filter((r) => r.route === op.route && r.model === op.model)))])),
          latencyMs: Object.fromEntries(
            routes.map((route) => {
              const ok = (byRoute.get(route) ?? []).filter((r) => success(r.outcome)).map((r) => r.ms);
              return [route, { n: ok.length, p50: Math.round(percentile(ok, 50)), p95: Math.round(percentile(ok, 95)), max: ok.length ? Math.round(Math.max(...ok)) : null }];
            }),
          ),
          cutsAsked: Object.fromEntries(routes.map((route) => [route, (byRoute.get(route) ?? []).filter((r) => r.cutAsked).length])),
        },
        checks,
        problems,
        serverLog: { statuses: Object.fromEntries(logStatus), fiveXX: log5xx, loadsDuringLoad: loadPhase.loads, unloadsDuringLoad: loadPhase.unloads, unexpected: otherLog.slice(0, 200) },
      };
      await writeFile(jsonFile, `${JSON.stringify(result, null, 2)}\n`);
      log(`JSON written to ${jsonFile}`);
    }
    return {
      label,
      requests: records.length,
      answered: records.filter((r) => success(r.outcome)).length,
      fiveXX: fiveXX.length + log5xx.length,
      crashed: exitedDuringRun ? String(exitedDuringRun.code ?? exitedDuringRun.signal) : undefined,
      warmKiB: before.totalKiB,
      // After the checks, which replay the warm-up round in its order: the same models are loaded as after it.
      finalKiB: afterChecks.totalKiB,
      lingering: lingering.length,
      loads: loadPhase.loads,
      passed: criteria.every((c) => c.pass),
    };
  } finally {
    if (server && !server.exited) await stopLserve(server);
    if (args.keep) log(`kept ${home}`);
    else await rm(home, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  if (!args.src && !existsSync(path.join(ROOT, 'dist', 'cli', 'main.js'))) throw new Error('dist/ is missing: run `npm run build` (or pass --src)');
  const fixturesHome = await mkdtemp(path.join(os.tmpdir(), 'lserve-load-fixtures-'));
  try {
    const fixtures = await writeFixtures(fixturesHome);
    if (args.cycles !== undefined) return await cycleRun(fixtures, Number(args.cycles));
    if (!churn) {
      const outcome = await loadRun('load check', fixtures, {}, args.json);
      process.exitCode = outcome.passed ? 0 : 1;
      return;
    }
    const outcomes: RunOutcome[][] = [];
    for (let round = 0; round < rounds; round++) {
      // Alternating order: whatever drifts over a round (the page cache, the machine's other load) hits each binary first in turn.
      const order = round % 2 === 0 ? builds : [...builds].reverse();
      const results: RunOutcome[] = [];
      for (const build of order) {
        const env = build === 'default' ? { LSERVE_LLAMA_BUILD: undefined } : { LSERVE_LLAMA_BUILD: build };
        results.push(await loadRun(`round ${round + 1}/${rounds}, ${build}`, fixtures, env, args.json?.replace(/\.json$/, `.${round + 1}.${build}.json`)));
      }
      outcomes.push(builds.map((build) => results.find((r) => r.label.endsWith(`, ${build}`))!));
    }
    churnSummary(outcomes);
  } finally {
    await rm(fixturesHome, { recursive: true, force: true });
  }
}

/** Load/unload cycles (--cycles): the server tree's RSS after 10 and after all of them. */
async function cycleRun(fixtures: Fixture[], cycles: number): Promise<void> {
  const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-cycles-'));
  let server: Server | undefined;
  try {
    const env = args.isolation === 'server' ? { LSERVE_RUNNERS: 'off' } : {};
    // One model of each kind, uncut.
    const all = await registeredOps(home, fixtures);
    const kinds: Array<[string, string]> = [
      ['chat', 'synthetic-qwen3-chat'],
      ['embeddings', 'synthetic-bge-embedding'],
      ['rerank', 'synthetic-bge-reranker'],
      ['ocr', 'ppocr-v4-mobile'],
      ['transcription', 'synthetic-whisper-tiny'],
      ['transcription.ws', 'synthetic-zipformer-streaming'],
      ['speech', 'synthetic-qwen3-tts-customvoice'],
      ['speech', 'synthetic-piper-voice'],
      ['images.generations', 'synthetic-sd-turbo'],
    ];
    const ops = kinds.map(([route, model]) => all.find((op) => op.route === route && op.model === model)!);
    // --metrics: where the server's own memory is (V8's heap or outside it), at each mark.
    server = await startLserve(home, [...servingFlags('8', '0'), '--metrics'], env, { src: args.src });
    log(`${cycles} load/unload cycles of ${ops.length} models, one of each kind (keep-alive 0, models ${args.isolation === 'server' ? 'in the server process' : 'in runners'}), server pid ${server.pid}`);
    const rng = seededRandom(seed);
    const settled = async () => {
      await sleep(1000);
      return snapshot(server!.pid);
    };
    const marks: Array<{ cycle: number; totalKiB: number; serverKiB: number; children: number }> = [];
    const failures: string[] = [];
    const t0 = performance.now();
    for (let cycle = 1; cycle <= cycles; cycle++) {
      for (const op of ops) {
        const r = await op.run({ base: server.base, rng, cut: false, timeoutMs });
        if (!success(r.outcome)) failures.push(`${cycle}: ${kindOf(op)} → ${r.outcome}`);
      }
      if (cycle === 10 || cycle === cycles || cycle % 25 === 0) {
        const s = await settled();
        marks.push({ cycle, totalKiB: s.totalKiB, serverKiB: s.serverKiB, children: s.children.length });
        const heap = await serverHeap(server.base);
        log(`  after ${lpad(String(cycle), 4)} cycles: ${lpad(mib(s.totalKiB), 9)} in all (server ${mib(s.serverKiB)}: ${heap}; ${s.children.length} children) ${elapsed(t0)}`);
      }
    }
    const at10 = marks.find((m) => m.cycle === 10)!;
    const atEnd = marks.at(-1)!;
    const ratio = atEnd.totalKiB / at10.totalKiB;
    log(`\n  ${ratio <= 1.1 ? 'PASS' : 'FAIL'}  RSS after ${cycles} cycles / after 10 (target ≤ 1.10): ${ratio.toFixed(3)} (${mib(atEnd.totalKiB)} / ${mib(at10.totalKiB)}); server alone ${(atEnd.serverKiB / at10.serverKiB).toFixed(3)}`);
    log(`  ${failures.length === 0 ? 'PASS' : 'FAIL'}  every request answered: ${failures.length ? failures.slice(0, 10).join('; ') : `${cycles * ops.length}/${cycles * ops.length}`}`);
    process.exitCode = ratio <= 1.1 && failures.length === 0 ? 0 : 1;
  } finally {
    if (server && !server.exited) await stopLserve(server);
    await rm(home, { recursive: true, force: true });
  }
}

/** Where the server's own memory is, from prom-client's process metrics: V8's heap (allocated, in use) and memory outside it. */
async function serverHeap(base: string): Promise<string> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const value = (name: string) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  const m = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)}`;
  return `V8 heap ${m(value('nodejs_heap_size_total_bytes'))} MiB (${m(value('nodejs_heap_size_used_bytes'))} used), external ${m(value('nodejs_external_memory_bytes'))}`;
}

/** The churn criteria over every round: the first of --builds against the last (the prebuilt binary). */
function churnSummary(outcomes: RunOutcome[][]): void {
  const mibOf = (kib: number) => kib / 1024;
  log(`\nChurn summary (${rounds} rounds × ${builds.join(', ')}; ${minutes} min each, --max-loaded ${maxLoaded}):`);
  log(`  ${pad('run', 28)} ${lpad('answered', 9)} ${lpad('requests', 9)} ${lpad('loads', 6)} ${lpad('5xx', 4)} ${lpad('crash', 6)} ${lpad('warm MiB', 9)} ${lpad('after MiB', 10)} ${lpad('limit', 7)} ${lpad('left', 5)}`);
  for (const round of outcomes) {
    for (const o of round) {
      const limit = 1.25 * mibOf(o.warmKiB) + 256;
      log(`  ${pad(o.label, 28)} ${lpad(String(o.answered), 9)} ${lpad(String(o.requests), 9)} ${lpad(String(o.loads), 6)} ${lpad(String(o.fiveXX), 4)} ${lpad(o.crashed ?? '-', 6)} ${lpad(mibOf(o.warmKiB).toFixed(0), 9)} ${lpad(mibOf(o.finalKiB).toFixed(0), 10)} ${lpad(limit.toFixed(0), 7)} ${lpad(String(o.lingering), 5)}`);
    }
  }
  const first = outcomes.map((round) => round[0]!);
  const last = outcomes.map((round) => round.at(-1)!);
  const ratios = first.map((o, i) => o.answered / Math.max(1, last[i]!.answered));
  const all = outcomes.flat();
  const criteria = [
    { name: 'no crash of the server process', pass: all.every((o) => !o.crashed), detail: all.filter((o) => o.crashed).map((o) => `${o.label}: ${o.crashed}`).join('; ') || 'none' },
    {
      name: `requests answered, ${builds[0]} ≥ 0.95 × ${builds.at(-1)} in each round`,
      pass: ratios.every((r) => r >= 0.95),
      detail: ratios.map((r) => r.toFixed(2)).join(', '),
    },
    { name: 'no 5xx', pass: all.every((o) => o.fiveXX === 0), detail: all.map((o) => o.fiveXX).join(', ') },
    {
      name: "server tree's RSS after the run ≤ 1.25 × after the warm-up + 256 MB",
      pass: all.every((o) => mibOf(o.finalKiB) <= 1.25 * mibOf(o.warmKiB) + 256),
      detail: all.map((o) => `${mibOf(o.finalKiB).toFixed(0)}/${(1.25 * mibOf(o.warmKiB) + 256).toFixed(0)}`).join(', '),
    },
    { name: 'no process left after SIGTERM', pass: all.every((o) => o.lingering === 0), detail: all.map((o) => o.lingering).join(', ') },
  ];
  log('\nChurn criteria:');
  for (const c of criteria) log(`  ${c.pass ? 'PASS' : 'FAIL'}  ${pad(c.name, 70)} ${c.detail}`);
  process.exitCode = criteria.every((c) => c.pass) ? 0 : 1;
}

await main();
