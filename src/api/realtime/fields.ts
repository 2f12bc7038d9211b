import { z } from 'zod';
import type { ChatTool, ChatToolChoice } from '../../core/tasks/chat.js';
import { MAX_TOOLS, outputTokens, toolName } from '../chat.js';
import { stringOr } from '../common.js';
import type { AudioFormat, InputTranscription, TurnDetection } from './types.js';

/*
 * Field schemas that session.update and response.create share, in both
 * dialects, each parsed straight into lserve's own shape (types.ts). Every
 * size is bounded here, before the session does any work with it
 * (DESIGN.md §3).
 */

/** Most base64 characters of audio in one event: OpenAI's limit for input_audio_buffer.append. */
export const MAX_AUDIO_BASE64 = 15 * 1024 * 1024;
/** Most characters of one text field (instructions, a message's text, a tool's output). */
export const MAX_TEXT_CHARS = 100_000;
/** Most characters of a short name (a model, a voice, a language). */
export const MAX_NAME_CHARS = 200;

export const text = z.string().max(MAX_TEXT_CHARS, `must be at most ${MAX_TEXT_CHARS} characters`);
export const name = z.string().min(1).max(MAX_NAME_CHARS, `must be at most ${MAX_NAME_CHARS} characters`);
/** An item id a client may pick: the session renders it back verbatim, so it stays short and plain. */
export const itemId = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, _ or -');
/** Base64 audio, checked for its size first so that an oversized value costs no more than its length. */
export const base64Audio = z
  .string()
  .max(MAX_AUDIO_BASE64, `must be at most ${MAX_AUDIO_BASE64} base64 characters (15 MiB)`)
  .base64('must be base64-encoded audio');

// ---- audio formats ----

const PCM_RATES = [24000, 16000] as const;

/** GA: `{type: 'audio/pcm', rate}` (24 kHz as OpenAI; 16 kHz is lserve's extension), `audio/pcmu`, `audio/pcma`. */
export const gaAudioFormat = z
  .discriminatedUnion(
    'type',
    [
      z.strictObject({ type: z.literal('audio/pcm'), rate: z.literal(PCM_RATES, 'must be 24000 (or 16000, an lserve extension)').optional() }),
      z.strictObject({ type: z.literal('audio/pcmu') }),
      z.strictObject({ type: z.literal('audio/pcma') }),
    ],
    { error: "must be 'audio/pcm', 'audio/pcmu' or 'audio/pcma'" },
  )
  .transform((format): AudioFormat => (format.type === 'audio/pcm' ? { type: 'audio/pcm', rate: format.rate ?? 24000 } : format));

/** Beta: 'pcm16' (24 kHz), 'g711_ulaw', 'g711_alaw'. */
export const betaAudioFormat = z
  .enum(['pcm16', 'g711_ulaw', 'g711_alaw'], { error: "must be 'pcm16', 'g711_ulaw' or 'g711_alaw'" })
  .transform((format): AudioFormat => (format === 'pcm16' ? { type: 'audio/pcm', rate: 24000 } : { type: format === 'g711_ulaw' ? 'audio/pcmu' : 'audio/pcma' }));

// ---- output ----

/** ['audio'] (spoken, with its transcript) or ['text']; the beta's ['text', 'audio'] means ['audio']. */
export const modalities = z
  .array(z.enum(['text', 'audio'], { error: "must be 'text' or 'audio'" }))
  .min(1, 'must name at least one modality')
  .max(2)
  .transform((list): Array<'text' | 'audio'> => (list.includes('audio') ? ['audio'] : ['text']));

/** Any voice name (lserve's voices, or OpenAI's names that the session maps), or `{id}` as GA allows. */
export const voice = stringOr(z.strictObject({ id: name }).transform((v) => v.id), name);
export const speed = z.number().min(0.25).max(1.5);
export const temperature = z.number().min(0).max(2);
/** A token limit, or 'inf' for none. */
export const maxOutputTokens = stringOr(outputTokens, z.literal('inf', "must be a positive integer or 'inf'"));

// ---- tools ----

const tool = z
  .strictObject({
    // MCP tools (`type: 'mcp'`) would have the server call remote tools: not something a local server does for its clients.
    type: z.literal('function', "only 'function' tools are supported").optional(),
    name: toolName,
    description: text.optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  })
  .transform(({ name, description, parameters }): ChatTool => ({ name, ...(description !== undefined ? { description } : {}), ...(parameters ? { parameters } : {}) }));
