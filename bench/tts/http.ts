/**
 * Qwen3-TTS through the HTTP API (not a test): the benchmark's 0.6B-sized
 * int4 export (bench/tts/model.ts) registered with `lserve pull <dir>
 * --kind tts` into a home of its own (which prepares its graphs, as for a
 * user), then `lserve serve` started fresh per variant: `fixed-decoder` —
 * the loop on ONNX Runtime and the published decoder (LSERVE_TTS_LOOP=onnx
 * LSERVE_TTS_DECODER=published: each block decoded again with its
 * look-back in the export's 25-frame calls; the server before the streaming
 * decoder), `onnx` — the loop on ONNX Runtime with the streaming decoder,
 * and `llama` — what the server runs by default: the loop on llama.cpp.
 * Every variant's server is started and warmed up (the load) first; then
 * each round times, variant after variant (the order turned each round), a
 * one-shot `POST /v1/audio/speech` (`response_format: "pcm"`, streamed as
 * it is made) and a stream job (`stream: true`, then GET of its
 * stream_url), at the client: first byte, total, and RTF = total ÷ the
 * audio's length. Interleaved rounds see the same machine: on a shared
 * host whose speed drifts over minutes, variants run one after another
 * would not, and their ratio would carry the drift. The ratios are given
 * per round (medians of the rounds' ratios) beside the ratio of medians.
 * The built CLI (`npm run build`) is what serves.
 *
 *   npx tsx bench/tts/http.ts [--reps 3] [--threads 2] [--frames 25] [--variants fixed-decoder,onnx,llama]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { runLserve, startLserve, stopLserve, type Server } from '../load/lserve.js';
import { fmt, median, SENTENCE } from './loop.js';
import { writeBenchModel } from './model.js';

const { values: args } = parseArgs({
  options: { reps: { type: 'string', default: '3' }, threads: { type: 'string', default: '2' }, frames: { type: 'string', default: '25' }, variants: { type: 'string', default: 'fixed-decoder,onnx,llama' } },
});
const VARIANTS = {
  'fixed-decoder': { LSERVE_TTS_LOOP: 'onnx', LSERVE_TTS_DECODER: 'published' },
  onnx: { LSERVE_TTS_LOOP: 'onnx' },
  llama: {},
} satisfies Record<string, Record<string, string>>;
type Variant = keyof typeof VARIANTS;
const variants = args.variants.split(',').filter((v): v is Variant => v in VARIANTS);
const reps = Number(args.reps);
const MODEL = 'qwen3-tts-bench';
const SAMPLE_RATE = 24_000;
const load = () => os.loadavg().map((v) => v.toFixed(2)).join(', ');

interface Timing {
  firstByte: number;
  total: number;
  audio: number;
}

/** Reads a response's body to the end: seconds to its first byte and to its end from `started`, and the audio's seconds (16-bit PCM). */
async function drain(res: Response, started: number): Promise<Timing> {
  if (!res.ok || !res.body) throw new Error(`speech answered ${res.status}: ${(await res.text()).slice(0, 300)}`);
  let firstByte = 0;
  let bytes = 0;
  for await (const chunk of res.body) {
    if (!firstByte && chunk.byteLength) firstByte = performance.now() - started;
    bytes += chunk.byteLength;
  }
  return { firstByte: firstByte / 1000, total: (performance.now() - started) / 1000, audio: bytes / 2 / SAMPLE_RATE };
}

const request = (extra: Record<string, unknown>) => ({
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: MODEL, input: SENTENCE, voice: 'Vivian', response_format: 'pcm', seed: 1, frames: Number(args.frames), ...extra }),
});

async function oneShot(base: string): Promise<Timing> {
  const started = performance.now();
  return drain(await fetch(`${base}/v1/audio/speech`, request({})), started);
}

async function streamJob(base: string): Promise<Timing> {
  const started = performance.now();
  const job = (await (await fetch(`${base}/v1/audio/speech`, request({ stream: true }))).json()) as { stream_url: string };
  return drain(await fetch(`${base}${job.stream_url}`), started);
}

