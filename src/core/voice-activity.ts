/**
 * Live voice activity detection, as the realtime API's turn taking needs it:
 * a stream per session, 16 kHz samples in, one speech probability per window
 * out (families/silero-vad implements it; src/audio/vad.ts turns the
 * probabilities into speech starts and ends). The engine holds one detector,
 * loaded at first use (Engine.voiceActivity).
 */

export interface VoiceActivityStream {
  readonly sampleRate: number;
  /** Samples per probability. */
  readonly windowSamples: number;
  /** Samples pushed that no window has taken yet: the next probability's window starts this far back. */
  readonly buffered: number;
  /** Adds samples; resolves with the probabilities of the windows they complete. Pushes are served in call order. */
  push(samples: Float32Array, signal?: AbortSignal): Promise<Float32Array>;
  close(): void;
}

export interface VoiceActivityDetector {
  createStream(): VoiceActivityStream;
  release(): Promise<void>;
}
