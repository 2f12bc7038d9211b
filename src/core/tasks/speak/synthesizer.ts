import type { JobQueue } from '../../job-queue.js';
import type { LoadedModel } from '../../loader.js';

/**
 * The contract between the speech task (src/core/tasks/speak.ts) and a
 * synthesis runtime (Qwen3-TTS on onnxruntime-node, Piper/Kokoro through
 * sherpa-onnx). The task validates the request against `info`, splits long
 * text at sentence boundaries (see `maxPieceChars`), applies `speed` by time stretching when the
 * runtime has no rate control, and encodes; a runtime turns one piece of text
 * into audio and hands it over as soon as each block is decoded.
 */

/** How a model chooses its voice: a preset speaker, a described voice, or a cloned reference. */
export type VoiceMode = 'preset' | 'design' | 'clone';

export interface SpeechModelInfo {
  /** Output sample rate in Hz (Qwen3-TTS and Kokoro: 24 000; Piper voices: their own). */
  sampleRate: number;
  mode: VoiceMode;
  /** Languages accepted, as names ("English", "Chinese"…); `auto` is always accepted besides. Empty: not checked. */
  languages: string[];
  /** Preset speaker names (mode `preset`); empty for other modes. */
  speakers: string[];
  defaultSpeaker?: string;
  /** The model applies `speed` itself (Piper's length scale, Kokoro's speed); otherwise the task time-stretches. */
  rateControl: boolean;
  /** Codec frames per second of audio, for the `frames` cap (Qwen3-TTS: 12.5); absent when the model has no frames. */
  framesPerSecond?: number;
  /**
   * The longest text (characters) the model speaks in one pass, its prosody
   * spanning sentences: the task hands over input up to this length whole,
   * and longer input in pieces of whole sentences up to it. Absent: the
   * task hands over sentence by sentence.
   */
  maxPieceChars?: number;
}

export interface SynthesisRequest {
  /** One piece of the input (a sentence, a few, or the whole input), never empty. */
  text: string;
  /** A name from `info.languages` as the model spells it, or undefined for automatic. */
  language?: string;
  /** A name from `info.speakers` as the model spells it (mode `preset`). */
  speaker?: string;
  /** Natural-language voice description (mode `design`). */
  voiceDescription?: string;
  /** Reference voice (mode `clone`): mono samples at `info.sampleRate`, and its transcript when known. The same object is passed for every piece of one request, so a runtime may cache what it derives from it. */
  reference?: { samples: Float32Array; text?: string };
  /** Speech rate, 0.25–4; only read when `info.rateControl`. */
  speed: number;
  /** Most codec frames to generate for this piece (models with frames). */
  maxFrames?: number;
  /** Sampling seed; the same seed and request give the same audio. */
  seed?: number;
}

export interface SpeechRuntime extends LoadedModel {
  readonly info: SpeechModelInfo;
  /**
   * The model's line (`--max-queue`, then 503): one piece is synthesised at a
   * time, and concurrent requests take turns piece by piece. The task admits
   * a request into it before its response starts; the request's pieces then
   * wait their turns in it.
   */
  readonly queue: JobQueue;
  /**
   * Synthesises one piece of text. `onAudio` receives mono float samples in
   * [-1, 1] at `info.sampleRate`, block by block as they are decoded (the
   * runtime owns nothing it hands over: the task may keep the arrays). Stops
   * at the next frame once `signal` aborts (rejecting with the abort reason).
   */
  synthesize(request: SynthesisRequest, onAudio: (samples: Float32Array) => void, signal: AbortSignal): Promise<{ frames: number }>;
}
