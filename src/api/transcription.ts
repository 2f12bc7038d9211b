import { z } from 'zod';
import { RESPONSE_FORMATS } from '../core/tasks/transcribe/formats.js';
import type { TranscribeRequest } from '../core/tasks/transcribe.js';
import { keepAliveField } from './common.js';

/*
 * Bounds (DESIGN.md §3): checked before the model is resolved or loaded,
 * each a 400 whose message states the limit. Audio is held to 1 hour once
 * decoded (MAX_AUDIO_SECONDS, a 413) and uploads to --max-upload.
 */

/** Longest `prompt`, in characters (Whisper reads its last 223 tokens). */
export const MAX_TRANSCRIPTION_PROMPT_CHARS = 10_000;

/**
 * POST /v1/audio/transcriptions, both forms of the specification: multipart
 * (`file`, `model`, `language`, … as OpenAI's SDKs send it) and JSON
 * (`audio` as a local path, an http(s) URL or a `data:audio/…;base64,` URI,
 * under the remote-input policy). `language` `auto` (or absent) detects the
 * language. Multipart fields arrive as text; the route turns the numeric and
 * list fields into numbers and arrays before this schema sees them.
 */
export const transcriptionRequestSchema = z.object({
  model: z.string().min(1).optional(),
  audio: z.string().min(1).optional(),
  language: z.string().min(1).max(16).optional(),
  prompt: z.string().max(MAX_TRANSCRIPTION_PROMPT_CHARS, `must be at most ${MAX_TRANSCRIPTION_PROMPT_CHARS} characters`).optional(),
  response_format: z.enum(RESPONSE_FORMATS).optional(),
  temperature: z.number().min(0).max(1).optional(),
  /**
   * As OpenAI: `word` adds a top-level `words` array ({word, start, end}) to
   * verbose_json (the other formats have no place for it), and leaves the
   * segments out unless `segment` is asked for too. Only Whisper exports with
   * cross-attention outputs can time words; others answer 400.
   */
  timestamp_granularities: z.array(z.enum(['segment', 'word'])).max(2).optional(),
  /** OpenAI streams transcripts as server-sent events for its newest models; here the WebSocket endpoint streams. */
  stream: z.literal(false).optional(),
  keep_alive: keepAliveField,
});
export type TranscriptionRequestBody = z.infer<typeof transcriptionRequestSchema>;

/** The specification's transcription response (response_format json). */
export interface TranscriptionResponse {
  text: string;
  language: string;
  duration: number;
}

/** Multipart fields are text: numbers and lists become numbers and arrays (anything else is left for the schema to refuse). */
export function transcriptionFormFields(body: unknown): unknown {
  if (typeof body !== 'object' || body === null) return body;
  const fields: Record<string, unknown> = { ...(body as Record<string, unknown>) };
  if (typeof fields.temperature === 'string' && fields.temperature.trim() !== '' && Number.isFinite(Number(fields.temperature))) fields.temperature = Number(fields.temperature);
  if (typeof fields.stream === 'string') fields.stream = fields.stream === 'true' ? true : fields.stream === 'false' ? false : fields.stream;
  // OpenAI's SDKs send `timestamp_granularities[]` once per value; multer gathers them into an array.
  const granularities = fields.timestamp_granularities ?? fields['timestamp_granularities[]'];
  delete fields['timestamp_granularities[]'];
  if (granularities !== undefined) fields.timestamp_granularities = Array.isArray(granularities) ? granularities : [granularities];
  return fields;
}

/** The transcription task's request for a checked body, with the audio already read (`param`: the field it came from, for errors). */
export function toTranscribeRequest(body: TranscriptionRequestBody, audio: Uint8Array, param: string): TranscribeRequest {
  return {
    model: body.model,
    audio,
    param,
    language: body.language,
    prompt: body.prompt,
    temperature: body.temperature,
    // Asked of a model that cannot time words this is a 400 in any format; only verbose_json shows them.
    wordTimestamps: (body.timestamp_granularities ?? []).includes('word'),
    keepAliveMs: body.keep_alive,
  };
}
