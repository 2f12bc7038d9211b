import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import { MANIFEST, type InstalledModel, type Manifest, type ModelStore } from '../../core/store.js';
import { describeInt8, INT8_REPORT_ROLE, INT8_ROLES, int8Path, percent, UNET_TOLERANCE, IMAGE_MIN_PSNR, type Int8Report, type RoleReport } from './int8-report.js';
import { OnnxSession, type Tensor } from '../../runtimes/onnx/session.js';
import { int8Plan, type PlanOptions } from '../../runtimes/onnx/int8/candidates.js';
import { addRanges, removeRangeGraph, writeRangeGraph, type Range } from '../../runtimes/onnx/int8/ranges.js';
import { choosePlan, type Verdict } from '../../runtimes/onnx/int8/search.js';
import { ClipTokenizer } from './clip-tokenizer.js';
import { gaussianNoise } from './noise.js';
import { eulerStep, initNoiseSigma, maxScheduledSteps, parseSchedulerConfig, scaleInput, schedule, type Schedule, type SchedulerConfig } from './scheduler.js';
import { guide } from './sample.js';
import { asFloats, timestepTensor } from './tensors.js';

/**
 * The UNet and VAE decoder with 8-bit weights and activations, prepared once
 * at `lserve pull` from the fp32 graphs (prepare.ts) and kept only where they
 * hold up. Calibration runs the model's own pipeline (its text encoder, its
 * schedule, its default guidance) on two prompts and seeds, measuring the
 * range of every activation that will be quantized (runtimes/onnx/int8);
 * the int8 graphs (QDQ, which ONNX Runtime runs as QLinearConv /
 * QLinearMatMul) are then probed on a third prompt and seed against the
 * fp32 graphs:
 *
 * - the text encoder by the fp32 UNet's first noise prediction from its
 *   states, within UNET_TOLERANCE (relative L2 error);
 * - the VAE decoder's image of the fp32 pipeline's final latents within
 *   IMAGE_MIN_PSNR of the fp32 decoder's;
 * - the UNet's first noise prediction within UNET_TOLERANCE, and the image
 *   of its final latents, decoded by the kept VAE decoder, within
 *   IMAGE_MIN_PSNR of the fp32 latents' image through the same decoder.
 *
 * Each role tries the plans of PLANS in turn and keeps the first that
 * holds, then the layer search adds 8-bit activations where the bound
 * allows (runtimes/onnx/int8/search.ts); a role none holds for runs in
 * fp32. The report (`int8/report.json`, role `int8_report`) keeps the
 * figures, and the loader states them in its load line. On SD-Turbo-sized
 * graphs (2 cores) the image takes 3.8 s instead of 8.2 s (bench/images.md).
 */

/**
 * The UNet's text states stay fp32 where they are read (the cross-attention's
 * key and value projections, 77 rows each: little work): CLIP's states carry
 * a few very large values that one 8-bit scale cannot hold beside the rest.
 */
const FLOAT_INPUTS = ['encoder_hidden_states'];

const CALIBRATION = [
  { prompt: 'a photograph of a lighthouse on a rocky coast at dusk, dramatic clouds', seed: 1 },
  { prompt: 'a bowl of fruit on a wooden table, oil painting, warm light', seed: 2 },
];
const PROBE = { prompt: 'a red fox standing in fresh snow, detailed portrait', seed: 3 };

interface Graphs {
  textEncoder: string;
  unet: string;
  vaeDecoder: string;
}

interface Probe {
  /** The UNet's input and output at the first step (the probe compares them). */
  firstInput?: Record<string, Tensor>;
  firstOutput?: Float32Array;
  latents: Float32Array;
}

/**
 * Prepares, probes and records the int8 graphs of an image model whose fp32
 * graphs are `graphs`, held to `bounds`; returns the model as now installed.
 */
