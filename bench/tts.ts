/**
 * Qwen3-TTS benchmark (not a test): the frame loop at Qwen3-TTS-12Hz-0.6B's
 * real dimensions (28-layer talker, 5-layer code predictor, H 1024; random
 * weights: the audio is noise, the compute is real), with the export's
 * graphs as published, as the server prepares them for ONNX Runtime (the
 * KV-cached code predictor built from the published one's weights and, for
 * 4-bit weights, MatMulNBits on int8 activations: src/families/qwen3-tts/
 * prepared/) and with the talker and code predictor converted for llama.cpp
 * (src/families/qwen3-tts/llama/), same weights, same run. Weights: 4-bit linear layers (MatMulNBits, as
 * cpu_int4/, accuracy_level unset) by default; fp32 (as cpu_fp32/) and int4
 * with accuracy_level 4 on request. Each (weights, graphs) pair runs in a
 * process of its own (for its peak memory): load (the prepared graphs
 * written beside the model once, as `lserve pull` does), one sentence through the
 * runtime as the server assembles it (time to first audio with first audio
 * blocks of 4, 2 and 1 frames, frames per second, real-time factor),
 * alternating run by run with the same runtime whose decoder's worker has
 * `--decoder-threads` (default 1; the thread plan gives it the loop's own),
 * then the parts of one frame called in-thread on the graphs the generator
 * opens (talker step, the predictor's 15 calls, the decoder's share). Then
 * ORT's own MatMul throughput for reference, and a table of the pairs with
 * prepared ÷ published and llama ÷ prepared. The codec decoder is the synthetic one with the real
 * decoder's look-back and about its arithmetic per frame (QWEN3_TTS_0_6B).
 * Models are written once into test/.cache (fp32 ≈ 2.5 GB, int4 ≈ 0.7 GB
 * each; `--clean` removes them).
 *
 *   npx tsx bench/tts.ts [--weights int4] [--graphs published,fixed-decoder,prepared,llama] [--threads 2] [--frames 24] [--runs 2]
 *                        [--first 4,2,1] [--decoder-threads 1] [--skip audio,decoder,parts,matmul] [--clean]
 */
import { fork } from 'node:child_process';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { describeRun, fmt, frameParts, median, synthesize, type Parts, type SynthesisRun } from './tts/loop.js';
import { matmulRates } from './tts/matmul.js';
import { machineThreads } from '../src/runtimes/onnx/threads.js';
import { isGraphs, isVariant, loadRuntime, pulledGraphs, variantDir, weightBytes, writeBenchModel, type Graphs, type LoadedRuntime, type Variant } from './tts/model.js';

const { values: args } = parseArgs({
  options: {
    weights: { type: 'string', default: 'int4' },
    graphs: { type: 'string', default: 'prepared,llama' },
    threads: { type: 'string', default: String(Math.min(os.availableParallelism(), 2)) },
    frames: { type: 'string', default: '24' },
    runs: { type: 'string', default: '2' },
    first: { type: 'string', default: '4,2,1' },
    'decoder-threads': { type: 'string', default: '1' },
    skip: { type: 'string', default: '' },
    clean: { type: 'boolean', default: false },
    child: { type: 'string' },
  },
});
const threads = Number(args.threads);
const frames = Number(args.frames);
const runs = Number(args.runs);
const firsts = args.first.split(',').map(Number);
// The plan's decoder threads for this budget (runtimes/onnx/threads.ts: the loop's own); the comparison runs with --decoder-threads.
const planDecoderThreads = machineThreads(threads);
const decoderThreads = Number(args['decoder-threads']);
const skip = new Set(args.skip.split(',').filter(Boolean));
const compareDecoder = !skip.has('decoder') && !skip.has('audio') && decoderThreads !== planDecoderThreads;
const load = () => os.loadavg().map((l) => l.toFixed(2)).join(' ');

interface Pair {
  variant: Variant;
  graphs: Graphs;
}

