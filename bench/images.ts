/**
 * Image generation benchmark (not a test): SD-Turbo-sized synthetic graphs
 * (text encoder 340M, UNet 865M, VAE decoder 49M weights, fp16 as the ORT
 * export ships them; random weights: the image is noise, the compute is
 * real) through lserve's own task function, in six variants — fp16 as
 * shipped, the fp32 conversion `lserve pull` writes, and the int8 UNet and
 * VAE decoder where its probe kept them (the probe's figures are printed),
 * each with the full VAE decoder and with TAESD — each in its own process for its peak
 * memory, at 1 and 4 steps (--steps). Then ONNX Runtime's own MatMul and
 * Conv throughput on this machine, the fraction of it a UNet step reaches,
 * and where the step's time goes (ORT's profiler by operator type, fp16 and
 * fp32). Each figure is the best
 * of --reps runs: on a shared machine the best run is the one least slowed
 * by other people's work (the load average is printed at start and end).
 *
 *   npx tsx bench/images.ts [--threads 2] [--size 512x512] [--steps 1,4] [--reps 2] [--skip fp16,fp32,int8,taesd,matmul,profile]
 *   npx tsx bench/images.ts --shape tiny --size 64x64     # the tests' tiny model: checks the benchmark itself
 *
 * The graphs are generated once into bench/.cache (≈ 2.6 GB fp16, plus
 * ≈ 5.2 GB for the fp32 conversion). A run takes several minutes on 2 cores.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Engine } from '../src/compose.js';
import { prepareImageModel } from '../src/families/stable-diffusion/prepare.js';
import { SD_TURBO, TINY_SD, writeSdTurboFolder } from '../test/fixtures/onnx/sd-turbo/index.js';
import { syntheticTaesdModel } from '../test/fixtures/onnx/sd-turbo/taesd.js';
import { taesdFlops, textEncoderFlops, unetFlops, vaeDecoderFlops } from './images/flops.js';
import { ortThroughput } from './images/matmul.js';
import { profileUnet } from './images/profile.js';

const { values: args } = parseArgs({
  options: {
    threads: { type: 'string', default: String(Math.min(os.availableParallelism(), 2)) },
    size: { type: 'string', default: '512x512' },
    steps: { type: 'string', default: '1,4' },
    reps: { type: 'string', default: '2' },
    skip: { type: 'string', default: '' },
    shape: { type: 'string', default: 'real' },
  },
});
const SHAPE = args.shape === 'tiny' ? TINY_SD : SD_TURBO;
const threads = Number(args.threads);
const skip = new Set(args.skip.split(',').filter(Boolean));
const [width, height] = args.size.split('x').map(Number) as [number, number];
const CACHE = fileURLToPath(new URL(`./.cache/${args.shape === 'tiny' ? 'tiny/' : ''}`, import.meta.url));
const MODEL = 'sd-bench';
const TINY = 'taesd-bench';
const SD_TURBO_DEFAULTS = { steps: 1, max_steps: 4, guidance_scale: 0 };

interface Measured {
  decoder: string;
  stepCount: number;
  warmup?: number;
  estimate?: number;
  text: number;
  steps: number[];
  decode: number;
  total: number;
  peakRss: number;
}

/** Best (smallest) time per stage over a variant's images, and its peak memory. */
function summarise(rows: Measured[]): { text: number; step: number; vae: number; tiny: number; peakRss: number } {
  const min = (values: number[]) => (values.length ? Math.min(...values) : NaN);
  const full = rows.filter((r) => r.decoder === 'vae');
  const tiny = rows.filter((r) => r.decoder !== 'vae');
  return {
    text: min(rows.map((r) => r.text)),
    step: min(rows.flatMap((r) => r.steps)),
    vae: min(full.map((r) => r.decode)),
    tiny: min(tiny.map((r) => r.decode)),
    peakRss: Math.max(...rows.map((r) => r.peakRss)),
  };
}

type Precision = 'fp16' | 'fp32' | 'int8';

const fmt = (v: number, digits = 1) => (Number.isFinite(v) ? v.toFixed(digits) : '-');
const gb = (bytes: number) => `${(bytes / 1e9).toFixed(2)} GB`;

function loadAverage(): string {
  return os.loadavg().map((v) => v.toFixed(2)).join(', ');
}

