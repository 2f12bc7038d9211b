import type { Family } from '../../core/loader.js';

/** Stable Diffusion ONNX exports (SD-Turbo class), with TAESD as a latent decoder; fp16 graphs are converted to fp32 once at pull. */
export const stableDiffusion: Family = {
  loaders: { 'onnx:image': () => import('./loader.js').then((m) => m.imageLoader) },
  preparers: { 'onnx:image': () => import('./prepare.js').then((m) => m.imagePreparer) },
};