interface PairResult extends Pair {
  /** Which talker and code predictor ran, and their preparation's time (the generator's own notes). */
  graphNotes: string;
  loadSeconds: number;
  /** The decoder's first block (its block policy's). */
  defaultFirst: number;
  peakRssBytes: number;
  runs: SynthesisRun[];
  decoderRuns: SynthesisRun[];
  parts?: Parts;
}

/** One (weights, graphs) pair, in this (child) process. */
async function runPair({ variant, graphs }: Pair): Promise<PairResult> {
  console.log(`\n## ${variant}, ${graphs} graphs (load average ${load()})`);
  const model = await writeBenchModel(variant);
  console.log(`model: ${fmt(model.sizeBytes / 2 ** 30, 2)} GiB of graphs (written or found in ${fmt(model.writeSeconds)} s)`);
  const started = performance.now();
  const { runtime, graphNotes } = await loadRuntime(model, graphs, threads);
  const loadSeconds = (performance.now() - started) / 1000;
  console.log(`load: ${fmt(loadSeconds)} s, RSS ${fmt(process.memoryUsage().rss / 2 ** 30, 2)} GiB (the workers' ORT memory included); graphs: ${graphNotes || 'as published'}`);
  // The loader's schedule: the decoder comparison below runs with it.
  const defaultFirst = runtime.blockPolicy.first;
  const result: PairResult = { variant, graphs, graphNotes, loadSeconds, defaultFirst, peakRssBytes: 0, runs: [], decoderRuns: [] };
  let split: LoadedRuntime | undefined;
  try {
    if (!skip.has('audio')) {
      await synthesize(runtime, defaultFirst, 3, 99); // warm-up: first runs allocate the sessions' arenas
      // Peak memory of one runtime, before the comparison's second one loads.
      result.peakRssBytes = process.resourceUsage().maxRSS * 1024;
      if (compareDecoder) {
        split = await loadRuntime(model, graphs, threads, decoderThreads);
        await synthesize(split.runtime, defaultFirst, 3, 99);
      }
      for (let run = 0; run < runs; run++) {
        // Rotate the order, and alternate with the comparison, so drift in the machine's load favours no setting.
        const order = firsts.map((_, i) => firsts[(i + run) % firsts.length]!);
        for (const first of order) {
          const r = await synthesize(runtime, first, frames, run + 1);
          result.runs.push(r);
          console.log(describeRun(`run ${run + 1}, decoder ${planDecoderThreads} thread(s) (the plan)`, r));
        }
        if (split) {
          const r = await synthesize(split.runtime, defaultFirst, frames, run + 1);
          result.decoderRuns.push(r);
          console.log(describeRun(`run ${run + 1}, decoder ${decoderThreads} thread(s)`, r));
        }
      }
    }
  } finally {
    await Promise.all([runtime.dispose(), split?.runtime.dispose()]);
  }
  result.peakRssBytes ||= process.resourceUsage().maxRSS * 1024;
  console.log(`peak RSS: ${fmt(result.peakRssBytes / 2 ** 30, 2)} GiB (load average ${load()})`);

  if (!skip.has('parts')) {
    const bytes = weightBytes(variant, graphs);
    const p = await frameParts(model, graphs, threads, frames);
    result.parts = p;
    const share = (ms: number) => `${fmt((100 * ms) / p.frame, 0)} %`;
    console.log(
      `parts, ${threads} thread(s): talker prefill of 24 rows ${fmt(p.prefill, 0)} ms; cached step ${fmt(p.step, 1)} ms (${fmt(bytes.talker / p.step / 1e6, 1)} GB/s of weights); ` +
        `code predictor ${fmt(p.predictor, 0)} ms a frame, 15 calls (${fmt(bytes.predictor / p.predictor / 1e6, 1)} GB/s); residual embed ${fmt(p.embed, 2)} ms; ` +
        `decoder ${fmt(p.decodeCall, 0)} ms a call × ${p.decodeCalls} calls ÷ ${frames} frames = ${fmt(p.decoder, 0)} ms a frame → ` +
        `frame ${fmt(p.frame, 0)} ms: talker ${share(p.step)}, predictor ${share(p.predictor)}, decoder ${share(p.decoder)}`,
    );
  }
  return result;
}

