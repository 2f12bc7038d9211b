import type { JobQueue } from '../../job-queue.js';
import type { LoadedModel } from '../../loader.js';

/**
 * The contract between the transcription task (core/tasks/transcribe.ts) and
 * a speech recognition family (families/whisper implements it): the result
 * every family returns, the options the task passes on, and the model
 * interface. The task decodes the audio, checks the request against the
 * model, finds the speech with the model's voice activity detector, and asks
 * the model for a transcription of those regions.
 */

export interface Segment {
  id: number;
  /** Mel frame the window started at. */
  seek: number;
  start: number;
  end: number;
  text: string;
  tokens: number[];
  temperature: number;
  avg_logprob: number;
  compression_ratio: number;
  no_speech_prob: number;
}

export interface Word {
  word: string;
  start: number;
  end: number;
}

export interface TranscriptionOptions {
  /** ISO 639-1 code, or undefined / 'auto' to detect it from the first window. */
  language?: string;
  task?: 'transcribe' | 'translate';
  /** Text that conditions the first window (names, spelling, style). */
  prompt?: string;
  /** 0 (default): greedy, falling back to higher temperatures on failure; above 0: sample at that temperature. */
  temperature?: number;
  /** Seed for sampling at temperatures above 0 (reproducible results). */
  seed?: number;
  /**
   * Stretches of the audio to transcribe, in seconds (speech found by VAD,
   * each at most a window long); the rest is silence and skipped. Absent: all of it.
   */
  regions?: ReadonlyArray<{ start: number; end: number }>;
  /** Time every word too (needs Transcriber.wordTimestamps). */
  wordTimestamps?: boolean;
  onProgress?: (done: number, total: number) => void;
}

export interface Transcription {
  text: string;
  language: string;
  /** Seconds of audio. */
  duration: number;
  segments: Segment[];
  /** With wordTimestamps: every word, in order, inside its segment's bounds. */
  words?: Word[];
}

/** Speech probability per 32 ms window (512 samples at 16 kHz) of a whole recording. */
export interface SpeechDetector {
  probabilities(samples: Float32Array, signal?: AbortSignal): Promise<Float32Array>;
}

/** What a loaded speech recognition model (kind `asr`) offers the task. */
export interface Transcriber extends LoadedModel {
  /** Whether it can time words (`wordTimestamps`). */
  readonly wordTimestamps: boolean;
  /** Voice activity detection for long uploads: the task transcribes only the speech it finds. */
  readonly vad?: SpeechDetector;
  /** Transcriptions run one at a time per model, with a bounded line (`--max-queue`, then 503). */
  readonly queue: JobQueue;
  transcribe(samples: Float32Array, options: TranscriptionOptions, signal: AbortSignal): Promise<Transcription>;
}
