import { z } from 'zod';
import { keepAliveField } from './common.js';

/**
 * POST /v1/embeddings: OpenAI's request and response. `input` takes every
 * form OpenAI accepts — a string, an array of strings, an array of token ids,
 * or an array of token-id arrays — and `truncate` is an extension (llama.cpp's
 * server and Ollama have it) that cuts overlong inputs instead of refusing.
 */

/*
 * Bounds (DESIGN.md §3), checked here before the model is resolved or
 * loaded; each is a 400 naming the field (`input`, `input.N`, `dimensions`)
 * whose message states the limit. An input within them may still be longer
 * than the model's context: a 400 `context_length_exceeded` once it is
 * tokenized, unless `truncate` cuts it.
 */

/** OpenAI's own limit on inputs per request. */
export const MAX_EMBEDDING_INPUTS = 2048;
/** Longest text input, in characters (far beyond any embedding context; what is tokenized before a `truncate` cut). */
export const MAX_EMBEDDING_INPUT_CHARS = 262_144;
/** Longest token-id input. */
export const MAX_EMBEDDING_INPUT_TOKENS = 131_072;
/** Largest `dimensions` (no model has wider vectors; the model's own width is checked once it is known). */
export const MAX_EMBEDDING_DIMENSIONS = 16_384;

/** One input as the task takes it: text, or token ids given by the client. */
export type EmbeddingInput = string | number[];

const isTokenId = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 0;

/**
 * The four shapes of `input`, normalised to a list. Checked by hand rather
 * than with a zod union so that an error names the offending element
 * (`input.3`) instead of "invalid union".
 */
const inputSchema = z.unknown().transform((value, ctx): EmbeddingInput[] => {
  const fail = (message: string, path: number[] = []) => {
    ctx.addIssue({ code: 'custom', message, path, input: value });
    return z.NEVER;
  };
  if (value === undefined) {
    ctx.addIssue({ code: 'invalid_type', expected: 'string', message: 'is required', input: value });
    return z.NEVER;
  }
  const tooLongText = `must be at most ${MAX_EMBEDDING_INPUT_CHARS} characters`;
  const tooManyTokens = `must be at most ${MAX_EMBEDDING_INPUT_TOKENS} token ids`;
  if (typeof value === 'string') return value.length === 0 ? fail('must not be empty') : value.length > MAX_EMBEDDING_INPUT_CHARS ? fail(tooLongText) : [value];
  if (!Array.isArray(value)) return fail('must be a string, an array of strings, an array of token ids or an array of token-id arrays');
  if (value.length === 0) return fail('must not be empty');
  if (typeof value[0] === 'number') {
    if (value.length > MAX_EMBEDDING_INPUT_TOKENS) return fail(tooManyTokens);
    const bad = value.findIndex((v) => !isTokenId(v));
    return bad < 0 ? [value as number[]] : fail('token ids must be non-negative integers', [bad]);
  }
  if (value.length > MAX_EMBEDDING_INPUTS) return fail(`at most ${MAX_EMBEDDING_INPUTS} inputs per request`);
  const out: EmbeddingInput[] = [];
  for (const [i, item] of value.entries()) {
    if (typeof item === 'string') {
      if (item.length === 0) return fail('must not be empty', [i]);
      if (item.length > MAX_EMBEDDING_INPUT_CHARS) return fail(tooLongText, [i]);
      out.push(item);
    } else if (Array.isArray(item)) {
      if (item.length === 0) return fail('must not be empty', [i]);
      if (item.length > MAX_EMBEDDING_INPUT_TOKENS) return fail(tooManyTokens, [i]);
      if (!item.every(isTokenId)) return fail('token ids must be non-negative integers', [i]);
      out.push(item as number[]);
    } else {
      return fail('must be a string or an array of token ids', [i]);
    }
  }
  return out;
});

export const embeddingsRequestSchema = z.object({
  model: z.string().min(1, 'must not be empty'),
  keep_alive: keepAliveField,
  input: inputSchema,
  encoding_format: z.enum(['float', 'base64']).default('float'),
  dimensions: z.int().positive().max(MAX_EMBEDDING_DIMENSIONS, `must be at most ${MAX_EMBEDDING_DIMENSIONS}`).optional(),
  truncate: z.boolean().default(false),
  /** OpenAI's end-user id: accepted (clients send it) and unused locally. */
  user: z.string().optional(),
});

export type EmbeddingsRequest = z.output<typeof embeddingsRequestSchema>;

export interface EmbeddingObject {
  object: 'embedding';
  index: number;
  /** Floats, or base64 of little-endian float32 when `encoding_format` is base64. */
  embedding: number[] | string;
}

export interface EmbeddingsResponse {
  object: 'list';
  data: EmbeddingObject[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

/** base64 of the vector as little-endian float32, the layout the OpenAI SDKs decode. */
export function encodeBase64(vector: Float32Array): string {
  const bytes = Buffer.alloc(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i]!, i * 4);
  return bytes.toString('base64');
}
