import { z } from 'zod';
import { ollamaModelName } from './models.js';
import { MAX_EMBEDDING_INPUT_CHARS, MAX_EMBEDDING_INPUTS } from '../embeddings.js';
import { ollamaKeepAlive, ollamaOptions } from './options.js';

const text = z.string().max(MAX_EMBEDDING_INPUT_CHARS, `must be at most ${MAX_EMBEDDING_INPUT_CHARS} characters`);

/**
 * POST /api/embed: `input` a string or a list of them, `truncate` (default
 * true: an input longer than the context is cut, as Ollama cuts it),
 * `dimensions` (Matryoshka models), `keep_alive`, `options` (accepted; none
 * changes an embedding). Vectors come back L2-normalised, as Ollama's do.
 */
export const ollamaEmbedSchema = z.object({
  model: ollamaModelName,
  input: z.union([text, z.array(text).max(MAX_EMBEDDING_INPUTS, `must contain at most ${MAX_EMBEDDING_INPUTS} inputs`)]).default([]),
  truncate: z.boolean().default(true),
  dimensions: z.int().positive().max(65_536).optional(),
  options: ollamaOptions,
  keep_alive: ollamaKeepAlive,
});

/** POST /api/embeddings, the older form: one `prompt`, one `embedding`. */
export const ollamaEmbeddingsSchema = z.object({
  model: ollamaModelName,
  prompt: text.default(''),
  options: ollamaOptions,
  keep_alive: ollamaKeepAlive,
});

export interface OllamaEmbedResponse {
  model: string;
  embeddings: number[][];
  total_duration: number;
  load_duration: number;
  prompt_eval_count: number;
}

export interface OllamaEmbeddingsResponse {
  embedding: number[];
}
