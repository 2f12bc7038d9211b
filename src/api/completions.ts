import { z } from 'zod';
import type { CompletionRequest, TokenLogprob } from '../core/tasks/chat.js';
import { logitBias, MAX_OUTPUT_TOKENS, MAX_STOP_SEQUENCES, tokenBias } from './chat.js';
import { keepAliveField } from './common.js';
import { parseKnownFields } from './validate.js';

/*
 * Bounds (DESIGN.md §3), checked before the model is resolved or loaded;
 * each a 400 naming the field.
 */

/** Most prompts in one request (each its own set of choices). */
export const MAX_COMPLETION_PROMPTS = 64;
/** Most choices per prompt (`n`, and `best_of` candidates). */
export const MAX_COMPLETION_CHOICES = 16;
/** Most likeliest alternatives per token (OpenAI's limit). */
export const MAX_LOGPROBS = 20;
/** Longest prompt given as token ids. */
export const MAX_PROMPT_TOKEN_IDS = 262_144;
/** Longest prompt text, in characters. */
export const MAX_PROMPT_CHARS = 1_048_576;

const text = z.string().max(MAX_PROMPT_CHARS, `must be at most ${MAX_PROMPT_CHARS} characters`);
const ids = z.array(z.int().min(0)).min(1).max(MAX_PROMPT_TOKEN_IDS, `must contain at most ${MAX_PROMPT_TOKEN_IDS} tokens`);
const many = <T extends z.ZodType>(item: T) => z.array(item).min(1).max(MAX_COMPLETION_PROMPTS, `must contain at most ${MAX_COMPLETION_PROMPTS} prompts`);

/**
 * POST /v1/completions, OpenAI's legacy text completions: the prompt as it
 * is, no chat template. `prompt` is a string, strings, token ids or lists of
 * them (one set of `n` choices per prompt); `suffix` fills the middle with
 * the model's FIM tokens; `echo` puts the prompt before each choice's text
 * and, with `logprobs`, scores its tokens (the first one's null);
 * `max_tokens: 0` with `echo` only scores. `best_of` candidates are
 * generated and the `n` with the highest mean token log-probability kept.
 */
export const completionSchema = z
  .object({
    model: z.string().min(1),
    prompt: z.union([text, many(text), ids, many(ids)]),
    suffix: z.string().max(MAX_PROMPT_CHARS).nullish(),
    max_tokens: z.int().min(0).max(MAX_OUTPUT_TOKENS, `must be at most ${MAX_OUTPUT_TOKENS}`).nullish(),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().gt(0).max(1).nullish(),
    /** Extension (llama.cpp, vLLM). */
    top_k: z.int().min(0).nullish(),
    min_p: z.number().min(0).max(1).nullish(),
    n: z.int().min(1).max(MAX_COMPLETION_CHOICES, `must be at most ${MAX_COMPLETION_CHOICES}`).nullish(),
    best_of: z.int().min(1).max(MAX_COMPLETION_CHOICES, `must be at most ${MAX_COMPLETION_CHOICES}`).nullish(),
    echo: z.boolean().nullish(),
    logprobs: z.int().min(0).max(MAX_LOGPROBS, `must be at most ${MAX_LOGPROBS}`).nullish(),
    stop: z
      .union([z.string().min(1), z.array(z.string().min(1))])
      .refine((stop) => typeof stop === 'string' || stop.length <= MAX_STOP_SEQUENCES, `must contain at most ${MAX_STOP_SEQUENCES} sequences`)
      .nullish(),
    seed: z.int().nullish(),
    presence_penalty: z.number().min(-2).max(2).nullish(),
    frequency_penalty: z.number().min(-2).max(2).nullish(),
    logit_bias: logitBias.nullish(),
    stream: z.boolean().nullish(),
    stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
    keep_alive: keepAliveField,
    // Sent by common clients; no effect on a local engine.
    user: z.string().nullish(),
  })
  .refine((body) => (body.n ?? 1) <= (body.best_of ?? body.n ?? 1), { message: 'best_of must be at least n', path: ['best_of'] })
  .refine((body) => body.max_tokens !== 0 || body.echo === true, { message: 'max_tokens 0 needs echo: true (the prompt scored, nothing generated)', path: ['max_tokens'] })
  .refine((body) => !(body.stream && (body.best_of ?? 1) > (body.n ?? 1)), { message: 'best_of above n cannot be streamed', path: ['best_of'] })
  .refine((body) => !(body.echo && body.suffix), { message: 'echo cannot be combined with suffix', path: ['echo'] });
export type CompletionBody = z.output<typeof completionSchema>;

export function parseCompletion(body: unknown): CompletionBody {
  return parseKnownFields(completionSchema, body);
}

/** The prompts of a request: texts, or token-id lists to be read as text by the model. */
export function promptsOf(body: CompletionBody): Array<string | number[]> {
  const p = body.prompt;
  if (typeof p === 'string') return [p];
  if (p.length > 0 && typeof p[0] === 'number') return [p as number[]];
  return p as Array<string | number[]>;
}

/** The completion task's request for one prompt (already text). */
export function toCompletionRequest(body: CompletionBody, prompt: string): CompletionRequest {
  const stop = body.stop == null ? undefined : typeof body.stop === 'string' ? [body.stop] : body.stop;
  return {
    model: body.model,
    prompt,
    suffix: body.suffix ?? undefined,
    maxTokens: body.max_tokens ?? 16,
    temperature: body.temperature ?? undefined,
    topP: body.top_p ?? undefined,
    topK: body.top_k ?? undefined,
    minP: body.min_p ?? undefined,
    seed: body.seed ?? undefined,
    stop,
    presencePenalty: body.presence_penalty ?? undefined,
    frequencyPenalty: body.frequency_penalty ?? undefined,
    logitBias: tokenBias(body.logit_bias),
    logprobs: body.logprobs ?? undefined,
    echo: body.echo ?? undefined,
    keepAliveMs: body.keep_alive,
  };
}

// ---- wire shapes ----

/** OpenAI's legacy logprobs object: parallel arrays, offsets into the choice's text. */
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: Array<number | null>;
  top_logprobs: Array<Record<string, number> | null>;
  text_offset: number[];
}

export interface CompletionChoice {
  text: string;
  index: number;
  logprobs: CompletionLogprobs | null;
  finish_reason: 'stop' | 'length' | null;
}

export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface Completion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  system_fingerprint: string;
  choices: CompletionChoice[];
  usage?: CompletionUsage | null;
}

/**
 * Token log-probabilities in OpenAI's legacy shape, the offsets counted from
 * `offset` (where these tokens' text starts in the choice's text). The
 * first prompt token has no top alternatives (null), as OpenAI answers it.
 */
export function legacyLogprobs(tokens: readonly TokenLogprob[], offset: number): CompletionLogprobs {
  const out: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let at = offset;
  for (const token of tokens) {
    out.tokens.push(token.text);
    out.token_logprobs.push(token.logprob);
    out.top_logprobs.push(token.logprob === null ? null : Object.fromEntries(token.top.map((t) => [t.text, t.logprob])));
    out.text_offset.push(at);
    at += token.text.length;
  }
  return out;
}

/** Several logprobs objects one after another (the echoed prompt's, then the answer's). */
export function joinLogprobs(parts: readonly CompletionLogprobs[]): CompletionLogprobs {
  return {
    tokens: parts.flatMap((p) => p.tokens),
    token_logprobs: parts.flatMap((p) => p.token_logprobs),
    top_logprobs: parts.flatMap((p) => p.top_logprobs),
    text_offset: parts.flatMap((p) => p.text_offset),
  };
}
