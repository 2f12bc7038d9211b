import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { InstalledModel } from '../../core/store.js';
import { SIZE_STEP } from '../../core/tasks/image/options.js';

/**
 * Defaults for an image model a user registered from a directory. The
 * catalog layout it matched is SD-Turbo's (512², 1 step and at most 4, no
 * guidance), while the export may be any Stable Diffusion 1.x / 2.x model, so
 * what its own configs state is taken as diffusers' pipeline takes it:
 * - size: unet/config.json's `sample_size` × the VAE's scale factor,
 *   2^(len(block_out_channels) − 1) from vae_decoder/config.json (else 8);
 *   requests may go up to 1.5× that side;
 * - `vae_scaling_factor`: vae_decoder/config.json's `scaling_factor`;
 * - steps and guidance: SD-Turbo's when the export names itself a turbo model
 *   (`_name_or_path` in model_index.json or unet/config.json), else 20 steps
 *   (the usual web UI default) and diffusers' guidance scale 7.5;
 * - at most 150 steps (the web UIs' limit), whatever the model.
 * A config the export lacks leaves the layout's value: only what is derived
 * is returned, to be merged over the layout's defaults.
 */

const STANDARD = { steps: 20, guidance_scale: 7.5 };
const MAX_STEPS = 150;

export interface ExportDefaults {
  /** The defaults that differ from the layout's (merged over them). */
  defaults: Record<string, unknown>;
  /** One line for `lserve pull`: what was taken, and from where. */
  summary: string;
}

export async function exportDefaults(installed: InstalledModel): Promise<ExportDefaults | undefined> {
  const unetGraph = installed.files.unet;
  if (!unetGraph) return undefined; // a latent decoder (TAESD) has no such defaults
  const unet = await readConfig(path.join(path.dirname(unetGraph), 'config.json'));
  const vae = installed.files.vae_decoder ? await readConfig(path.join(path.dirname(installed.files.vae_decoder), 'config.json')) : {};
  const index = installed.files.model_index ? await readConfig(installed.files.model_index) : {};
  const layout = installed.entry.defaults;
  const defaults: Record<string, unknown> = { max_steps: MAX_STEPS };
  const said: string[] = [];

  const blocks = vae.block_out_channels;
  const vaeFactor = Array.isArray(blocks) && blocks.length > 0 ? 2 ** (blocks.length - 1) : Number(layout.vae_factor ?? 8);
  if (Array.isArray(blocks) && blocks.length > 0) defaults.vae_factor = vaeFactor;
  if (typeof vae.scaling_factor === 'number' && vae.scaling_factor > 0) defaults.vae_scaling_factor = vae.scaling_factor;
  const sample = unet.sample_size;
  if (typeof sample === 'number' && Number.isInteger(sample) && sample > 0) {
    const side = Math.max(SIZE_STEP, Math.round((sample * vaeFactor) / SIZE_STEP) * SIZE_STEP);
    Object.assign(defaults, { width: side, height: side, max_size: Math.max(Number(layout.max_size ?? side), Math.floor((side * 1.5) / SIZE_STEP) * SIZE_STEP) });
    said.push(`${side}×${side} (unet/config.json)`);
  } else {
    said.push(`${String(layout.width)}×${String(layout.height)}`);
  }

  const name = [index._name_or_path, unet._name_or_path].find((n): n is string => typeof n === 'string');
  if (name && /turbo/i.test(name)) {
    said.push(`${String(layout.steps)} step${layout.steps === 1 ? '' : 's'} and guidance ${String(layout.guidance_scale)} (a turbo model: ${name})`);
  } else {
    Object.assign(defaults, STANDARD);
    said.push(`${STANDARD.steps} steps, guidance ${STANDARD.guidance_scale}`);
  }
  return { defaults, summary: `Defaults: ${said.join(', ')}, at most ${MAX_STEPS} steps; a request's size, steps and guidance_scale override them` };
}

/** A JSON object from a config file; {} when the file is absent or not an object (the export check reports malformed required files). */
async function readConfig(file: string): Promise<Record<string, unknown>> {
  try {
    const value: unknown = JSON.parse(await readFile(file, 'utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}