async function folderBytes(dir: string, files: string[]): Promise<number> {
  let total = 0;
  for (const f of files) total += existsSync(path.join(dir, f)) ? (await stat(path.join(dir, f))).size : 0;
  return total;
}

/** A home with the real-size model (and TAESD) registered; prepared as \`lserve pull\` does (fp32 conversion, int8 graphs) when asked. */
async function home(name: string, folder: string, taesd: string, prepare: boolean): Promise<string> {
  const dir = path.join(CACHE, name);
  await mkdir(dir, { recursive: true });
  const engine = new Engine({ home: dir });
  try {
    let model = await engine.store.resolve(MODEL);
    // The catalog's SD-Turbo defaults (1 step, no guidance): what its int8 preparation probes, as for `lserve pull sd-turbo`.
    if (!model) model = await engine.store.setUserDefaults((await engine.store.registerDirectory(folder, { kind: 'image', id: MODEL })).model.id, SD_TURBO_DEFAULTS);
    if (!(await engine.store.resolve(TINY))) await engine.store.registerDirectory(taesd, { kind: 'image', id: TINY });
    if (prepare) {
      const started = performance.now();
      const before = Object.keys(model.files).length;
      model = await prepareImageModel(engine.store, model, (line) => console.log(`  ${line}`));
      if (Object.keys(model.files).length > before) console.log(`  preparation: ${fmt((performance.now() - started) / 1000)} s`);
    }
  } finally {
    await engine.close();
  }
  return dir;
}

/** One process per decoder (the model's VAE, or TAESD alone), so that each peak is that decoder's. */
function runVariant(dir: string, decoder: string, precision: Precision): Promise<Measured[]> {
  const script = fileURLToPath(new URL('./images/variant.ts', import.meta.url));
  // fp32 on a home that has int8 graphs too: the loader's switch (int8-report.ts) picks the fp32 ones.
  const env = { ...process.env, LSERVE_IMAGE_PRECISION: precision === 'fp32' ? 'fp32' : '' };
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', script, dir, MODEL, String(threads), args.size, args.steps, args.reps, decoder], { stdio: ['ignore', 'pipe', 'inherit'], env });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d));
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`variant in ${dir} exited ${code}`));
      resolve(out.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as Measured));
    });
  });
}

