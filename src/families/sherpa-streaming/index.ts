import type { Family } from '../../core/loader.js';

/** Streaming speech recognition with sherpa-onnx (transducer and paraformer exports), in its own supervised processes. */
export const sherpaStreaming: Family = {
  loaders: { 'onnx:asr-stream': () => import('./streaming.js').then((m) => m.streamingLoader) },
  ownProcesses: ['onnx:asr-stream'],
};
