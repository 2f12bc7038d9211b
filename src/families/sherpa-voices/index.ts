/** Piper and Kokoro voices on sherpa-onnx (kind `tts`, backend `sherpa`): the family's entry, what the composition root loads. */
export { sherpaTtsLoader } from './tts.js';