async function main(): Promise<void> {
  const cpu = os.cpus()[0]?.model ?? 'cpu';
  console.log(`lserve image benchmark: ${args.size}, ${args.steps} step(s), ${threads} threads, node ${process.version}, ${cpu} ×${os.availableParallelism()}`);
  console.log(`load average at start: ${loadAverage()}`);
  const started = performance.now();

  const generating = performance.now();
  const folder = await writeSdTurboFolder(path.join(CACHE, 'sd-turbo-real'), SHAPE);
  const taesd = await syntheticTaesdModel(path.join(CACHE, 'taesd'));
  const shipped = await folderBytes(folder, ['text_encoder/model.onnx', 'unet/model.onnx', 'vae_decoder/model.onnx', 'vae_encoder/model.onnx']);
  console.log(`synthetic SD-Turbo graphs (fp16): ${gb(shipped)} in ${folder} (${fmt((performance.now() - generating) / 1000)} s)`);

  const h = height / 8;
  const w = width / 8;
  const flops = {
    text: textEncoderFlops(SHAPE.text),
    unet: unetFlops({ ...SHAPE.unet, crossDim: SHAPE.text.width }, h, w),
    vae: vaeDecoderFlops(SHAPE.vae, h, w),
    taesd: taesdFlops(h, w),
  };
  console.log(`matrix work per run (GFLOP): text encoder ${fmt(flops.text / 1e9)}, UNet step ${fmt(flops.unet / 1e9)}, VAE decoder ${fmt(flops.vae / 1e9)}, TAESD ${fmt(flops.taesd / 1e9)}`);

  // ORT's throughput is taken before and after the variants; the better of the two is the machine's rate.
  const before = skip.has('matmul') ? undefined : await ortThroughput(threads);
  const results: Array<{ variant: string; rows: Measured[] }> = [];
  const variants: Array<[string, Precision]> = [['fp16 as shipped', 'fp16'], ['fp32 (converted)', 'fp32'], ['int8 where the probe kept it', 'int8']];
  for (const [variant, precision] of variants) {
    if (skip.has(precision)) continue;
    console.log(`\n${variant}:`);
    // One prepared home (fp32 conversion and int8 graphs) serves the fp32 and int8 variants.
    const dir = await home(precision === 'fp16' ? 'images-home-fp16' : 'images-home-fp32', folder, taesd, precision !== 'fp16');
    const rows: Measured[] = [];
    for (const decoder of skip.has('taesd') ? [''] : ['', TINY]) {
      const measured = await runVariant(dir, decoder, precision);
      for (const r of measured) {
        console.log(`  ${r.decoder.padEnd(11)} ${r.stepCount} step${r.stepCount > 1 ? 's' : ' '}  text ${fmt(r.text, 2)} s  UNet step ${r.steps.map((s) => fmt(s, 2)).join(' / ')} s  decode+png ${fmt(r.decode, 2)} s  image ${fmt(r.total, 2)} s  peak RSS ${gb(r.peakRss)}${r.warmup ? `  (load + first image ${fmt(r.warmup)} s, estimate ${gb(r.estimate ?? 0)})` : ''}`);
      }
      rows.push(...measured);
    }
    console.log(`  ${'decoder'.padEnd(11)} steps  best image  peak RSS`);
    for (const decoder of [...new Set(rows.map((r) => r.decoder))]) {
      for (const count of [...new Set(rows.map((r) => r.stepCount))]) {
        const same = rows.filter((r) => r.decoder === decoder && r.stepCount === count);
        if (same.length) console.log(`  ${decoder.padEnd(11)} ${String(count).padStart(5)}  ${fmt(Math.min(...same.map((r) => r.total)), 1).padStart(8)} s  ${gb(Math.max(...same.map((r) => r.peakRss)))}`);
      }
    }
    const best = summarise(rows);
    console.log(`  best: UNet step ${fmt(best.step, 2)} s, text ${fmt(best.text, 2)} s, VAE decode ${fmt(best.vae, 2)} s → image ${fmt(best.text + best.step + best.vae, 1)} s; with ${TINY} ${fmt(best.tiny, 2)} s → ${fmt(best.text + best.step + best.tiny, 1)} s; peak RSS ${gb(best.peakRss)}`);
    results.push({ variant, rows });
  }

  let throughput: { matmul: number; conv: number } | undefined;
  if (before) {
    const after = await ortThroughput(threads);
    throughput = { matmul: Math.max(before.matmul, after.matmul), conv: Math.max(before.conv, after.conv) };
    console.log(`\nONNX Runtime on this machine (${threads} threads, fp32): MatMul ${fmt(throughput.matmul / 1e9)} GFLOP/s, 3x3 Conv ${fmt(throughput.conv / 1e9)} GFLOP/s`);
  }

  if (throughput) {
    console.log('\nfraction of ORT MatMul throughput reached:');
    for (const { variant, rows } of results) {
      const best = summarise(rows);
      const unetRate = flops.unet / best.step;
      const vaeRate = flops.vae / best.vae;
      console.log(`  ${variant}: UNet step ${fmt(unetRate / 1e9)} GFLOP/s = ${fmt((100 * unetRate) / throughput.matmul, 0)}%, VAE decode ${fmt(vaeRate / 1e9)} GFLOP/s = ${fmt((100 * vaeRate) / throughput.matmul, 0)}%, TAESD ${fmt(flops.taesd / best.tiny / 1e9)} GFLOP/s`);
    }
  }

  if (!skip.has('profile')) {
    const graphs: Array<[string, string]> = [];
    if (!skip.has('fp16')) graphs.push(['fp16 as shipped', path.join(folder, 'unet', 'model.onnx')]);
    if (!skip.has('fp32')) graphs.push(['fp32', path.join(CACHE, 'images-home-fp32', 'models', MODEL, 'fp32', 'unet', 'model.onnx')]);
    for (const [label, graph] of graphs) {
      const profile = await profileUnet(graph, threads, SHAPE.text.width, h);
      console.log(`\n${label} UNet step under ORT's profiler: ${fmt(profile.total, 2)} s in kernels`);
      for (const op of profile.ops.slice(0, 8)) console.log(`  ${op.op.padEnd(24)} ${fmt(op.seconds, 2)} s  ${fmt(100 * op.share, 0)}%`);
    }
  }

  console.log(`\nload average at end: ${loadAverage()}; ${fmt((performance.now() - started) / 1000, 0)} s in all`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
