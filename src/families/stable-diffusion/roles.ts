import type { InstalledModel } from '../../core/store.js';

/**
 * File roles of image models (the keys of their catalog entries' `files`),
 * kept apart from the loader so that the task, the routes and `lserve pull`
 * can tell models apart without loading any runtime.
 */

/** The graphs of a Stable Diffusion ONNX export; each may have a `<role>_fp32` conversion. */
export const GRAPH_ROLES = ['text_encoder', 'unet', 'vae_decoder', 'vae_encoder'] as const;
export type GraphRole = (typeof GRAPH_ROLES)[number];

/** A latent decoder as an ONNX graph. */
export const LATENT_DECODER_ROLE = 'latent_decoder';
/** A latent decoder as TAESD's safetensors weights (the graph is built at load). */
export const DECODER_WEIGHTS_ROLE = 'decoder_weights';

/** Whether an installed model is a latent decoder (TAESD-class) rather than a whole pipeline. */
export function isLatentDecoderModel(installed: InstalledModel): boolean {
  return installed.files[LATENT_DECODER_ROLE] !== undefined || installed.files[DECODER_WEIGHTS_ROLE] !== undefined;
}
