import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { GRAPH_ROLES } from './roles.js';
import type { Preparer } from '../../core/loader.js';
import { StoreError } from '../../core/errors.js';
import { MANIFEST, type Manifest, type InstalledModel, type ModelStore } from '../../core/store.js';
import { parseSchedulerConfig, SchedulerConfigError } from './scheduler.js';
import { checkExport, ExportProblem, type GraphData } from './export-check.js';
import { rewriteGraphsForCpu, UnsupportedOperators } from './cpu-operators.js';
import { exportDefaults } from './export-defaults.js';
import { fp32Only, INT8_REPORT_ROLE } from './int8-report.js';

/**
 * Work done once when an image model is installed (`lserve pull`). First its
 * scheduler_config.json is checked: a scheduler lserve cannot run as
 * configured (see scheduler.ts) is refused there, naming the key, and a
 * directory being registered is not registered. The rest of the export is
 * checked likewise (export-check.ts), and the external data files its graphs
 * keep their weights in are recorded with it; a user's own export gets the
 * defaults its configs state (export-defaults.ts). Then its fp16
 * graphs are converted to fp32 beside the model (`<model dir>/fp32/<role>/`)
 * and recorded in its manifest as `<role>_fp32`, which the loader prefers.
 * ONNX Runtime's CPU provider runs the fp32 graphs faster and in less memory
 * than the fp16 ones it has to cast around (SD-Turbo-sized: 4.31 s instead
 * of 4.67 s per UNet step, 9.6 GB instead of 10.9 GB at peak; bench/images.ts);
 * the cost is disk (SD-Turbo: 2.6 GB as shipped, plus 5.2 GB). Graphs that
 * are already fp32 are left alone. Then fused GPU operators that the CPU
 * provider has no kernels for are rewritten into standard ones, or the
 * model is refused naming them (cpu-operators.ts). Last, the UNet and VAE
 * decoder get int8 forms where a probe against fp32 says they hold up
 * (int8.ts).
 */

export function needsPreparation(installed: InstalledModel): boolean {
  return installed.entry.kind === 'image' && installed.entry.backend === 'onnx' && GRAPH_ROLES.some((role) => installed.files[role] && !installed.files[`${role}_fp32`] && !isFp32Copy(installed, role));
}

/** Roles whose graph was found to have no fp16 tensors are recorded with the original as their fp32 file. */
function isFp32Copy(installed: InstalledModel, role: string): boolean {
  return installed.files[`${role}_fp32`] === installed.files[role];
}

export async function prepareImageModel(store: ModelStore, installed: InstalledModel, say: (line: string) => void = () => {}): Promise<InstalledModel> {
  await checkScheduler(store, installed);
  installed = await recordExport(store, installed, say);
  if (installed.source === 'local') installed = await recordDefaults(store, installed, say);
  if (needsPreparation(installed)) installed = await convertGraphs(store, installed, say);
  installed = await checkCpuOperators(store, installed, say);
  return withInt8Graphs(store, installed, say);
}

/** Writes the fp32 conversion of every fp16 graph (`<role>_fp32`). */
async function convertGraphs(store: ModelStore, installed: InstalledModel, say: (line: string) => void): Promise<InstalledModel> {
  say(`Converting ${installed.id}'s fp16 graphs to fp32 once (on CPU, ONNX Runtime runs them faster and in less memory; they take twice the disk):`);
  // The converter (protobuf) loads only when there is something to convert.
  const { convertToFp32 } = await import('../../runtimes/onnx/fp32.js');
  const dir = store.modelDir(installed.id);
  const manifestPath = path.join(dir, MANIFEST);
  const manifest = JSON.parse(await readFile(manifestPath, 'utf8')) as Manifest;
  for (const role of GRAPH_ROLES) {
    const source = installed.files[role];
    if (!source || installed.files[`${role}_fp32`]) continue;
    const started = Date.now();
    const name = path.posix.join('fp32', role, 'model.onnx');
    const result = await convertToFp32(source, path.join(dir, name));
    if (result.converted === 0) {
      manifest.files[`${role}_fp32`] = { name: path.basename(source), size: 0, path: source };
      say(`  ${role}: already fp32`);
      continue;
    }
    manifest.files[`${role}_fp32`] = { name, size: result.bytes };
    say(`  ${role}: fp16 → fp32 (${(result.bytes / 1e9).toFixed(2)} GB, ${((Date.now() - started) / 1000).toFixed(1)} s)`);
  }
  await store.writeManifest(installed.id, manifest);
  return (await store.resolve(installed.id)) ?? installed;
}

