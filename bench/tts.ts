/**
 * Qwen3-TTS benchmark (not a test): the frame loop at Qwen3-TTS-12Hz-0.6B's
 * real dimensions (28-layer talker, 5-layer code predictor, H 1024; random
 * weights: the audio is noise, the compute is real), in fp32 (as the export's
 * cpu_fp32/) and with 4-bit linear layers (MatMulNBits, as cpu_int4/; with
 * accuracy_level unset and 4), side by side. Each weight variant runs in a
 * process of its own (for its peak memory): load, one sentence through the
 * runtime as the server uses it (time to first audio with first audio blocks
 * of 4, 2 and 1 frames, frames per second, real-time factor), alternating
 * run by run with the same runtime whose decoder's worker has
 * `--decoder-threads` (default 1; the thread plan gives it the loop's own),
 * then the parts of one frame called in-thread with 2
 * and 1 intra-op threads. Then ORT's own MatMul throughput for reference, and
 * a table of the variants with ratios. The codec decoder is the synthetic one
 * with the real decoder's look-back and about its arithmetic per frame
 * (QWEN3_TTS_0_6B). Models are written once into test/.cache (fp32 ≈ 2.5 GB,
 * int4 ≈ 0.7 GB each; `--clean` removes them).
 *
 *   npx tsx bench/tts.ts [--weights fp32,int4,int4-acc4] [--threads 2] [--frames 24] [--runs 2]
 *                        [--first 4,2,1] [--decoder-threads 1] [--skip audio,decoder,parts,matmul] [--clean]
 */
import { fork } from 'node:child_process';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { describeRun, fmt, frameParts, median, synthesize, type Parts, type SynthesisRun } from './tts/loop.js';
import { matmulRates } from './tts/matmul.js';
import { STREAMING_BLOCKS } from '../src/families/qwen3-tts/codec.js';
import { machineThreads } from '../src/runtimes/onnx/threads.js';
import { isVariant, loadRuntime, loadRuntimeSplit, variantDir, weightBytes, writeBenchModel, type Variant } from './tts/model.js';

