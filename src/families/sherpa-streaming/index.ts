/** Streaming speech recognition on sherpa-onnx (kind `asr-stream`): the family's entry, what the composition root loads. */
export { streamingLoader } from './streaming.js';