export async function prepareInt8(store: ModelStore, installed: InstalledModel, graphs: Graphs, say: (line: string) => void, bounds = { unet: UNET_TOLERANCE, psnr: IMAGE_MIN_PSNR }): Promise<InstalledModel> {
  const started = Date.now();
  const dir = store.modelDir(installed.id);
  const defaults = installed.entry.defaults;
  const vaeFactor = Number(defaults.vae_factor ?? 8);
  const width = Number(defaults.width ?? 512);
  const height = Number(defaults.height ?? 512);
  const h = Math.round(height / vaeFactor);
  const w = Math.round(width / vaeFactor);
  const channels = Number(defaults.latent_channels ?? 4);
  const scaling = Number(defaults.vae_scaling_factor ?? 0.18215);
  const config = parseSchedulerConfig(installed.files.scheduler ? JSON.parse(await readFile(installed.files.scheduler, 'utf8')) : undefined);
  const sched = schedule(config, Math.min(2, maxScheduledSteps(config)));
  // A guided model is probed as it samples by default: its prediction is u + g·(c − u), which scales the error of c − u by g.
  const guidance = Number(defaults.guidance_scale ?? 0);
  say(`Preparing ${installed.id}'s text encoder, UNet and VAE decoder with 8-bit weights (once: calibrated on ${CALIBRATION.length} images, then checked against fp32 on another):`);

  const tokenizer = await ClipTokenizer.load(installed.files.tokenizer_vocab!, installed.files.tokenizer_merges!, Number(defaults.pad_token_id ?? 0));
  const contexts = await encodePrompts(tokenizer, graphs.textEncoder, [...CALIBRATION.map((c) => c.prompt), PROBE.prompt], guidance);
  const work = path.join(dir, 'int8');
  const report: Int8Report = { width, height, text_encoder: { accepted: false }, unet: { accepted: false }, vae_decoder: { accepted: false }, seconds: 0 };

  // UNet: calibrate along the schedule, then the fp32 probe.
  const unetRanges = new Map<string, Range>();
  const run = (unet: OnnxSession, context: Tensor, seed: number, ranges?: Map<string, Range>) => denoise(unet, config, sched, context, guidance, gaussianNoise(seed, channels * h * w), [channels, h, w], ranges);
  const calibrated: Float32Array[] = [];
  const [textFile, unetFile, vaeFile] = INT8_ROLES.map((role) => path.join(dir, int8Path(role)));
  let int8States: Tensor | undefined;
  const fp32Probe = await withRanges(graphs.unet, work, unetRanges, async (unet, ranges) => {
    for (const [i, c] of CALIBRATION.entries()) calibrated.push((await run(unet, contexts[i]!, c.seed, ranges)).latents);
    const probe = await run(unet, contexts.at(-1)!, PROBE.seed);
    // The text encoder is held to what the fp32 UNet predicts from its states.
    report.text_encoder = await probeRole(graphs.textEncoder, textFile!, new Map(), WEIGHTS_ONLY, async (text) => {
      const [states] = await encodeWith(tokenizer, text, [PROBE.prompt], guidance);
      const out = await unet.runWith({ ...copyFeeds(probe.firstInput!), encoder_hidden_states: copy(states!) }, { fetch: [unet.outputName] });
      const error = relativeError(probe.firstOutput!, prediction(asFloats(out[unet.outputName], 'UNet'), guidance));
      int8States = error <= bounds.unet ? states : undefined;
      return { error, accepted: error <= bounds.unet, loss: error ** 2, reason: `the UNet's noise prediction from its states is ${percent(error)} off fp32's, more than ${bounds.unet * 100} %` };
    });
    return probe;
  });
  const toVae = (latents: Float32Array): Tensor => ({ type: 'float32', data: latents.map((v) => v / scaling), dims: [1, channels, h, w] });
  const vaeRanges = new Map<string, Range>();
  const fp32Image = await withRanges(graphs.vaeDecoder, work, vaeRanges, async (vae, ranges) => {
    for (const latents of calibrated) await decode(vae, toVae(latents), ranges);
    return decode(vae, toVae(fp32Probe.latents));
  });

  // The VAE decoder on the fp32 pipeline's latents; then the UNet from the fp32 text states, its image decoded by the kept VAE
  // decoder against that decoder's image of the fp32 latents (the UNet's own harm to the image, at the kept decoder's cost).
  const imageBound = meanSquaredError(bounds.psnr);
  report.vae_decoder = await probeRole(graphs.vaeDecoder, vaeFile!, vaeRanges, PLANS, async (session) => {
    const psnr = imagePsnr(fp32Image, await decode(session, toVae(fp32Probe.latents)));
    return { psnr, accepted: psnr >= bounds.psnr, loss: meanSquaredError(psnr), reason: `its image is ${psnr.toFixed(1)} dB PSNR from fp32's, under ${bounds.psnr} dB` };
  }, imageBound);
  await withSession(report.vae_decoder.accepted ? vaeFile! : graphs.vaeDecoder, async (vae) => {
    const reference = report.vae_decoder.accepted ? await decode(vae, toVae(fp32Probe.latents)) : fp32Image;
    report.unet = await probeRole(graphs.unet, unetFile!, unetRanges, PLANS, async (session) => {
      const probe = await run(session, contexts.at(-1)!, PROBE.seed);
      const error = relativeError(fp32Probe.firstOutput!, probe.firstOutput!);
      if (error > bounds.unet) return { error, accepted: false, loss: Infinity, reason: `its noise prediction is ${percent(error)} off fp32's, more than ${bounds.unet * 100} %` };
      const psnr = imagePsnr(reference, await decode(vae, toVae(probe.latents)));
      return { error, psnr, accepted: psnr >= bounds.psnr, loss: meanSquaredError(psnr), reason: `its image is ${psnr.toFixed(1)} dB PSNR from fp32's latents' image, under ${bounds.psnr} dB` };
    }, imageBound);
    // What a user sees, prompt to image with every kept graph, against the fp32 pipeline: reported, not bounded.
    if (report.unet.accepted) {
      const { latents } = await withSession(unetFile!, (unet) => run(unet, int8States ?? contexts.at(-1)!, PROBE.seed));
      report.imagePsnr = imagePsnr(fp32Image, await decode(vae, toVae(latents)));
    }
  });
  report.seconds = Math.round((Date.now() - started) / 100) / 10;
  return record(store, installed, report, say);
}

