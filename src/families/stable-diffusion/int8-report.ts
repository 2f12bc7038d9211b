import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { InstalledModel } from '../../core/store.js';

/**
 * The int8 UNet and VAE decoder's record (int8.ts prepares them at pull):
 * which were kept, with the probe's figures, read by the loader for its
 * load line and graph choice without loading the quantizer.
 */

/** Relative L2 error of the noise prediction the int8 UNet may have (the text encoder: the fp32 UNet's, from its states). */
export const UNET_TOLERANCE = 0.1;
/** PSNR (dB, 8-bit image) the image must reach against the fp32 pipeline's: the int8 VAE decoder's from fp32 latents, the int8 UNet's through the kept text encoder and VAE decoder. */
export const IMAGE_MIN_PSNR = 30;

export const INT8_ROLES = ['text_encoder', 'unet', 'vae_decoder'] as const;
export type Int8Role = (typeof INT8_ROLES)[number];
export const INT8_REPORT_ROLE = 'int8_report';

export interface RoleReport {
  accepted: boolean;
  /** Why it was not kept (a probe figure out of bounds, or a graph that cannot be quantized). */
  reason?: string;
  /** Text encoder, UNet: relative L2 error of the noise prediction (the fp32 UNet's from the text encoder's states). */
  error?: number;
  /** VAE decoder: PSNR of its image of fp32 latents against fp32's; UNet: of its latents' image against the fp32 latents', both decoded by the kept VAE decoder (dB). */
  psnr?: number;
  /** Bytes of the int8 graph and its data. */
  bytes?: number;
  /** The operators with 8-bit activations (`Conv and MatMul`, `Conv`, `MatMul`; every other weight 8-bit too), or `weights` (weights alone). */
  int8?: string;
  /** Layers given 8-bit activations on top of `int8`'s own, of those the boldest plan has (the layer search: runtimes/onnx/int8/search.ts). */
  added?: { op: string; layers: number; of: number };
  /** Bolder plans that missed, with why. */
  tried?: string[];
}

export interface Int8Report {
  width: number;
  height: number;
  text_encoder: RoleReport;
  unet: RoleReport;
  vae_decoder: RoleReport;
  /** The kept graphs together against fp32, prompt to image (dB): what a user sees, reported, not a criterion. */
  imagePsnr?: number;
  seconds: number;
}

/** `LSERVE_IMAGE_PRECISION=fp32`: no int8 graphs prepared, none used. */
export function fp32Only(): boolean {
  return process.env.LSERVE_IMAGE_PRECISION === 'fp32';
}

export function int8Path(role: Int8Role): string {
  return path.posix.join('int8', role, 'model.onnx');
}

/** Reads a model's int8 report, or undefined when none was made. */
export async function readInt8Report(installed: InstalledModel): Promise<Int8Report | undefined> {
  const file = installed.files[INT8_REPORT_ROLE];
  if (!file) return undefined;
  try {
    return JSON.parse(await readFile(file, 'utf8')) as Int8Report;
  } catch {
    return undefined;
  }
}

/** A relative error as a percentage, with two decimals under 1 %. */
export const percent = (e: number | undefined) => (e === undefined ? '' : `${(e * 100).toFixed(e < 0.01 ? 2 : 1)} %`);

const OPERATORS: Record<string, string> = { Conv: 'convolutions', MatMul: 'products', 'Conv and MatMul': 'convolutions and products' };

/** A one-line account of a report, for `lserve pull` and the load line. */
export function describeInt8(report: Int8Report): string {
  const role = (name: string, r: RoleReport | undefined, figure: string) => {
    if (!r) return `${name} fp32`;
    const kind = { weights: 'int8 weights', Conv: 'int8 convolutions', MatMul: 'int8 products' }[r.int8 ?? ''] ?? 'int8';
    const added = r.added ? ` and ${r.added.layers} of ${r.added.of} ${OPERATORS[r.added.op] ?? 'layers'} with 8-bit activations` : '';
    return `${name} ${r.accepted ? `${kind}${added} (${figure})` : `fp32 (${r.reason})`}`;
  };
  return [
    role('text encoder', report.text_encoder, `noise prediction within ${percent(report.text_encoder?.error)}`),
    role('UNet', report.unet, `noise prediction within ${percent(report.unet.error)}, its image ${report.unet.psnr?.toFixed(1)} dB PSNR`),
    role('VAE decoder', report.vae_decoder, `${report.vae_decoder.psnr?.toFixed(1)} dB PSNR`),
  ].join(', ');
}