const { values: args } = parseArgs({
  options: {
    weights: { type: 'string', default: 'fp32,int4,int4-acc4' },
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

interface VariantResult {
  variant: Variant;
  sizeBytes: number;
  writeSeconds: number;
  loadSeconds: number;
  peakRssBytes: number;
  runs: SynthesisRun[];
  decoderRuns: SynthesisRun[];
  parts: Parts[];
}

/** One weight variant, in this (child) process. */
async function runVariant(variant: Variant): Promise<VariantResult> {
  console.log(`\n## ${variant} (load average ${load()})`);
  const model = await writeBenchModel(variant);
  console.log(`model: ${fmt(model.sizeBytes / 2 ** 30, 2)} GiB of graphs (written or found in ${fmt(model.writeSeconds)} s)`);
  let started = performance.now();
  const runtime = await loadRuntime(model, threads);
  const loadSeconds = (performance.now() - started) / 1000;
  console.log(`load: ${fmt(loadSeconds)} s, RSS ${fmt(process.memoryUsage().rss / 2 ** 30, 2)} GiB (the workers' ORT memory included)`);
  // The loader's schedule: the decoder comparison below runs with it.
  const defaultFirst = runtime.blockPolicy.first;
  const result: VariantResult = { variant, sizeBytes: model.sizeBytes, writeSeconds: model.writeSeconds, loadSeconds, peakRssBytes: 0, runs: [], decoderRuns: [], parts: [] };
  let split: Awaited<ReturnType<typeof loadRuntimeSplit>> | undefined;
  try {
    if (!skip.has('audio')) {
      await synthesize(runtime, defaultFirst, 3, 99); // warm-up: first runs allocate the sessions' arenas
      // Peak memory of one runtime, before the comparison's second one loads.
      result.peakRssBytes = process.resourceUsage().maxRSS * 1024;
      if (compareDecoder) {
        split = await loadRuntimeSplit(model, threads, decoderThreads);
        await synthesize(split, defaultFirst, 3, 99);
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
          const r = await synthesize(split, defaultFirst, frames, run + 1);
          result.decoderRuns.push(r);
          console.log(describeRun(`run ${run + 1}, decoder ${decoderThreads} thread(s)`, r));
        }
      }
    }
  } finally {
    await Promise.all([runtime.dispose(), split?.dispose()]);
  }
  result.peakRssBytes ||= process.resourceUsage().maxRSS * 1024;
  console.log(`peak RSS: ${fmt(result.peakRssBytes / 2 ** 30, 2)} GiB (load average ${load()})`);

  if (!skip.has('parts')) {
    const bytes = weightBytes(variant);
    const settings = [...new Set([threads, 1])].map((t) => ({ t, spin: false }));
    settings.push({ t: threads, spin: true });
    for (const { t, spin } of settings) {
      const p = await frameParts(model, t, spin);
      result.parts.push(p);
      console.log(
        `parts, ${t} thread(s)${spin ? ', spinning' : ''}: talker prefill of 24 rows ${fmt(p.prefill, 0)} ms; cached step ${fmt(p.step, 1)} ms (${fmt(bytes.talker / p.step / 1e6, 1)} GB/s of weights); ` +
          `code predictor call ${fmt(p.call, 1)} ms ×15 (${fmt(bytes.predictor / p.call / 1e6, 1)} GB/s); residual embed ${fmt(p.embed, 2)} ms → ` +
          `frame ${fmt(p.frame, 0)} ms, ${fmt(1000 / p.frame, 2)} frames/s, predictor ${fmt((100 * 15 * p.call) / p.frame, 0)} % of it`,
      );
    }
  }
  return result;
}

/** Runs a variant in a child process (this file, `--child`), so each has its own peak RSS. */
function inChild(variant: Variant): Promise<VariantResult> {
  const argv = ['--child', variant, '--threads', String(threads), '--frames', String(frames), '--runs', String(runs), '--first', args.first, '--decoder-threads', String(decoderThreads), '--skip', args.skip];
  const child = fork(fileURLToPath(import.meta.url), argv, { stdio: 'inherit' });
  return new Promise((resolve, reject) => {
    let result: VariantResult | undefined;
    child.on('message', (message) => (result = message as VariantResult));
    child.on('error', reject);
    child.on('exit', (code) => (result ? resolve(result) : reject(new Error(`${variant}: the child process exited with ${code}`))));
  });
}

/** Per run: RTF with the plan's decoder threads ÷ RTF with --decoder-threads, both at the runtime's first block (run one after the other). */
function pairedRatios(r: VariantResult): number[] {
  const plan = r.runs.filter((x) => x.first === STREAMING_BLOCKS.first);
  return r.decoderRuns.map((x, i) => (plan[i] ? plan[i]!.rtf / x.rtf : NaN));
}

function table(results: VariantResult[]): void {
  const base = results.find((r) => r.variant === 'fp32');
  const others = results.filter((r) => r !== base);
  const partsAt = (r: VariantResult, t: number, spin = false) => r.parts.find((p) => p.threads === t && p.spinning === spin);
  const runsWith = (r: VariantResult, first: number) => r.runs.filter((x) => x.first === first);
  const rows: Array<[string, (r: VariantResult) => number, number, string?]> = [
    ['graph files, GiB', (r) => r.sizeBytes / 2 ** 30, 2],
    ['load, s', (r) => r.loadSeconds, 1],
    ['peak RSS, GiB', (r) => r.peakRssBytes / 2 ** 30, 2],
    ['weights read per frame, GB', (r) => weightBytes(r.variant).frame / 1e9, 2],
  ];
  for (const t of [...new Set([threads, 1])]) {
    rows.push(
      [`talker prefill 24 rows, ms (${t} thr)`, (r) => partsAt(r, t)?.prefill ?? NaN, 0],
      [`talker cached step, ms (${t} thr)`, (r) => partsAt(r, t)?.step ?? NaN, 1],
      [`code predictor call, ms (${t} thr)`, (r) => partsAt(r, t)?.call ?? NaN, 1],
      [`frame from parts, ms (${t} thr)`, (r) => partsAt(r, t)?.frame ?? NaN, 0],
      [`effective weight GB/s (${t} thr)`, (r) => weightBytes(r.variant).frame / (partsAt(r, t)?.frame ?? NaN) / 1e6, 1],
    );
  }
  rows.push(
    [`talker cached step, ms (${threads} thr, spin)`, (r) => partsAt(r, threads, true)?.step ?? NaN, 1],
    [`code predictor call, ms (${threads} thr, spin)`, (r) => partsAt(r, threads, true)?.call ?? NaN, 1],
  );
  const allRuns = (r: VariantResult) => r.runs;
  rows.push(
    ['loop frames/s (runtime, median)', (r) => median(allRuns(r).map((x) => x.loopFps)), 2],
    ['RTF (runtime, median)', (r) => median(allRuns(r).map((x) => x.rtf)), 2],
  );
  for (const first of firsts) rows.push([`first audio, first block ${first}, s`, (r) => median(runsWith(r, first).map((x) => x.firstAudio)), 2]);
  if (compareDecoder) {
    const first = STREAMING_BLOCKS.first;
    rows.push(
      [`first audio, first block ${first}, decoder ${decoderThreads} thr, s`, (r) => median(r.decoderRuns.map((x) => x.firstAudio)), 2],
      [`loop frames/s, decoder ${decoderThreads} thr`, (r) => median(r.decoderRuns.map((x) => x.loopFps)), 2],
      [`RTF, decoder ${decoderThreads} thr`, (r) => median(r.decoderRuns.map((x) => x.rtf)), 2],
      [`RTF, plan ÷ decoder ${decoderThreads} thr (paired runs)`, (r) => median(pairedRatios(r)), 2],
    );
  }
  const names = results.map((r) => r.variant);
  const ratios = base ? others.map((r) => `${r.variant}/fp32`) : [];
  console.log(`\n## Side by side (${threads} threads, ${frames} frames, median of ${runs}; load average ${load()})`);
  console.log(['', ...names, ...ratios].map((c, i) => (i === 0 ? c.padEnd(40) : c.padStart(14))).join(''));
  for (const [label, get, digits] of rows) {
    const values = results.map(get);
    const cells = values.map((v) => fmt(v, digits));
    if (base) for (const r of others) cells.push(fmt(get(r) / get(base), 2));
    if (values.every((v) => !Number.isFinite(v))) continue;
    console.log([label.padEnd(40), ...cells.map((c) => c.padStart(14))].join(''));
  }
}

async function main(): Promise<void> {
  if (args.child) {
    if (!isVariant(args.child)) throw new Error(`unknown variant ${args.child}`);
    const result = await runVariant(args.child);
    process.send?.(result);
    return;
  }
  const variants = args.weights.split(',').filter(Boolean);
  const unknown = variants.filter((v) => !isVariant(v));
  if (unknown.length) throw new Error(`unknown --weights ${unknown.join(', ')} (known: fp32, int4, int4-acc4)`);
  const cpu = os.cpus()[0]?.model ?? 'cpu';
  console.log(`lserve Qwen3-TTS benchmark: ${threads} threads, ${frames} frames per run, ${runs} runs, node ${process.version}, ${cpu} ×${os.availableParallelism()}, load average ${load()}`);
  const results: VariantResult[] = [];
  for (const variant of variants as Variant[]) results.push(await inChild(variant));

  if (!skip.has('matmul')) {
    console.log(`\n## ORT matrix multiply, 32 linear layers 1024 ↔ 3072 (100.7 M weights) (load average ${load()})`);
    for (const r of await matmulRates(variants as Variant[], [...new Set([threads, 1])], [1, 16])) {
      console.log(`${r.variant.padEnd(10)} M = ${String(r.rows).padStart(2)}, ${r.threads} thread(s): ${fmt(r.ms, 1).padStart(7)} ms, ${fmt(r.gflops, 1).padStart(6)} GFLOP/s, ${fmt(r.gbps, 1).padStart(5)} GB/s of weights`);
    }
  }
  table(results);
  if (args.clean) {
    for (const variant of variants as Variant[]) await rm(variantDir(variant), { recursive: true, force: true });
    console.log('\nmodels removed');
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
