import type { Family } from '../../core/loader.js';

/** Qwen3-TTS (onnx-community exports): preset, designed and cloned voices; its graphs are prepared once at pull. */
export const qwen3Tts: Family = {
  loaders: { 'onnx:tts': () => import('./loader.js').then((m) => m.qwen3TtsLoader) },
  preparers: { 'onnx:tts': () => import('./prepared/prepare.js').then((m) => m.qwen3TtsPreparer) },
};
