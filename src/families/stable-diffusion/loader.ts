import { randomBytes } from 'node:crypto';
import { statSync } from 'node:fs';
import { readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { LoadedModel, Loader, LoadOptions } from '../../core/loader.js';
import { ModelLoadError, ServerError } from '../../core/errors.js';
import type { InstalledModel } from '../../core/store.js';
import { OnnxSession } from '../../runtimes/onnx/session.js';
import { LazySession } from '../../runtimes/onnx/lazy-session.js';
import { ClipTokenizer } from './clip-tokenizer.js';
import { DiffusionPipeline, LatentDecoder } from './diffusion-pipeline.js';
import { JobQueue } from '../../core/job-queue.js';
import { parseSchedulerConfig, SchedulerConfigError } from './scheduler.js';
import { DECODER_WEIGHTS_ROLE, GRAPH_ROLES, isLatentDecoderModel, LATENT_DECODER_ROLE } from './roles.js';
import { describeInt8, fp32Only, readInt8Report } from './int8-report.js';

/**
 * The `onnx:image` loader. A Stable-Diffusion-family export (roles
 * text_encoder, unet, vae_decoder, optional vae_encoder, tokenizer_vocab,
 * tokenizer_merges, optional scheduler) loads as a DiffusionPipeline; a
 * latent decoder (TAESD-class: role `latent_decoder`, an ONNX graph, or
 * `decoder_weights`, TAESD's safetensors) loads as a LatentDecoder that image
 * requests use in place of the pipeline's own VAE decoder.
 *
 * Each graph is taken from its int8 form (role `<role>_int8`, the UNet and
 * VAE decoder where they held up at pull: int8.ts), else its fp32
 * conversion (role `<role>_fp32`, see prepare.ts) when there is one, else as
 * shipped.
 */

/** The file a graph role loads from: its int8 form when one held up at pull (int8.ts), else its fp32 conversion when present. */
export function graphFile(installed: InstalledModel, role: string): string | undefined {
  return (fp32Only() ? undefined : installed.files[`${role}_int8`]) ?? installed.files[`${role}_fp32`] ?? installed.files[role];
}

function fileBytes(file: string): number {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
}

/** Bytes of a graph and of its external data file, if any (`<graph>.data`, as the conversion writes it). */
function graphBytes(file: string | undefined): number {
  return file ? fileBytes(file) + fileBytes(`${file}.data`) : 0;
}

/** Bytes of a graph as the export ships it, with the external data files recorded at pull (`<role>_data`, `<role>_data_2`, …). */
function shippedBytes(installed: InstalledModel, role: string): number {
  const file = installed.files[role];
  if (!file) return 0;
  const data = Object.keys(installed.files).filter((r) => r === `${role}_data` || r.startsWith(`${role}_data_`));
  return fileBytes(file) + data.reduce((sum, r) => sum + fileBytes(installed.files[r]!), 0);
}

/**
 * Memory of a loaded pipeline, measured with the real-size synthetic
 * SD-Turbo graphs (bench/images.ts, 512×512, peak RSS of the whole process):
 * fp32 weights 5.2 GB → 7.0 GB making images from text, 7.7 GB once an
 * img2img or edit has opened the VAE encoder (with the memory settings
 * below; 9.6 GB before them); the fp16 export as shipped, 2.6 GB of
 * weights → 9.0 GB (10.9 GB before; the casts ONNX Runtime runs around its
 * missing fp16 kernels need fp32 buffers too). So: the weights, fp16 ones
 * counted 2.5×, plus working memory of 0.5× the fp32 weights per 512×512
 * image (the UNet's attention scores at full latent resolution and the
 * VAE's full-resolution activations, each held by its session's arena
 * between images), scaled by the model's default image area. Larger
 * requested sizes need more than this. The int8 graphs pull keeps count
 * their own bytes with the fp32 graphs' workspace (4.13 GB estimated
 * against a runner's 3.78 GB peak, bench/images.md).
 */
const FP16_AS_SHIPPED = 2.5;
const WORKSPACE_PER_WEIGHT_AT_512 = 0.5;

/**
 * ONNX Runtime's memory settings for the pipeline's graphs (measured with
 * bench/images/memory.ts on SD-Turbo-sized fp32 graphs at 512×512; see
 * bench/images.md). The memory pattern is off: on top of the arena, every
 * graph's second run allocated a second copy of its activations (UNet
 * 0.77 → 1.5 GB, VAE decoder 1.1 → 2.1 GB) and gained no speed. The arena
 * stays on: without it, every run takes its activations fresh from the
 * system, and the page faults made a VAE decode 2.5× and a UNet step up to
 * 3× slower here.
 */
const GRAPH_MEMORY = { memoryPattern: false };

function defaultPixels(installed: InstalledModel): number {
  const d = installed.entry.defaults;
  return Number(d.width ?? 512) * Number(d.height ?? 512);
}

function estimate(installed: InstalledModel): number {
  const area = defaultPixels(installed) / (512 * 512);
  if (isLatentDecoderModel(installed)) return graphBytes(installed.files[LATENT_DECODER_ROLE] ?? installed.files[DECODER_WEIGHTS_ROLE]) * 2 + 0.3e9 * area;
  let weights = 0;
  let fp32Weights = 0;
  for (const role of GRAPH_ROLES) {
    const converted = installed.files[`${role}_fp32`];
    // An export found to be fp32 already has its original recorded as the conversion.
    const bytes = converted && converted !== installed.files[role] ? graphBytes(converted) : shippedBytes(installed, role);
    const int8 = graphFile(installed, role) === installed.files[`${role}_int8`] ? graphBytes(installed.files[`${role}_int8`]) : undefined;
    weights += int8 ?? (converted ? bytes : bytes * FP16_AS_SHIPPED);
    // Activations stay fp32 between the int8 products: the workspace is the fp32 graph's.
    fp32Weights += converted ? bytes : bytes * 2;
  }
  return Math.round(weights + WORKSPACE_PER_WEIGHT_AT_512 * fp32Weights * area);
}

function required(installed: InstalledModel, roles: readonly string[]): void {
  const missing = roles.filter((r) => !installed.files[r]);
  if (missing.length) {
    throw new ServerError(`Image model '${installed.id}' lacks ${missing.join(', ')} (it has ${Object.keys(installed.files).join(', ')})`, { code: 'model_incomplete' });
  }
}

async function load(installed: InstalledModel, options: LoadOptions): Promise<LoadedModel> {
  const defaults = installed.entry.defaults;
  const latentChannels = Number(defaults.latent_channels ?? 4);
  const sessionOptions = { threads: options.threads };
  if (installed.files[LATENT_DECODER_ROLE]) {
    const session = await OnnxSession.create(installed.files[LATENT_DECODER_ROLE], sessionOptions);
    return new LatentDecoder(session, latentChannels, estimate(installed));
  }
  if (installed.files[DECODER_WEIGHTS_ROLE]) {
    // The graph is built from the weights on each load (milliseconds) and read by ORT from a temporary file.
    const { readSafetensors, taesdDecoderGraph } = await import('./taesd.js');
    const graph = taesdDecoderGraph(await readSafetensors(installed.files[DECODER_WEIGHTS_ROLE]));
    const file = path.join(os.tmpdir(), `lserve-${installed.id}-${randomBytes(6).toString('hex')}.onnx`);
    await writeFile(file, graph);
    try {
      return new LatentDecoder(await OnnxSession.create(file, sessionOptions), latentChannels, estimate(installed));
    } finally {
      await rm(file, { force: true });
    }
  }
  required(installed, ['text_encoder', 'unet', 'vae_decoder', 'tokenizer_vocab', 'tokenizer_merges']);
  // Refused at `lserve pull` already (prepare.ts); a model registered before that check is refused here, before any graph loads.
  const schedulerConfig = await readSchedulerConfig(installed);
  try {
    parseSchedulerConfig(schedulerConfig);
  } catch (error) {
    if (!(error instanceof SchedulerConfigError)) throw error;
    throw new ModelLoadError(`Image model '${installed.id}' cannot run: ${error.message}.`, { code: 'unsupported_scheduler', cause: error });
  }
  const fp16 = GRAPH_ROLES.filter((r) => installed.files[r] && !installed.files[`${r}_fp32`]);
  if (fp16.length) options.log?.(`${installed.id}: running ${fp16.join(', ')} as shipped (no fp32 conversion found; \`lserve pull ${installed.id}\` writes it)`);
  options.log?.(`${installed.id}: ${await precisionLine(installed)}`);
  const tokenizer = await ClipTokenizer.load(installed.files.tokenizer_vocab!, installed.files.tokenizer_merges!, Number(defaults.pad_token_id ?? 0));
  const graphs = await OnnxSession.createAll(
    {
      textEncoder: graphFile(installed, 'text_encoder')!,
      unet: graphFile(installed, 'unet')!,
      vaeDecoder: graphFile(installed, 'vae_decoder')!,
    },
    { ...sessionOptions, ...GRAPH_MEMORY },
  ).catch((error: unknown) => {
    throw missingKernel(installed, error) ?? error;
  });
  const encoder = graphFile(installed, 'vae_encoder');
  const sessions = { ...graphs, vaeEncoder: encoder ? new LazySession(encoder, (file) => OnnxSession.create(file, { ...sessionOptions, ...GRAPH_MEMORY })) : undefined };
  try {
    const info = {
      latentChannels,
      scalingFactor: Number(defaults.vae_scaling_factor ?? 0.18215),
      vaeFactor: Number(defaults.vae_factor ?? 8),
      canEncode: sessions.vaeEncoder !== undefined,
    };
    const queue = new JobQueue(options.maxQueue ?? 16, `Image model '${installed.id}'`);
    return new DiffusionPipeline(sessions, tokenizer, info, queue, estimate(installed), schedulerConfig);
  } catch (error) {
    await Promise.all(Object.values(graphs).map((s) => s.release()));
    throw new ServerError(`Image model '${installed.id}' does not have the interface of a Stable Diffusion ONNX export: ${(error as Error).message}`, { code: 'model_mismatch', cause: error });
  }
}

/** What the load line says of the UNet's and VAE decoder's precision, with the probe's figures from pull. */
async function precisionLine(installed: InstalledModel): Promise<string> {
  if (fp32Only()) return 'UNet and VAE decoder in fp32 (LSERVE_IMAGE_PRECISION=fp32)';
  const report = await readInt8Report(installed);
  if (!report) return `UNet and VAE decoder in fp32 (no int8 graphs prepared; \`lserve pull ${installed.id}\` prepares them)`;
  return describeInt8(report);
}

/**
 * ONNX Runtime's refusal of an operator its CPU provider has no kernel for,
 * as an error that says what to do: a model registered before `lserve pull`
 * learnt to rewrite fused GPU operators (cpu-operators.ts) gets them
 * rewritten by a pull now. Undefined for any other error.
 */
function missingKernel(installed: InstalledModel, error: unknown): ModelLoadError | undefined {
  const message = error instanceof Error ? error.message : String(error);
  const operator = /kernel for ([\w.]+)\(|implementation for (\w+)\(/.exec(message);
  if (!operator) return undefined;
  const name = operator[1] ?? operator[2]!;
  return new ModelLoadError(
    `Image model '${installed.id}' uses ${name}, an operator ONNX Runtime's CPU provider has no kernel for. Run \`lserve pull ${installed.id}\` again: it rewrites such fused GPU operators into standard ones, or names those it cannot.`,
    { code: 'unsupported_operators', cause: error },
  );
}

/** Reads a model's scheduler_config.json (or undefined when it ships none). */
export async function readSchedulerConfig(installed: InstalledModel): Promise<unknown> {
  const file = installed.files.scheduler;
  return file ? JSON.parse(await readFile(file, 'utf8')) : undefined;
}

export const imageLoader: Loader = { load, estimateMemory: estimate };