/** Runs a pair in a child process (this file, `--child weights:graphs`), so each has its own peak RSS. */
function inChild(pair: Pair): Promise<PairResult> {
  const name = `${pair.variant}:${pair.graphs}`;
  const argv = ['--child', name, '--threads', String(threads), '--frames', String(frames), '--runs', String(runs), '--first', args.first, '--decoder-threads', String(decoderThreads), '--skip', args.skip];
  const child = fork(fileURLToPath(import.meta.url), argv, { stdio: 'inherit' });
  return new Promise((resolve, reject) => {
    let result: PairResult | undefined;
    child.on('message', (message) => (result = message as PairResult));
    child.on('error', reject);
    child.on('exit', (code) => (result ? resolve(result) : reject(new Error(`${name}: the child process exited with ${code}`))));
  });
}

/** Per run: RTF with the plan's decoder threads ÷ RTF with --decoder-threads, both at the runtime's first block (run one after the other). */
function pairedRatios(r: PairResult): number[] {
  const plan = r.runs.filter((x) => x.first === r.defaultFirst);
  return r.decoderRuns.map((x, i) => (plan[i] ? plan[i]!.rtf / x.rtf : NaN));
}

/** A row: its label, its value for a pair, its digits, and whether prepared ÷ published means something (not for shares). */
type Row = [string, (r: PairResult) => number, number, boolean?];

function table(results: PairResult[]): void {
  const runsWith = (r: PairResult, first: number) => r.runs.filter((x) => x.first === first);
  const part = (get: (p: Parts) => number) => (r: PairResult) => (r.parts ? get(r.parts) : NaN);
  const share = (get: (p: Parts) => number) => part((p) => (100 * get(p)) / p.frame);
  const rows: Row[] = [
    ['loop frames/s (runtime, median)', (r) => median(r.runs.map((x) => x.loopFps)), 2],
    ['RTF (runtime, median)', (r) => median(r.runs.map((x) => x.rtf)), 2],
    ...firsts.map((first): Row => [`first audio, first block ${first}, s`, (r) => median(runsWith(r, first).map((x) => x.firstAudio)), 2]),
    ['talker prefill 24 rows, ms', part((p) => p.prefill), 0],
    ['talker cached step, ms', part((p) => p.step), 1],
    ['code predictor, ms a frame (15 calls)', part((p) => p.predictor), 0],
    [`decoder, ms a frame (${frames}-frame sentence)`, part((p) => p.decoder), 0],
    ['frame from parts, ms', part((p) => p.frame), 0],
    ['  talker share, %', share((p) => p.step), 0, false],
    ['  predictor share, %', share((p) => p.predictor), 0, false],
    ['  decoder share, %', share((p) => p.decoder), 0, false],
    ['weights read per frame, GB', (r) => weightBytes(r.variant, r.graphs).frame / 1e9, 2],
    ['peak RSS, GiB', (r) => r.peakRssBytes / 2 ** 30, 2],
    ['load, s', (r) => r.loadSeconds, 1],
  ];
  if (compareDecoder) {
    rows.push(
      [`first audio, decoder's first block, decoder ${decoderThreads} thr, s`, (r) => median(r.decoderRuns.map((x) => x.firstAudio)), 2],
      [`loop frames/s, decoder ${decoderThreads} thr`, (r) => median(r.decoderRuns.map((x) => x.loopFps)), 2],
      [`RTF, decoder ${decoderThreads} thr`, (r) => median(r.decoderRuns.map((x) => x.rtf)), 2],
      [`RTF, plan ÷ decoder ${decoderThreads} thr (paired runs)`, (r) => median(pairedRatios(r)), 2],
    );
  }
  // Columns: each weights' pairs, then prepared ÷ published and prepared ÷ fixed-decoder where both ran.
  const columns: Array<[string, (row: Row) => string]> = [];
  for (const variant of [...new Set(results.map((r) => r.variant))]) {
    const find = (graphs: Graphs) => results.find((r) => r.variant === variant && r.graphs === graphs);
    for (const r of results.filter((x) => x.variant === variant)) columns.push([`${variant} ${r.graphs}`, ([, get, digits]) => fmt(get(r), digits)]);
    const [published, fixed, prepared, llama] = [find('published'), find('fixed-decoder'), find('prepared'), find('llama')];
    const ratio = (title: string, a: PairResult, b: PairResult) => columns.push([title, ([, get, , meaningful = true]) => (meaningful ? fmt(get(a) / get(b), 2) : '')]);
    if (published && prepared) ratio(`${variant} prep/pub`, prepared, published);
    if (fixed && prepared) ratio(`${variant} prep/fixed`, prepared, fixed);
    if (prepared && llama) ratio(`${variant} llama/prep`, llama, prepared);
  }
  console.log(`\n## Side by side (${threads} threads, ${frames} frames, median of ${runs}; load average ${load()})`);
  const width = Math.max(14, ...columns.map(([title]) => title.length + 2));
  console.log(['', ...columns.map(([title]) => title)].map((c, i) => (i === 0 ? c.padEnd(44) : c.padStart(width))).join(''));
  for (const row of rows) {
    if (results.every((r) => !Number.isFinite(row[1](r)))) continue;
    console.log([row[0].padEnd(44), ...columns.map(([, cell]) => cell(row).padStart(width))].join(''));
  }
  console.log('\nGraphs each pair ran (the prepared ones written once beside the model, as lserve pull writes them):');
  for (const r of results) console.log(`  ${r.variant} ${r.graphs}: ${r.graphNotes || 'as published'}`);
}

