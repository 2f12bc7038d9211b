import type { LoaderTable } from './backend.js';

/**
 * The runtimes this build ships, keyed by `${backend}:${kind}`. Backends are
 * imported lazily so that `lserve list` or a server that only does OCR never
 * pays for loading node-llama-cpp.
 */
export const defaultLoaders: LoaderTable = {
  'llama:chat': () => import('../backends/llama/chat.js').then((m) => m.chatLoader),
  'llama:embedding': () => import('../backends/llama/embedding.js').then((m) => m.embeddingLoader),
  'llama:rerank': () => import('../backends/llama/ranking.js').then((m) => m.rankingLoader),
  'onnx:ocr': () => import('../backends/onnx/ocr.js').then((m) => m.ocrLoader),
  'onnx:asr': () => import('../backends/onnx/whisper.js').then((m) => m.whisperLoader),
  'onnx:asr-stream': () => import('../backends/sherpa/streaming.js').then((m) => m.streamingLoader),
  'onnx:image': () => import('../backends/onnx/diffusion/loader.js').then((m) => m.imageLoader),
  'onnx:tts': () => import('../backends/onnx/qwen3-tts/index.js').then((m) => m.qwen3TtsLoader),
  'sherpa:tts': () => import('../backends/sherpa/tts.js').then((m) => m.sherpaTtsLoader),
};