export const tools = z.array(tool).max(MAX_TOOLS, `must contain at most ${MAX_TOOLS} tools`);

export const toolChoice = stringOr(
  z.strictObject({ type: z.literal('function', "must be 'function'"), name: toolName }).transform((choice): ChatToolChoice => ({ name: choice.name })),
  z.enum(['auto', 'none', 'required'], { error: "must be 'auto', 'none', 'required' or {type: 'function', name}" }),
);

// ---- input ----

export const transcription = z
  .strictObject({
    model: name.optional(),
    language: z.string().max(32).optional(),
    prompt: text.optional(),
    // GA's latency hint for OpenAI's streaming models; lserve's transcribers have no such setting.
    delay: z.enum(['minimal', 'low', 'medium', 'high', 'xhigh']).optional(),
  })
  .transform(({ model, language, prompt }): InputTranscription => ({
    ...(model !== undefined ? { model } : {}),
    ...(language ? { language } : {}),
    ...(prompt ? { prompt } : {}),
  }));

/** The turn-detection fields a client sets; the rest keep their current or default value (session-config.ts). */
export type TurnDetectionPatch = Partial<Omit<TurnDetection, 'type'>> & { type?: TurnDetection['type'] };

const vadFields = {
  threshold: z.number().min(0).max(1).optional(),
  // Bounded: the padding is audio the session keeps, the silence how long a turn may wait.
  prefix_padding_ms: z.int().min(0).max(10_000).optional(),
  silence_duration_ms: z.int().min(0).max(60_000).optional(),
  idle_timeout_ms: z.int().min(5_000).max(30_000).nullable().optional(),
};
const commonTurnFields = {
  create_response: z.boolean().optional(),
  interrupt_response: z.boolean().optional(),
};
const eagerness = z.enum(['low', 'medium', 'high', 'auto']).optional();

function turnPatch(d: {
  type?: TurnDetection['type'];
  threshold?: number;
  prefix_padding_ms?: number;
  silence_duration_ms?: number;
  idle_timeout_ms?: number | null;
  create_response?: boolean;
  interrupt_response?: boolean;
  eagerness?: TurnDetection['eagerness'];
}): TurnDetectionPatch {
  const patch: TurnDetectionPatch = {
    type: d.type,
    threshold: d.threshold,
    prefixPaddingMs: d.prefix_padding_ms,
    silenceDurationMs: d.silence_duration_ms,
    idleTimeoutMs: d.idle_timeout_ms,
    createResponse: d.create_response,
    interruptResponse: d.interrupt_response,
    eagerness: d.eagerness,
  };
  return withoutUndefined(patch);
}

/** Only the keys that were given, so that a merge keeps everything else. */
export function withoutUndefined<T extends object>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

/** GA: server_vad with its numbers, or semantic_vad with its eagerness; null turns it off. */
export const gaTurnDetection = z
  .discriminatedUnion(
    'type',
    [
      z.strictObject({ type: z.literal('server_vad'), ...vadFields, ...commonTurnFields }),
      z.strictObject({ type: z.literal('semantic_vad'), eagerness, ...commonTurnFields }),
    ],
    { error: "must be 'server_vad' or 'semantic_vad'" },
  )
  .transform(turnPatch)
  .nullable();

/** Beta: one flat object, `type` optional. */
export const betaTurnDetection = z
  .strictObject({ type: z.enum(['server_vad', 'semantic_vad']).optional(), ...vadFields, ...commonTurnFields, eagerness })
  .transform(turnPatch)
  .nullable();

/** Accepted, no effect: lserve has no noise suppression (its VAD takes the audio as it comes). */
export const noiseReduction = z.strictObject({ type: z.enum(['near_field', 'far_field']).optional() }).nullable();

/** OpenAI's metadata: at most 16 string pairs. */
export const metadata = z
  .record(z.string().max(64), z.string().max(512))
  .refine((value) => Object.keys(value).length <= 16, 'must have at most 16 entries')
  .nullable();

/** `prompt`: OpenAI's hosted prompt templates have no local equivalent, so only null is accepted; a template is an error naming it, not silently dropped. */
export const noPrompt = z.unknown().refine((value) => value == null, {
  message: 'stored prompts are not supported: send the text as instructions',
  params: { code: 'unsupported_parameter' },
});
