import { z } from 'zod';
import { keepAliveField } from './common.js';

/**
 * POST /v1/rerank (the Jina/Cohere-style shape llama.cpp's server also
 * speaks; response fixed in DESIGN.md §3). Documents are strings or `{text}`
 * objects; `truncate` (extension) cuts documents that do not fit the
 * model's context next to the query instead of refusing them.
 */

export const MAX_RERANK_DOCUMENTS = 1000;

const text = z.string().min(1, 'must not be empty');

export const rerankRequestSchema = z.object({
  model: z.string().min(1, 'must not be empty'),
  keep_alive: keepAliveField,
  query: text,
  documents: z.array(z.union([text, z.object({ text })])).min(1, 'must not be empty').max(MAX_RERANK_DOCUMENTS),
  top_n: z.int().positive().optional(),
  return_documents: z.boolean().default(false),
  truncate: z.boolean().default(false),
});

export type RerankRequest = z.output<typeof rerankRequestSchema>;

export interface RerankResult {
  index: number;
  relevance_score: number;
  document?: { text: string };
}

export interface RerankResponse {
  object: 'list';
  model: string;
  results: RerankResult[];
  usage: { prompt_tokens: number; total_tokens: number };
}

export function documentText(document: RerankRequest['documents'][number]): string {
  return typeof document === 'string' ? document : document.text;
}