/** The prompts' text encoder states, one tensor each: [1, tokens, width], or with guidance [2, …] with the empty prompt's first (sample.ts's batch). */
async function encodePrompts(tokenizer: ClipTokenizer, file: string, prompts: string[], guidance: number): Promise<Tensor[]> {
  const session = await OnnxSession.create(file, { threads: 0 });
  try {
    return await encodeWith(tokenizer, session, prompts, guidance);
  } finally {
    await session.release();
  }
}

async function encodeWith(tokenizer: ClipTokenizer, session: OnnxSession, prompts: string[], guidance: number): Promise<Tensor[]> {
  const output = session.outputNames.includes('last_hidden_state') ? 'last_hidden_state' : session.outputName;
  const int64 = session.describe(session.inputName)?.type === 'int64';
  const encode = async (prompt: string) => {
    const ids = tokenizer.encode(prompt).ids;
    const feed: Tensor = int64 ? { type: 'int64', data: BigInt64Array.from(ids, (v) => BigInt(v)), dims: [1, ids.length] } : { type: 'int32', data: ids.slice(), dims: [1, ids.length] };
    const out = (await session.runWith({ [session.inputName]: feed }, { fetch: [output] }))[output]!;
    return { data: asFloats(out, 'text encoder'), dims: out.dims };
  };
  const unconditional = guidance > 1 ? await encode('') : undefined;
  const states: Tensor[] = [];
  for (const prompt of prompts) {
    const { data, dims } = await encode(prompt);
    if (!unconditional) states.push({ type: 'float32', data, dims });
    else {
      const both = new Float32Array(data.length * 2);
      both.set(unconditional.data);
      both.set(data, data.length);
      states.push({ type: 'float32', data: both, dims: [2, ...dims.slice(1)] });
    }
  }
  return states;
}

