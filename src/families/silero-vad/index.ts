import type { SileroVad } from './silero-vad.js';

/** Silero VAD, bundled with the package: one detector on one thread (the server's turn taking, Whisper's long uploads). */
export function loadSileroVad(): Promise<SileroVad> {
  return import('./silero-vad.js').then((m) => m.SileroVad.load(1));
}
