import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import type { InstalledModel } from '../../core/store.js';
import { ExternalDataError, externalDataFiles } from '../../runtimes/onnx/external-data.js';
import { ClipTokenizer } from './clip-tokenizer.js';
import { GRAPH_ROLES, type GraphRole } from './roles.js';

/**
 * What `lserve pull` checks in a Stable Diffusion export before it is used,
 * so that a missing or malformed piece is reported there, by name, instead
 * of as an ONNX Runtime error at the first request: model_index.json names a
 * pipeline lserve runs, the tokenizer files make a CLIP tokenizer, and every
 * graph reads, with the external data files it keeps its weights in (the
 * diffusers / optimum layout: `unet/model.onnx` + `unet/model.onnx_data` or
 * `weights.pb`) present beside it and long enough.
 */

/** A piece of the export that is missing or malformed; the message names it. */
export class ExportProblem extends Error {}

/** The external data files of each graph, by role, as the manifest records them (`<role>_data`, `<role>_data_2`, …). */
export type GraphData = Partial<Record<GraphRole, Array<{ path: string; size: number }>>>;

/** Components of diffusers pipelines that lserve's Stable Diffusion sampler has no part for. */
const UNSUPPORTED_COMPONENTS: Record<string, string> = {
  text_encoder_2: 'a second text encoder (Stable Diffusion XL)',
  tokenizer_2: 'a second tokenizer (Stable Diffusion XL)',
  text_encoder_3: 'a third text encoder (Stable Diffusion 3)',
  transformer: 'a diffusion transformer instead of a UNet (Stable Diffusion 3, Flux, PixArt)',
  prior: 'a prior model (Kandinsky, Würstchen)',
};

export async function checkExport(installed: InstalledModel): Promise<GraphData> {
  await checkModelIndex(installed.files.model_index);
  await checkTokenizer(installed);
  const data: GraphData = {};
  for (const role of GRAPH_ROLES) {
    const graph = installed.files[role];
    if (!graph) continue;
    try {
      const files = await externalDataFiles(graph);
      if (files.length) data[role] = await Promise.all(files.map(async (f) => ({ path: f.path, size: (await stat(f.path)).size })));
    } catch (error) {
      if (error instanceof ExternalDataError) throw new ExportProblem(`${role}: ${error.message}`, { cause: error });
      throw error;
    }
  }
  return data;
}

/** model_index.json: a JSON object whose components are ones this pipeline has (no SDXL / SD3 parts). */
async function checkModelIndex(file: string | undefined): Promise<void> {
  if (!file) return;
  let index: unknown;
  try {
    index = JSON.parse(await readFile(file, 'utf8'));
  } catch (error) {
    throw new ExportProblem(`model_index.json is not valid JSON (${(error as Error).message})`, { cause: error });
  }
  if (typeof index !== 'object' || index === null || Array.isArray(index)) throw new ExportProblem('model_index.json is not a JSON object of pipeline components');
  const parts = Object.keys(index).filter((key) => key in UNSUPPORTED_COMPONENTS && (index as Record<string, unknown>)[key] !== null);
  const named = (index as { _class_name?: unknown })._class_name;
  if (parts.length) {
    const what = parts.map((p) => `${p} (${UNSUPPORTED_COMPONENTS[p]})`).join(', ');
    throw new ExportProblem(`model_index.json describes ${typeof named === 'string' ? named : 'a pipeline'} with ${what}; lserve runs Stable Diffusion 1.x / 2.x / Turbo pipelines (text_encoder, unet, vae_decoder, vae_encoder)`);
  }
}

/** tokenizer/vocab.json and merges.txt: they must make CLIP's tokenizer (with its start and end tokens). */
async function checkTokenizer(installed: InstalledModel): Promise<void> {
  const vocab = installed.files.tokenizer_vocab;
  const merges = installed.files.tokenizer_merges;
  if (!vocab || !merges) return;
  const name = (file: string) => path.join(path.basename(path.dirname(file)), path.basename(file));
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(vocab, 'utf8'));
  } catch (error) {
    throw new ExportProblem(`${name(vocab)} is not valid JSON (${(error as Error).message})`, { cause: error });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed) || !Object.values(parsed).every((id) => Number.isInteger(id))) {
    throw new ExportProblem(`${name(vocab)} is not a JSON object of token ids`);
  }
  try {
    await ClipTokenizer.load(vocab, merges);
  } catch (error) {
    throw new ExportProblem(`${name(vocab)} and ${name(merges)} do not make a CLIP tokenizer (${(error as Error).message})`, { cause: error });
  }
}
