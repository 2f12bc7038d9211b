import type { Family } from '../../core/loader.js';
import type { VoiceActivityDetector } from './model.js';

/**
 * Whisper (onnx-community exports). `vad` finds the speech in long uploads:
 * windows are cut at silences and silence is not decoded; the composition
 * root hands it over (Silero VAD, a family of its own).
 */
export function whisper(vad: () => Promise<VoiceActivityDetector>): Family {
  return {
    loaders: { 'onnx:asr': () => import('./model.js').then((m) => m.createWhisperLoader(vad)) },
  };
}