/** The int8 UNet and VAE decoder (int8.ts), prepared once for a pipeline that has none yet; skipped with LSERVE_IMAGE_PRECISION=fp32. */
async function withInt8Graphs(store: ModelStore, installed: InstalledModel, say: (line: string) => void): Promise<InstalledModel> {
  const f = installed.files;
  if (fp32Only() || f[INT8_REPORT_ROLE] || !f.unet || !f.vae_decoder || !f.text_encoder || !f.tokenizer_vocab || !f.tokenizer_merges) return installed;
  const graph = (role: string) => f[`${role}_fp32`] ?? f[role]!;
  // The quantizer (protobuf) loads only for image models being prepared.
  const { prepareInt8 } = await import('./int8.js');
  return prepareInt8(store, installed, { textEncoder: graph('text_encoder'), unet: graph('unet'), vaeDecoder: graph('vae_decoder') }, say);
}

/** The graphs as the loader will open them, with fused operators the CPU has no kernels for rewritten; refused when some cannot be. */
async function checkCpuOperators(store: ModelStore, installed: InstalledModel, say: (line: string) => void): Promise<InstalledModel> {
  try {
    return await rewriteGraphsForCpu(store, installed, say);
  } catch (error) {
    if (!(error instanceof UnsupportedOperators)) throw error;
    return refuse(store, installed, error.message, 'unsupported_operators', error);
  }
}

/**
 * Refuses a model whose scheduler_config.json lserve's samplers cannot follow
 * (a StoreError naming the key: `lserve pull` prints it). A model registered
 * in place is unregistered (its files are the user's and stay); a downloaded
 * one keeps its files for `lserve rm`.
 */
export async function checkScheduler(store: ModelStore, installed: InstalledModel): Promise<void> {
  const file = installed.files.scheduler;
  if (!file) return;
  let problem: string;
  let cause: unknown;
  try {
    parseSchedulerConfig(JSON.parse(await readFile(file, 'utf8')));
    return;
  } catch (error) {
    if (!(error instanceof SchedulerConfigError) && !(error instanceof SyntaxError)) throw error;
    problem = error instanceof SchedulerConfigError ? error.message : `scheduler_config.json is not valid JSON (${error.message})`;
    cause = error;
  }
  return refuse(store, installed, problem, 'unsupported_scheduler', cause);
}

/**
 * Checks the export's pieces (export-check.ts: model_index.json, the
 * tokenizer, every graph and the external data it names) and records each
 * graph's external data files in the manifest as `<role>_data`,
 * `<role>_data_2`, … (their sizes count in the model's, and the memory
 * estimate reads them). A missing or malformed piece refuses the model,
 * naming it.
 */
async function recordExport(store: ModelStore, installed: InstalledModel, say: (line: string) => void): Promise<InstalledModel> {
  let data: GraphData;
  try {
    data = await checkExport(installed);
  } catch (error) {
    if (!(error instanceof ExportProblem)) throw error;
    return refuse(store, installed, error.message, 'invalid_export', error);
  }
  const entries = Object.entries(data).flatMap(([role, files]) => files.map((file, i) => [`${role}_data${i ? `_${i + 1}` : ''}`, file] as const));
  if (entries.every(([role, file]) => installed.files[role] === file.path)) return installed;
  for (const [role, file] of entries) {
    const graph = installed.files[role.replace(/_data(_\d+)?$/, '')]!;
    const shown = (f: string) => path.relative(path.dirname(path.dirname(graph)), f);
    say(`  ${role}  ${shown(file.path)} (${(file.size / 1e9).toFixed(2)} GB: the weights of ${shown(graph)})`);
  }
  const manifest = JSON.parse(await readFile(path.join(store.modelDir(installed.id), MANIFEST), 'utf8')) as Manifest;
  for (const [role, file] of entries) manifest.files[role] = { name: path.basename(file.path), size: file.size, path: file.path };
  await store.writeManifest(installed.id, manifest);
  return (await store.resolve(installed.id)) ?? installed;
}

/** A user's own export: the defaults its configs state (export-defaults.ts) replace the catalog layout's. */
async function recordDefaults(store: ModelStore, installed: InstalledModel, say: (line: string) => void): Promise<InstalledModel> {
  const derived = await exportDefaults(installed);
  if (!derived) return installed;
  say(`  ${derived.summary}`);
  return store.setUserDefaults(installed.id, derived.defaults);
}

/**
 * Refuses a model at install: one registered in place is unregistered (its
 * files are the user's and stay); a downloaded one keeps its files for
 * `lserve rm`.
 */
async function refuse(store: ModelStore, installed: InstalledModel, problem: string, code: string, cause: unknown): Promise<never> {
  const local = installed.source === 'local';
  if (local) await store.remove(installed.id);
  throw new StoreError(
    `Image model '${installed.id}' cannot run: ${problem}. ${
      local ? 'Its registration was undone.' : `Its files are kept; \`lserve rm ${installed.id}\` removes them.`
    }`,
    code,
    cause,
  );
}

/** The `onnx:image` preparer (src/compose.ts). */
export const imagePreparer: Preparer = { prepare: prepareImageModel };
