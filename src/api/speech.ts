import { z } from 'zod';
import { SPEECH_FORMATS } from '../audio/encode/types.js';
import type { SpeakRequest } from '../core/tasks/speak.js';
import { keepAliveField } from './common.js';

/**
 * POST /v1/audio/speech: the specification's fields (`model, input, voice,
 * speaker, voice_description, ref_audio, ref_text, language, speed, stream,
 * frames`) and OpenAI's (`response_format`, `instructions` as an alias of
 * `voice_description`). `seed` makes sampling reproducible. Length limits of
 * `input` are the task's (a 413 that says how long it was), so the schema
 * only bounds what no request needs.
 */

export { SPEECH_FORMATS, type SpeechFormat } from '../audio/encode/types.js';

/*
 * Bounds (DESIGN.md §3), checked before the model is resolved or loaded;
 * each answer's message states the limit. `input` is held to
 * MAX_INPUT_CHARS (4096, OpenAI's limit) by the task, as a 413, before the
 * model is resolved; reference audio to 60 s once decoded.
 */

/** Most codec frames (`frames`, 12.5 a second: 100 000 is over 2 hours). */
export const MAX_SPEECH_FRAMES = 100_000;
/** `speed` range: 0.25 makes the audio (and its memory) 4 times longer. */
export const MIN_SPEECH_SPEED = 0.25;
export const MAX_SPEECH_SPEED = 4;
/** Longest `voice_description` / `instructions` and `ref_text`, in characters. */
export const MAX_VOICE_TEXT_CHARS = 2000;

const chars = (max: number) => z.string().max(max, `must be at most ${max} characters`);

export const speechRequestSchema = z.object({
  model: z.string().min(1).optional(),
  input: z.string(),
  voice: chars(200).optional(),
  speaker: chars(200).optional(),
  voice_description: chars(MAX_VOICE_TEXT_CHARS).optional(),
  instructions: chars(MAX_VOICE_TEXT_CHARS).optional(),
  ref_audio: z.string().min(1).optional(),
  ref_text: chars(MAX_VOICE_TEXT_CHARS).optional(),
  language: chars(40).optional(),
  speed: z.number().min(MIN_SPEECH_SPEED, `must be from ${MIN_SPEECH_SPEED} to ${MAX_SPEECH_SPEED}`).max(MAX_SPEECH_SPEED, `must be from ${MIN_SPEECH_SPEED} to ${MAX_SPEECH_SPEED}`).optional(),
  stream: z.boolean().optional(),
  /** OpenAI's `stream_format` ("audio" or "sse"): only raw audio is streamed here. */
  stream_format: z.literal('audio').optional(),
  frames: z.number().int().min(1).max(MAX_SPEECH_FRAMES, `must be at most ${MAX_SPEECH_FRAMES}`).optional(),
  response_format: z.enum(SPEECH_FORMATS).optional(),
  seed: z.number().int().min(0).max(2 ** 32 - 1).optional(),
  keep_alive: keepAliveField,
});
export type SpeechRequestBody = z.infer<typeof speechRequestSchema>;

/** The specification's one-shot response. */
export interface SpeechResponse {
  audio_url: string;
  sample_rate: number;
  /** Seconds. */
  duration: number;
}

/** The specification's stream job response. */
export interface SpeechJobResponse {
  stream_url: string;
}

/** The speech task's request for a checked body, with `ref_audio` already read into bytes (a path, URL or data URI is the route's to fetch). */
export function toSpeakRequest(body: SpeechRequestBody, refAudio: Uint8Array | undefined): SpeakRequest {
  return {
    model: body.model,
    input: body.input,
    voice: body.voice,
    speaker: body.speaker,
    voiceDescription: body.voice_description ?? body.instructions,
    refAudio,
    refText: body.ref_text,
    language: body.language,
    speed: body.speed,
    frames: body.frames,
    seed: body.seed,
    keepAliveMs: body.keep_alive,
  };
}
