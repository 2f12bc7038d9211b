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
 * Per server, a warm-up request (the load), then REPS one-shot `POST
 * /v1/audio/speech` (`response_format: "pcm"`, streamed as it is made)
 * and REPS stream jobs (`stream: true`, then GET of its stream_url), timed
 * at the client: first byte, total, and RTF = total ÷ the audio's length.
 * The built CLI (`npm run build`) is what serves.
 *
 *   npx tsx bench/tts/http.ts [--reps 3] [--threads 2] [--frames 25] [--variants fixed-decoder,onnx,llama]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { runLserve, startLserve, stopLserve } from '../load/lserve.js';
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

async function variant(home: string, name: Variant): Promise<{ oneShot: Timing[]; jobs: Timing[] }> {
  const server = await startLserve(home, ['--threads', args.threads, '--keep-alive', '-1'], VARIANTS[name]);
  try {
    const warm = await oneShot(server.base);
    const shots: Timing[] = [];
    const jobs: Timing[] = [];
    for (let i = 0; i < reps; i++) {
      shots.push(await oneShot(server.base));
      jobs.push(await streamJob(server.base));
    }
    const line = server.logs.find((l) => l.line.includes(`${MODEL}: `) && l.line.includes('model loaded'))?.line ?? '';
    const s = (xs: Timing[], get: (t: Timing) => number) => `${fmt(median(xs.map(get)), 2)} (${xs.map((t) => fmt(get(t), 2)).join(' / ')})`;
    console.log(`${name}: load + first speech ${fmt(warm.total, 1)} s; ${fmt(shots[0]!.audio, 2)} s of audio`);
    console.log(`  one-shot: first byte ${s(shots, (t) => t.firstByte)} s, total ${s(shots, (t) => t.total)} s, RTF ${s(shots, (t) => t.total / t.audio)}`);
    console.log(`  stream job: first byte ${s(jobs, (t) => t.firstByte)} s, RTF ${s(jobs, (t) => t.total / t.audio)}`);
    if (line) console.log(`  ${line.replace(/^.*?qwen3-tts /, 'qwen3-tts ')}`);
    return { oneShot: shots, jobs };
  } finally {
    await stopLserve(server);
  }
}

console.log(`lserve Qwen3-TTS over HTTP: 0.6B-sized int4 export, ${args.threads} threads, up to ${args.frames} frames, ${os.cpus()[0]?.model ?? 'cpu'} ×${os.availableParallelism()}, load average ${load()}`);
const model = await writeBenchModel('int4');
const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-tts-http-'));
try {
  const pulled = await runLserve(home, ['pull', model.dir, '--kind', 'tts', '--id', MODEL]);
  if (pulled.code !== 0) throw new Error(`pull failed: ${pulled.output}`);
  console.log(pulled.output.trim().split('\n').filter((l) => /^\s+[\w ]+: /.test(l)).join('\n'));
  const results = new Map<Variant, { oneShot: Timing[]; jobs: Timing[] }>();
  for (const name of variants) results.set(name, await variant(home, name));
  const rtf = (xs: Timing[]) => median(xs.map((t) => t.total / t.audio));
  const last = results.get(variants.at(-1)!)!;
  for (const [name, before] of results) {
    if (before === last) continue;
    console.log(`${variants.at(-1)} ÷ ${name}: one-shot RTF ${fmt(rtf(last.oneShot) / rtf(before.oneShot), 2)}, first byte ${fmt(median(last.oneShot.map((t) => t.firstByte)) / median(before.oneShot.map((t) => t.firstByte)), 2)}, stream job RTF ${fmt(rtf(last.jobs) / rtf(before.jobs), 2)}`);
  }
} finally {
  await rm(home, { recursive: true, force: true });
  console.log(`load average at end: ${load()}`);
}