/** `--weights` × `--graphs`, checked. */
function pairs(): Pair[] {
  const variants = args.weights.split(',').filter(Boolean);
  const graphs = args.graphs.split(',').filter(Boolean);
  const unknown = [...variants.filter((v) => !isVariant(v)).map((v) => `--weights ${v}`), ...graphs.filter((g) => !isGraphs(g)).map((g) => `--graphs ${g}`)];
  if (unknown.length) throw new Error(`unknown ${unknown.join(', ')} (weights: fp32, int4, int4-acc4, 1.7b-int4; graphs: published, fixed-decoder, prepared, llama)`);
  return (variants as Variant[]).flatMap((variant) => (graphs as Graphs[]).map((g) => ({ variant, graphs: g })));
}

async function main(): Promise<void> {
  if (args.child) {
    const [variant = '', graphs = ''] = args.child.split(':');
    if (!isVariant(variant) || !isGraphs(graphs)) throw new Error(`unknown pair ${args.child}`);
    process.send?.(await runPair({ variant, graphs }));
    return;
  }
  const all = pairs();
  const variants = [...new Set(all.map((p) => p.variant))];
  const cpu = os.cpus()[0]?.model ?? 'cpu';
  console.log(`lserve Qwen3-TTS benchmark: ${threads} threads, ${frames} frames per run, ${runs} runs, node ${process.version}, ${cpu} ×${os.availableParallelism()}, load average ${load()}`);
  // Written here, not in a pair's process: its load time and peak RSS are those of a pulled model.
  for (const pair of all) if (pair.graphs !== 'published') await pulledGraphs(await writeBenchModel(pair.variant));
  const results: PairResult[] = [];
  for (const pair of all) results.push(await inChild(pair));

  if (!skip.has('matmul')) {
    console.log(`\n## ORT matrix multiply, 32 linear layers 1024 ↔ 3072 (100.7 M weights) (load average ${load()})`);
    for (const r of await matmulRates(variants, [...new Set([threads, 1])], [1, 16])) {
      console.log(`${r.variant.padEnd(10)} M = ${String(r.rows).padStart(2)}, ${r.threads} thread(s): ${fmt(r.ms, 1).padStart(7)} ms, ${fmt(r.gflops, 1).padStart(6)} GFLOP/s, ${fmt(r.gbps, 1).padStart(5)} GB/s of weights`);
    }
  }
  table(results);
  if (args.clean) {
    for (const variant of variants) await rm(variantDir(variant), { recursive: true, force: true });
    console.log('\nmodels removed');
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
