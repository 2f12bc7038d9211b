import type { SherpaRecognizerConfig, SherpaTtsConfig } from './protocol.js';

/**
 * The part of sherpa-onnx-node (CommonJS, without type declarations) the
 * child processes use, as they use it: the streaming recognizer and the
 * offline speech synthesizer.
 */

export interface OnlineStream {
  acceptWaveform(wave: { samples: Float32Array; sampleRate: number }): void;
  inputFinished(): void;
}

export interface OnlineRecognizer {
  createStream(): OnlineStream;
  isReady(stream: OnlineStream): boolean;
  decode(stream: OnlineStream): void;
  decodeStreams(streams: OnlineStream[]): void;
  getResult(stream: OnlineStream): { text: string };
  isEndpoint(stream: OnlineStream): boolean;
  reset(stream: OnlineStream): void;
}

export interface OfflineTts {
  readonly sampleRate: number;
  readonly numSpeakers: number;
  /** Synthesises on libuv's thread pool; `onProgress` gets each generated block, and returning 0 from it cancels the rest. */
  generateAsync(request: {
    text: string;
    generationConfig: { sid: number; speed: number; silenceScale: number };
    onProgress: (progress: { samples: Float32Array }) => number;
  }): Promise<unknown>;
}

export interface SherpaOnnx {
  version?: string;
  OnlineRecognizer: new (config: SherpaRecognizerConfig) => OnlineRecognizer;
  /** Loads a model on libuv's thread pool. */
  OfflineTts: { createAsync(config: SherpaTtsConfig): Promise<OfflineTts> };
}
