import { z } from 'zod';
import { keepAliveField } from './common.js';

/**
 * POST /v1/embeddings: OpenAI's request and response. `input` takes every
 * form OpenAI accepts — a string, an array of strings, an array of token ids,
 * or an array of token-id arrays — and `truncate` is an extension (llama.cpp's
 * server and Ollama have it) that cuts overlong inputs instead of refusing.
 */

/** OpenAI's own limit on inputs per request. */
export const MAX_EMBEDDING_INPUTS = 2048;

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
  if (typeof value === 'string') return value.length > 0 ? [value] : fail('must not be empty');
  if (!Array.isArray(value)) return fail('must be a string, an array of strings, an array of token ids or an array of token-id arrays');
  if (value.length === 0) return fail('must not be empty');
  if (value.length > MAX_EMBEDDING_INPUTS) return fail(`at most ${MAX_EMBEDDING_INPUTS} inputs per request`);
  if (typeof value[0] === 'number') {
    const bad = value.findIndex((v) => !isTokenId(v));
    return bad < 0 ? [value as number[]] : fail('token ids must be non-negative integers', [bad]);
  }
  const out: EmbeddingInput[] = [];
  for (const [i, item] of value.entries()) {
    if (typeof item === 'string') {
      if (item.length === 0) return fail('must not be empty', [i]);
      out.push(item);
    } else if (Array.isArray(item)) {
      if (item.length === 0) return fail('must not be empty', [i]);
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
  dimensions: z.int().positive().optional(),
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