interface Results {
  oneShot: Timing[];
  jobs: Timing[];
}

const rtf = (t: Timing) => t.total / t.audio;

function report(name: Variant, warm: Timing, results: Results, loadLine: string): void {
  const s = (xs: Timing[], get: (t: Timing) => number) => `${fmt(median(xs.map(get)), 2)} (${xs.map((t) => fmt(get(t), 2)).join(' / ')})`;
  console.log(`${name}: load + first speech ${fmt(warm.total, 1)} s; ${fmt(results.oneShot[0]!.audio, 2)} s of audio`);
  console.log(`  one-shot: first byte ${s(results.oneShot, (t) => t.firstByte)} s, total ${s(results.oneShot, (t) => t.total)} s, RTF ${s(results.oneShot, rtf)}`);
  console.log(`  stream job: first byte ${s(results.jobs, (t) => t.firstByte)} s, RTF ${s(results.jobs, rtf)}`);
  if (loadLine) console.log(`  ${loadLine.replace(/^.*?qwen3-tts /, 'qwen3-tts ')}`);
}

/** `last` against `before`: the ratio of the medians, and the median of the rounds' own ratios. */
function compare(lastName: Variant, last: Results, name: Variant, before: Results): void {
  const ratios = (a: Timing[], b: Timing[], get: (t: Timing) => number) => {
    const perRound = a.map((t, i) => get(t) / get(b[i]!));
    return `${fmt(median(a.map(get)) / median(b.map(get)), 2)} (rounds: median ${fmt(median(perRound), 2)}, worst ${fmt(Math.max(...perRound), 2)})`;
  };
  console.log(`${lastName} ÷ ${name}: one-shot RTF ${ratios(last.oneShot, before.oneShot, rtf)}, first byte ${ratios(last.oneShot, before.oneShot, (t) => t.firstByte)}, stream job RTF ${ratios(last.jobs, before.jobs, rtf)}`);
}

console.log(`lserve Qwen3-TTS over HTTP: 0.6B-sized int4 export, ${args.threads} threads, up to ${args.frames} frames, ${os.cpus()[0]?.model ?? 'cpu'} ×${os.availableParallelism()}, load average ${load()}`);
const model = await writeBenchModel('int4');
const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-tts-http-'));
try {
  const pulled = await runLserve(home, ['pull', model.dir, '--kind', 'tts', '--id', MODEL]);
  if (pulled.code !== 0) throw new Error(`pull failed: ${pulled.output}`);
  console.log(pulled.output.trim().split('\n').filter((l) => /^\s+[\w ]+: /.test(l)).join('\n'));
  type Running = { name: Variant; server: Server; warm?: Timing; results: Results };
  const servers: Running[] = [];
  try {
    for (const name of variants) {
      const running: Running = { name, server: await startLserve(home, ['--threads', args.threads, '--keep-alive', '-1'], VARIANTS[name]), results: { oneShot: [], jobs: [] } };
      servers.push(running);
      running.warm = await oneShot(running.server.base);
    }
    for (let round = 0; round < reps; round++) {
      for (let i = 0; i < servers.length; i++) {
        const { server, results } = servers[(round + i) % servers.length]!;
        results.oneShot.push(await oneShot(server.base));
        results.jobs.push(await streamJob(server.base));
      }
    }
    for (const { name, server, warm, results } of servers) {
      report(name, warm!, results, server.logs.find((l) => l.line.includes(`${MODEL}: `) && l.line.includes('model loaded'))?.line ?? '');
    }
    const last = servers.at(-1)!;
    for (const { name, results } of servers.slice(0, -1)) compare(last.name, last.results, name, results);
  } finally {
    await Promise.all(servers.map(({ server }) => stopLserve(server)));
  }
} finally {
  await rm(home, { recursive: true, force: true });
  console.log(`load average at end: ${load()}`);
}
