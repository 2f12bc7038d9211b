/**
 * File roles of image models (the keys of their catalog entries' `files`),
 * kept apart from the loader so that the task, the routes and `lserve pull`
 * can tell models apart without loading any runtime.
 */

/** The graphs of a Stable Diffusion ONNX export; each may have a `<role>_fp32` conversion. */
export const GRAPH_ROLES = ['text_encoder', 'unet', 'vae_decoder', 'vae_encoder'] as const;
export type GraphRole = (typeof GRAPH_ROLES)[number];

export { DECODER_WEIGHTS_ROLE, isLatentDecoderModel, LATENT_DECODER_ROLE } from '../../core/tasks/image/image-pipeline.js';
