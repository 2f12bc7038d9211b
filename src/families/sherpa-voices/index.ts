import type { Family } from '../../core/loader.js';

/** Piper, Kokoro and the other voices sherpa-onnx runs, in its own supervised processes. */
export const sherpaVoices: Family = {
  loaders: { 'sherpa:tts': () => import('./tts.js').then((m) => m.sherpaTtsLoader) },
  ownProcesses: ['sherpa:tts'],
};
