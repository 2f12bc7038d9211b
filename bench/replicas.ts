/**
 * Replicas behind a load balancer (not a test, not part of `npm test`):
 * identical `lserve serve` replicas sharing one model store, one PostgreSQL
 * database and one files directory, behind HAProxy with the shipped
 * configuration (deploy/haproxy.cfg, its servers replaced by the replicas),
 * round robin, every request through HAProxy.
 *
 *   npx tsx bench/replicas.ts [--replicas 3] [--seconds 60] [--clients 6] [--seed 1]
 *                             [--ocr-seconds 20] [--ocr-clients 4] [--keep]
 *
 * Needs HAProxy and PostgreSQL's server binaries (Debian: apt-get install
 * haproxy postgresql); without them it says so and exits 0. Runs the built
 * CLI (`npm run build` first).
 *
 * 1. Shared state: one request after another, so that round robin sends
 *    each step to the next replica: speech stream jobs (POST, then GET of
 *    the stream_url), speech files and image URLs (POST, then GET of the
 *    file), and Responses chains (a stored response, then each follow-up
 *    with previous_response_id, then the chain's input items). Each must
 *    resolve whichever replica answers.
 * 2. Mixed load and a crash: `--clients` clients send every route of
 *    bench/load.ts (the suite's synthetic models) plus stored Responses for
 *    `--seconds`; halfway, one replica gets SIGKILL. Each request carries
 *    an id that HAProxy logs with the replica that served it, so every
 *    failure is traced to its replica: only requests in flight on the
 *    killed replica may fail, the others must keep answering, and the
 *    killed replica's runner processes must not outlive it. Then everything
 *    stored before and during the load (responses, files) is read back
 *    through the survivors.
 * 3. OCR throughput with 1, 2 and 3 replicas in rotation (HAProxy
 *    restarted with that many servers): requests/s, closed loop. The models
 *    and replicas share this machine's cores, so on 2 cores more replicas
 *    add no arithmetic: the figure shows what balancing costs, not gains.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { seededRandom } from '../test/fixtures/gguf/format.js';
import { writeFixtures } from '../test/fixtures/index.js';
import { freePort } from '../test/helpers/free-port.js';
import { NEEDS_POSTGRES, postgresAvailable, startPostgres } from '../test/helpers/postgres.js';
import { allOps, errorKind, loadInputs, type Models, type Op, type OpContext, type Result } from './load/ops.js';
import { registerFixtures, startLserve, stopLserve, type Server } from './load/lserve.js';
import { commandOf, descendants } from './load/proc.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const { values: args } = parseArgs({
  options: {
    replicas: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '60' },
    clients: { type: 'string', default: '6' },
    seed: { type: 'string', default: '1' },
    'ocr-seconds': { type: 'string', default: '20' },
    'ocr-clients': { type: 'string', default: '4' },
    keep: { type: 'boolean', default: false },
  },
});
const replicaCount = Number(args.replicas);
const loadSeconds = Number(args.seconds);
const clients = Number(args.clients);
const ocrSeconds = Number(args['ocr-seconds']);
const ocrClients = Number(args['ocr-clients']);
const TIMEOUT_MS = 120_000;

const log = (message: string) => console.log(message);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const pad = (s: string | number, n: number) => String(s).padEnd(n);

function haproxyBinary(): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter), '/usr/sbin', '/usr/local/sbin'];
  return dirs.filter((dir) => path.isAbsolute(dir)).map((dir) => path.join(dir, 'haproxy')).find((file) => existsSync(file));
}


// ---------------------------------------------------------------------------------------------
// HAProxy, from the shipped configuration

interface Balancer {
  base: string;
  child: ChildProcess;
  /** Request id → the replicas that served it (an op may make several requests), from HAProxy's log. */
  servedBy: Map<string, string[]>;
  stop(): Promise<void>;
}

/**
 * deploy/haproxy.cfg as shipped, with its frontend bound to a loopback port,
 * its servers replaced by `replicas`, and each request's X-Bench-Id logged
 * with the server that answered it.
 */