/** The prediction the sampler steps with: the output itself, or with guidance its two rows combined. */
const prediction = (output: Float32Array, guidance: number) => (guidance > 1 ? guide(output, output.length / 2, guidance) : output);

/** The schedule's Euler steps from the seed's noise (sample.ts's loop, without its masks and previews), keeping the first step's UNet input and prediction. */
async function denoise(unet: OnnxSession, config: SchedulerConfig, sched: Schedule, context: Tensor, guidance: number, noise: Float32Array, latent: number[], ranges?: Map<string, Range>): Promise<Probe> {
  const x = noise.map((v) => v * initNoiseSigma(config, sched));
  const timestepType = unet.describe('timestep')?.type ?? 'int64';
  const batch = context.dims[0]!;
  const probe: Probe = { latents: x };
  for (let s = 0; s < sched.timesteps.length; s++) {
    const scaled = scaleInput(x, sched.sigmas[s]!);
    const sample = new Float32Array(scaled.length * batch);
    for (let b = 0; b < batch; b++) sample.set(scaled, b * scaled.length);
    const feeds: Record<string, Tensor> = { sample: { type: 'float32', data: sample, dims: [batch, ...latent] }, timestep: timestepTensor(timestepType, sched.timesteps[s]!), encoder_hidden_states: copy(context) };
    if (s === 0) probe.firstInput = copyFeeds(feeds);
    const out = await unet.runWith(feeds, { fetch: [unet.outputName, ...rangeOutputs(unet, ranges)] });
    if (ranges) addRanges(ranges, out);
    const eps = prediction(asFloats(out[unet.outputName], 'UNet'), guidance);
    if (s === 0) probe.firstOutput = eps.slice();
    eulerStep(x, eps, sched.sigmas[s]!, sched.sigmas[s + 1]!, config.prediction_type);
  }
  return probe;
}

async function decode(vae: OnnxSession, latents: Tensor, ranges?: Map<string, Range>): Promise<Float32Array> {
  const output = vae.outputNames.includes('sample') ? 'sample' : vae.outputName;
  const out = await vae.runWith({ [vae.inputName]: latents }, { fetch: [output, ...rangeOutputs(vae, ranges)] });
  if (ranges) addRanges(ranges, out);
  return asFloats(out[output], 'VAE decoder');
}

/** A tensor of its own: a run transfers its feeds' buffers to the session's worker. */
const copy = (t: Tensor): Tensor => ({ ...t, data: t.data.slice() }) as Tensor;
const copyFeeds = (feeds: Record<string, Tensor>) => Object.fromEntries(Object.entries(feeds).map(([name, t]) => [name, copy(t)]));

const rangeOutputs = (session: OnnxSession, ranges: Map<string, Range> | undefined) => (ranges ? session.outputNames.filter((n) => n.includes('::int8_')) : []);

/** Runs `work` on the fp32 graph made to measure its activations' ranges into `ranges`. */
async function withRanges<T>(graph: string, workDir: string, ranges: Map<string, Range>, work: (session: OnnxSession, ranges: Map<string, Range>) => Promise<T>): Promise<T> {
  // The boldest plan's activations: a superset of every plan's.
  const plan = int8Plan(onnxProto.onnx.ModelProto.decode(await readFile(graph)), PLANS[0]);
  const { file } = await writeRangeGraph(graph, plan.activations, workDir);
  try {
    return await withSession(file, (session) => work(session, ranges));
  } finally {
    await removeRangeGraph(file);
  }
}

/**
 * The plans tried, boldest first: 8-bit activations in convolutions and
 * weight products; in convolutions alone; in weight products alone (fewer
 * 8-bit steps in series, so less error adds up); then 8-bit weights alone
 * (no speed, a quarter of the memory). What a plan leaves without 8-bit
 * activations keeps 8-bit weights.
 */
const PLANS: readonly PlanOptions[] = [
  { ops: ['Conv', 'MatMul'], floatInputs: FLOAT_INPUTS },
  { ops: ['Conv'], weightOps: ['MatMul'], floatInputs: FLOAT_INPUTS },
  { ops: ['MatMul'], weightOps: ['Conv'], floatInputs: FLOAT_INPUTS },
  { ops: [], weightOps: ['Conv', 'MatMul'] },
];
/** The text encoder runs once a request (0.15 s at SD-Turbo's size): only its memory is worth saving. */
const WEIGHTS_ONLY: readonly PlanOptions[] = [PLANS.at(-1)!];

