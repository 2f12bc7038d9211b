import { z } from 'zod';
import { SPEECH_FORMATS } from '../audio/encode/types.js';
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

export const speechRequestSchema = z.object({
  model: z.string().min(1).optional(),
  input: z.string(),
  voice: z.string().max(200).optional(),
  speaker: z.string().max(200).optional(),
  voice_description: z.string().max(2000).optional(),
  instructions: z.string().max(2000).optional(),
  ref_audio: z.string().min(1).optional(),
  ref_text: z.string().max(2000).optional(),
  language: z.string().max(40).optional(),
  speed: z.number().min(0.25).max(4).optional(),
  stream: z.boolean().optional(),
  /** OpenAI's `stream_format` ("audio" or "sse"): only raw audio is streamed here. */
  stream_format: z.literal('audio').optional(),
  frames: z.number().int().min(1).max(100_000).optional(),
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