async function startBalancer(binary: string, dir: string, replicas: Array<{ name: string; base: string }>): Promise<Balancer> {
  const shipped = await readFile(path.join(ROOT, 'deploy', 'haproxy.cfg'), 'utf8');
  const port = await freePort();
  if (!/^\s*bind :8080$/m.test(shipped) || !/^\s*server lserve1 /m.test(shipped)) throw new Error('deploy/haproxy.cfg changed: its bind or server lines are not where this bench expects them');
  const config = shipped
    .replace(/^(\s*)bind :8080$/m, `$1bind 127.0.0.1:${port}\n$1capture request header X-Bench-Id len 40\n$1log-format "bench %[capture.req.hdr(0)] %s %ST %tsc"`)
    .replace(/^\s*server lserve\d .*\n/gm, '')
    .concat(replicas.map((r) => `    server ${r.name} ${new URL(r.base).host}\n`).join(''));
  const file = path.join(dir, `haproxy-${replicas.length}.cfg`);
  await writeFile(file, config);
  const child = spawn(binary, ['-db', '-f', file], { stdio: ['ignore', 'pipe', 'pipe'] });
  const servedBy = new Map<string, string[]>();
  let pending = '';
  child.stdout!.on('data', (d: Buffer) => {
    pending += d.toString('utf8');
    const lines = pending.split('\n');
    pending = lines.pop()!;
    for (const line of lines) {
      const m = /bench \{?([^ }]*)\}? (\S+) /.exec(line);
      if (m && m[1]) servedBy.set(m[1], [...(servedBy.get(m[1]) ?? []), m[2]!]);
    }
  });
  let errors = '';
  child.stderr!.on('data', (d: Buffer) => (errors += d.toString('utf8')));
  const base = `http://127.0.0.1:${port}`;
  // Ready once every server has passed its /ready checks (rise 2, inter 2s).
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`haproxy exited: ${errors}`);
    const seen = new Set<string>();
    for (let i = 0; i < replicas.length * 2; i++) {
      const id = `probe-${i}`;
      const res = await fetch(`${base}/health`, { headers: { 'x-bench-id': id } }).catch(() => undefined);
      if (res?.status === 200) await res.arrayBuffer();
    }
    await sleep(100);
    for (const [id, names] of servedBy) if (id.startsWith('probe-')) for (const name of names) seen.add(name);
    servedBy.clear();
    if (seen.size === replicas.length) break;
    if (Date.now() > deadline) throw new Error(`haproxy did not put every replica in rotation within 30 s (saw ${[...seen].join(', ') || 'none'}): ${errors}`);
    await sleep(1000);
  }
  return {
    base,
    child,
    servedBy,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      await new Promise((resolve) => child.once('exit', resolve));
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Requests through the balancer

interface Done {
  id: string;
  route: string;
  outcome: string;
  detail?: string;
  start: number;
  end: number;
}

let nextId = 0;
/** Runs `op` with a fresh request id, through the balancer. */
async function tracked(balancer: Balancer, op: { route: string; run(ctx: OpContext): Promise<Result> }, rng: () => number): Promise<Done> {
  const id = `r${++nextId}`;
  const start = Date.now();
  const result = await op.run({ base: balancer.base, rng, cut: false, timeoutMs: TIMEOUT_MS, headers: { 'x-bench-id': id } });
  return { id, route: op.route, outcome: result.outcome, detail: result.detail, start, end: Date.now() };
}

/** A JSON POST; a connection that fails is status 0 with the error's kind. */
async function postJson(balancer: Balancer, id: string, route: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  try {
    const res = await fetch(`${balancer.base}${route}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-bench-id': id }, body: JSON.stringify(body) });
    return { status: res.status, json: (await res.json().catch(() => ({}))) as Record<string, unknown> };
  } catch (error) {
    return { status: 0, json: { error: errorKind(error) } };
  }
}

/** A GET's status, the whole body read; 0 when the connection fails. */
async function getStatus(balancer: Balancer, id: string, route: string): Promise<number> {
  try {
    const res = await fetch(`${balancer.base}${route}`, { headers: { 'x-bench-id': id } });
    await res.arrayBuffer();
    return res.status;
  } catch {
    return 0;
  }
}

/** What was stored through the balancer, to read back after the crash. */
interface Stored {
  responses: string[];
  files: string[];
}

/**
 * A stored response and `followUps` more in its chain, each through
 * whichever replica. A follow-up whose previous_response_id were not found
 * would be a 404; one found but read short would not grow: each step's
 * input_tokens must exceed the one before (the earlier turns are in it).
 */
async function responsesChain(balancer: Balancer, models: Models, followUps: number): Promise<{ ok: boolean; ids: string[]; replicas: string[]; detail?: string }> {
  const ids: string[] = [];
  const replicas: string[] = [];
  const inputTokens: number[] = [];
  let previous: string | undefined;
  for (let step = 0; step <= followUps; step++) {
    const id = `r${++nextId}`;
    const answer = await postJson(balancer, id, '/v1/responses', { model: models.chat, input: `Step ${step}: name a river.`, max_output_tokens: 4, store: true, ...(previous ? { previous_response_id: previous } : {}) });
    replicas.push(...(balancer.servedBy.get(id) ?? ['?']));
    if (answer.status !== 200) return { ok: false, ids, replicas, detail: `step ${step}: ${answer.status} ${JSON.stringify(answer.json).slice(0, 200)}` };
    previous = answer.json.id as string;
    ids.push(previous);
    inputTokens.push((answer.json.usage as { input_tokens: number }).input_tokens);
  }
  const grows = inputTokens.every((n, i) => i === 0 || n > inputTokens[i - 1]!);
  return { ok: grows, ids, replicas, detail: grows ? undefined : `input_tokens along the chain: ${inputTokens.join(', ')}` };
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const haproxy = haproxyBinary();
  if (!haproxy || !postgresAvailable) {
    log(`skipping: bench/replicas.ts needs HAProxy and PostgreSQL (${!haproxy ? 'no haproxy; ' : ''}${!postgresAvailable ? NEEDS_POSTGRES : ''}). Debian: apt-get install haproxy postgresql`);
    return;
  }
  if (!existsSync(path.join(ROOT, 'dist', 'cli', 'main.js'))) throw new Error('dist/ is missing: run `npm run build`');
  const root = await mkdtemp(path.join(os.tmpdir(), 'lserve-replicas-'));
  const postgres = await startPostgres();
  const replicas: Array<{ name: string; home: string; server?: Server }> = [];
  let balancer: Balancer | undefined;
  try {
    log(`machine: ${os.cpus().length} cores, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}; work dir ${root}`);
    // One model store, filled once by one writer (the pull Job of deploy/kubernetes), read by every replica.
    const store = path.join(root, 'store');
    const models = await registerFixtures(store, await writeFixtures(path.join(root, 'fixtures')));
    const databaseUrl = await postgres.createDatabase();
    const filesDir = path.join(root, 'files');
    const flags = ['--database-url', databaseUrl, '--files-dir', filesDir, '--max-loaded', '16', '--max-queue', '16', '--drain-grace', '0', '--drain-timeout', '5s'];
    const start = async (replica: (typeof replicas)[number]) => {
      replica.server = await startLserve(replica.home, flags);
    };
    for (let i = 1; i <= replicaCount; i++) {
      const home = path.join(root, `replica-${i}`);
      await mkdir(home, { recursive: true });
      await symlink(path.join(store, 'models'), path.join(home, 'models'));
      replicas.push({ name: `lserve${i}`, home });
    }
    await Promise.all(replicas.map(start));
    const members = () => replicas.map((r) => ({ name: r.name, base: r.server!.base }));
    balancer = await startBalancer(haproxy, root, members());
    log(`${replicaCount} replicas (${replicas.map((r) => r.server!.base).join(', ')}) behind HAProxy at ${balancer.base}; database ${databaseUrl.replace(/\/\/[^@]*@/, '//…@')}; files ${filesDir}`);
    const inputs = await loadInputs();
    const ops = allOps(models, inputs);
    const rng = seededRandom(Number(args.seed));

    // 1. Shared state, one step at a time.
    log('\n1. Shared state through round robin (each step may land on another replica)');
    const stored: Stored = { responses: [], files: [] };
    const byRoute = (route: string) => ops.filter((op) => op.route === route);
    const stateOps = [...byRoute('speech.stream'), ...byRoute('speech')];
    const rows: Array<[string, number, number, number]> = [];
    for (const op of stateOps) {
      let ok = 0;
      let crossed = 0;
      const rounds = replicaCount * 2;
      for (let i = 0; i < rounds; i++) {
        const done = await tracked(balancer, op, rng);
        const served = balancer.servedBy.get(done.id) ?? [];
        if (done.outcome === '200') ok++;
        else log(`  ${op.route} ${op.model ?? ''}: ${done.outcome} ${done.detail ?? ''}`);
        if (new Set(served).size > 1) crossed++;
      }
      rows.push([`${op.route} ${op.model ?? ''}`.trim(), rounds, ok, crossed]);
    }
    // Image URLs (the generations op asks for b64_json mostly): ask for URLs and fetch them through another replica.
    const imageTries = replicaCount * 2;
    let imagesOk = 0;
    let imagesCrossed = 0;
    for (let i = 0; i < imageTries; i++) {
      const id = `r${++nextId}`;
      const answer = await postJson(balancer, id, '/v1/images/generations', { model: models.image, prompt: `a lighthouse ${i}`, size: '64x64', steps: 1, seed: i, response_format: 'url' });
      const url = (answer.json.data as Array<{ url?: string }> | undefined)?.[0]?.url;
      if (answer.status !== 200 || !url) {
        log(`  images.url: ${answer.status} ${JSON.stringify(answer.json).slice(0, 200)}`);
        continue;
      }
      const fileRoute = new URL(url).pathname;
      const getId = `r${++nextId}`;
      if ((await getStatus(balancer, getId, fileRoute)) === 200) imagesOk++;
      stored.files.push(fileRoute);
      if (balancer.servedBy.get(id)?.[0] !== balancer.servedBy.get(getId)?.[0]) imagesCrossed++;
    }
    rows.push(['images.url: generate, then GET the file', imageTries, imagesOk, imagesCrossed]);
    let chainsOk = 0;
    const chainReplicas = new Set<string>();
    for (let i = 0; i < replicaCount * 2; i++) {
      const chain = await responsesChain(balancer, models, 3);
      if (chain.ok) chainsOk++;
      else log(`  responses chain: ${chain.detail}`);
      stored.responses.push(...chain.ids);
      for (const r of chain.replicas) chainReplicas.add(r);
    }
    log(`  ${pad('what', 52)} ${pad('tries', 6)} ${pad('resolved', 9)} across replicas`);
    for (const [name, n, ok, crossed] of rows) log(`  ${pad(name, 52)} ${pad(n, 6)} ${pad(ok, 9)} ${crossed}`);
    log(`  ${pad('responses: 4-step previous_response_id chains', 52)} ${pad(replicaCount * 2, 6)} ${pad(chainsOk, 9)} steps on ${[...chainReplicas].join(', ')}`);

    // 2. Mixed load, one replica killed halfway.
    const victim = replicas[replicaCount > 1 ? 1 : 0]!;
    log(`\n2. ${clients} clients, every route, ${loadSeconds} s; ${victim.name} gets SIGKILL at ${loadSeconds / 2} s`);
    const chainOp = {
      route: 'responses.chain',
      run: async (): Promise<Result> => {
        const chain = await responsesChain(balancer!, models, 1);
        stored.responses.push(...chain.ids);
        return chain.ok ? { outcome: '200' } : { outcome: 'error:chain', detail: chain.detail };
      },
    };
    const mix: Array<{ route: string; run(ctx: OpContext): Promise<Result> }> = [...ops.filter((op: Op) => op.route !== 'models'), chainOp];
    const done: Done[] = [];
    const t0 = Date.now();
    const stopAt = t0 + loadSeconds * 1000;
    let killedAt = 0;
    let orphans: number[] = [];
    const killer = (async () => {
      await sleep((loadSeconds * 1000) / 2);
      const runners = descendants(victim.server!.pid).map((p) => p.pid);
      killedAt = Date.now();
      victim.server!.child.kill('SIGKILL');
      // Its runner processes (one per loaded model) see their parent go and exit.
      await sleep(5_000);
      orphans = runners.filter((pid) => existsSync(`/proc/${pid}`));
    })();
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        const clientRng = seededRandom(Number(args.seed) * 100 + c);
        while (Date.now() < stopAt) {
          const op = mix[Math.floor(clientRng() * mix.length)]!;
          done.push(await tracked(balancer!, op, clientRng));
        }
      }),
    );
    await killer;
    await sleep(500); // HAProxy logs a request when it ends: let the last lines in
    const servedOf = (d: Done) => balancer!.servedBy.get(d.id) ?? [];
    const inFlightAtKill = (d: Done) => d.start <= killedAt && d.end >= killedAt;
    const outcomes = new Map<string, number>();
    for (const d of done) outcomes.set(d.outcome, (outcomes.get(d.outcome) ?? 0) + 1);
    const failed = done.filter((d) => d.outcome !== '200' && d.outcome !== 'ws:1000');
    const explained = failed.filter((d) => inFlightAtKill(d) && (servedOf(d).includes(victim.name) || servedOf(d).length === 0));
    const unexplained = failed.filter((d) => !explained.includes(d));
    const afterKill = done.filter((d) => d.start > killedAt + 100);
    const survivors = new Map<string, number>();
    for (const d of afterKill) if (d.outcome === '200' || d.outcome === 'ws:1000') for (const name of new Set(servedOf(d))) survivors.set(name, (survivors.get(name) ?? 0) + 1);
    log(`  requests: ${done.length}; by outcome: ${[...outcomes].map(([o, n]) => `${o} ${n}`).join(', ')}`);
    log(`  failed: ${failed.length}, of which in flight on ${victim.name} when it was killed: ${explained.length}; any other failure: ${unexplained.length}`);
    for (const d of unexplained.slice(0, 10)) log(`    ${d.route} ${d.outcome} on ${servedOf(d).join(',') || '?'} at ${((d.start - t0) / 1000).toFixed(1)}–${((d.end - t0) / 1000).toFixed(1)} s: ${d.detail ?? ''}`);
    log(`  runner processes the killed replica left running 5 s later: ${orphans.length}${orphans.length ? ` (${orphans.map((pid) => commandOf(pid, 60)).join('; ')})` : ''}`);
    log(`  answered after the kill, by replica: ${[...survivors].map(([n, k]) => `${n} ${k}`).join(', ') || 'none'}${survivors.has(victim.name) ? ' (the killed replica must not appear)' : ''}`);

    // Nothing stored was lost: every response and file written through any replica reads back through the survivors.
    let responsesBack = 0;
    for (const id of stored.responses) if ((await getStatus(balancer, `r${++nextId}`, `/v1/responses/${id}`)) === 200) responsesBack++;
    let filesBack = 0;
    for (const route of stored.files) if ((await getStatus(balancer, `r${++nextId}`, route)) === 200) filesBack++;
    log(`  read back after the kill: responses ${responsesBack}/${stored.responses.length}, files ${filesBack}/${stored.files.length}`);
    const passed = unexplained.length === 0 && responsesBack === stored.responses.length && filesBack === stored.files.length && !survivors.has(victim.name) && survivors.size === replicaCount - 1 && orphans.length === 0;

    // 3. OCR throughput with 1…N replicas in rotation.
    await balancer.stop();
    await start(victim);
    log(`\n3. OCR throughput, ${ocrClients} clients, closed loop, ${ocrSeconds} s each (${os.cpus().length} cores shared by all replicas)`);
    const ocrOp = ops.find((op) => op.route === 'ocr' && op.model === models.ocr[0])!;
    for (let n = 1; n <= replicaCount; n++) {
      balancer = await startBalancer(haproxy, root, members().slice(0, n));
      for (let i = 0; i < n * 2; i++) await tracked(balancer, ocrOp, rng); // each replica loads the model
      let count = 0;
      let errors = 0;
      const end = Date.now() + ocrSeconds * 1000;
      const began = Date.now();
      await Promise.all(
        Array.from({ length: ocrClients }, async () => {
          while (Date.now() < end) {
            const d = await tracked(balancer!, ocrOp, rng);
            if (d.outcome === '200') count++;
            else errors++;
          }
        }),
      );
      const seconds = (Date.now() - began) / 1000;
      log(`  ${n} replica${n > 1 ? 's' : ' '}: ${(count / seconds).toFixed(2)} requests/s (${count} in ${seconds.toFixed(1)} s${errors ? `, ${errors} not 200` : ''}), load ${os.loadavg()[0]!.toFixed(2)}`);
      await balancer.stop();
      balancer = undefined;
    }
    log(`\n${passed ? 'PASS' : 'FAIL'}: every stored thing resolved through any replica; the crash cost only the killed replica's requests in flight and left no process behind`);
    process.exitCode = passed ? 0 : 1;
  } finally {
    await balancer?.stop();
    await Promise.all(replicas.map((r) => (r.server ? stopLserve(r.server) : undefined)));
    await postgres.close();
    if (!args.keep) await rm(root, { recursive: true, force: true });
  }
}

await main();