type Probed = RoleReport & Verdict;

/** Chooses and writes a role's int8 graph (runtimes/onnx/int8/search.ts); a role none holds for (or that cannot be quantized) keeps no int8 graph. */
async function probeRole(graph: string, target: string, ranges: Map<string, Range>, plans: readonly PlanOptions[], probe: (session: OnnxSession) => Promise<Probed>, lossBound?: number): Promise<RoleReport> {
  const { chosen, missed } = await choosePlan(graph, target, ranges, plans, probe, lossBound);
  if (!chosen) return { accepted: false, reason: missed.join('; ') };
  const { reason: _, loss: __, ...figures } = chosen.verdict;
  return { ...figures, int8: chosen.name, bytes: chosen.bytes, ...(chosen.added ? { added: chosen.added } : {}), ...(missed.length ? { tried: missed } : {}) };
}

async function withSession<T>(file: string, work: (session: OnnxSession) => Promise<T>): Promise<T> {
  const session = await OnnxSession.create(file, { threads: 0, memoryPattern: false });
  try {
    return await work(session);
  } finally {
    await session.release();
  }
}

async function record(store: ModelStore, installed: InstalledModel, report: Int8Report, say: (line: string) => void): Promise<InstalledModel> {
  const dir = store.modelDir(installed.id);
  const reportName = path.posix.join('int8', 'report.json');
  const json = `${JSON.stringify(report, null, 2)}\n`;
  await mkdir(path.join(dir, 'int8'), { recursive: true });
  await writeFile(path.join(dir, reportName), json);
  const manifest = JSON.parse(await readFile(path.join(dir, MANIFEST), 'utf8')) as Manifest;
  for (const role of INT8_ROLES) {
    delete manifest.files[`${role}_int8`];
    if (report[role].accepted) manifest.files[`${role}_int8`] = { name: int8Path(role), size: report[role].bytes ?? 0 };
  }
  manifest.files[INT8_REPORT_ROLE] = { name: reportName, size: Buffer.byteLength(json) };
  await store.writeManifest(installed.id, manifest);
  const image = report.imagePsnr === undefined ? '' : `; prompt to image ${report.imagePsnr.toFixed(1)} dB PSNR from fp32's`;
  say(`  ${describeInt8(report)}${image} (${report.seconds} s)`);
  return (await store.resolve(installed.id)) ?? installed;
}

function relativeError(reference: Float32Array, other: Float32Array): number {
  let diff = 0;
  let norm = 0;
  for (let i = 0; i < reference.length; i++) {
    diff += (reference[i]! - other[i]!) ** 2;
    norm += reference[i]! ** 2;
  }
  return Math.sqrt(diff / Math.max(norm, Number.MIN_VALUE));
}

/** An 8-bit image's mean squared error at `psnr` dB, as a fraction of full scale squared: what adds across layers. */
const meanSquaredError = (psnr: number) => 10 ** (-psnr / 10);

/** Identical 8-bit images: PSNR's infinity, kept finite for JSON. */
const SAME_IMAGE_PSNR = 100;

/** PSNR of two decoded images (values in [-1, 1]) as the 8-bit images they become; SAME_IMAGE_PSNR when they are the same. */
export function imagePsnr(reference: Float32Array, other: Float32Array): number {
  const byte = (v: number) => Math.round(Math.min(1, Math.max(0, (v + 1) / 2)) * 255);
  let sum = 0;
  for (let i = 0; i < reference.length; i++) sum += (byte(reference[i]!) - byte(other[i]!)) ** 2;
  const mse = sum / reference.length;
  return mse === 0 ? SAME_IMAGE_PSNR : Math.min(SAME_IMAGE_PSNR, 10 * Math.log10((255 * 255) / mse));
}
