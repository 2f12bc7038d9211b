import { decodeAudio } from '../../audio/decode.js';
import type { Engine } from '../engine.js';
import { InvalidRequestError, UnsupportedError } from '../errors.js';
import type { Transcriber, Transcription, TranscriptionOptions } from './transcribe/transcriber.js';
import { speechSegments, splitForWindows } from '../../audio/vad.js';

/**
 * Speech to text as a task: audio bytes in any supported container, decoded
 * and resampled to 16 kHz mono, transcribed by a speech recognition model (a Transcriber: families/whisper). HTTP
 * (POST /v1/audio/transcriptions) and `lserve transcribe` both call
 * `transcribe()`; neither knows the pipeline.
 */

export type { Transcriber, Transcription } from './transcribe/transcriber.js';

/** Longest audio accepted, in seconds (decoded samples are held in memory: 1 h ≈ 230 MB). */
export const MAX_AUDIO_SECONDS = 60 * 60;

export interface TranscribeRequest extends Omit<TranscriptionOptions, 'onProgress'> {
  /** Model id or alias; optional when exactly one speech recognition model is installed. */
  model?: string;
  audio: Uint8Array;
  /** Request field named in audio errors. */
  param?: string;
  keepAliveMs?: number;
  onProgress?: (done: number, total: number) => void;
}

export interface TranscribeResult extends Transcription {
  model: string;
}

/** The speech recognition model a request that names none goes to (core/model-choice.ts). */
export function defaultAsrModel(engine: Engine): Promise<string> {
  return engine.defaultModel('asr');
}

/**
 * The speech recognition model a Realtime session's turns go to: the model
 * the session names, or — when it names none, or a name apps hard-code for
 * the default (`whisper-1`, `gpt-4o-transcribe`: what OpenAI's clients
 * send) that no installed model or operator's alias answers to — the
 * default, or its int8 twin where that is installed (`whisper-base-q8`
 * beside `whisper-base`) unless the operator chose the default: the answer
 * waits for each turn's transcript.
 */
export async function realtimeAsrModel(engine: Engine, named?: string): Promise<string> {
  if (named !== undefined && !(await engine.standsForDefault(named, 'asr'))) return named;
  return engine.defaultModel('asr', named, { int8: true });
}

/** The streaming recognition model a connection that names none goes to. */
export function defaultStreamingModel(engine: Engine): Promise<string> {
  return engine.defaultModel('asr-stream');
}

export async function transcribe(engine: Engine, request: TranscribeRequest, signal: AbortSignal): Promise<TranscribeResult> {
  const model = request.model ?? (await defaultAsrModel(engine));
  // Resolve first so an unknown model is reported before the audio is even decoded.
  await engine.resolve(model, ['asr']);
  const audio = await decodeAudio(request.audio, { sampleRate: 16_000, maxDurationSec: MAX_AUDIO_SECONDS });
  signal.throwIfAborted();
  return transcribeSamples(engine, { ...request, model, samples: audio.samples }, signal);
}

/** transcribe() for audio already decoded to 16 kHz mono (a realtime session's turn). */
export async function transcribeSamples(
  engine: Engine,
  request: Omit<TranscribeRequest, 'audio'> & { samples: Float32Array },
  signal: AbortSignal,
): Promise<TranscribeResult> {
  const { samples, ...options } = request;
  const model = options.model ?? (await defaultAsrModel(engine));
  return engine.withModel<Transcriber, TranscribeResult>(
    model,
    ['asr'],
    async (runtime, installed) => {
      if (options.wordTimestamps && !runtime.wordTimestamps) {
        // Word times come from the decoder's cross-attention weights (DTW over the alignment heads): an export without them cannot give any.
        throw new UnsupportedError(
          `Word timestamps need a Whisper export with cross-attention outputs (the "_timestamped" exports, e.g. \`lserve pull whisper-base-timestamped\`); '${installed.id}' has none (segment timestamps work with every model).`,
          { param: 'timestamp_granularities' },
        );
      }
      const result = await runtime.queue.run(async () => {
        const regions = runtime.vad ? speechWindows(await runtime.vad.probabilities(samples, signal)) : undefined;
        return runtime.transcribe(samples, { ...options, regions }, signal);
      }, signal);
      engine.report({ type: 'transcription', model: installed.id, audioSeconds: samples.length / 16_000 });
      return { ...result, model: installed.id };
    },
    { keepAliveMs: options.keepAliveMs },
  );
}

/**
 * Where to transcribe: the speech Silero VAD finds, padded and joined across
 * short pauses (faster-whisper's defaults: 400 ms of padding, 2 s of silence
 * to split), grouped into windows of at most 30 s cut at silences.
 */
function speechWindows(probabilities: Float32Array): Array<{ start: number; end: number }> {
  const segments = speechSegments(probabilities, { speechPadMs: 400, minSilenceMs: 2000, maxSpeechSec: 30 });
  return splitForWindows(segments, 30);
}
