import { z } from 'zod';
import { keepAliveField } from './common.js';

/**
 * POST /v1/rerank (the Jina/Cohere-style shape llama.cpp's server also
 * speaks; response fixed in DESIGN.md §3). Documents are strings or `{text}`
 * objects; `truncate` (extension) cuts documents that do not fit the
 * model's context next to the query instead of refusing them.
 */

/*
 * Bounds (DESIGN.md §3), checked here before the model is resolved or
 * loaded; each is a 400 naming the field whose message states the limit.
 * The query is evaluated once with every document, so its length multiplies
 * by the document count. Within them, a pair longer than the model's context
 * is a 400 `context_length_exceeded` once tokenized, unless `truncate`.
 */

/** Most documents per request. */
export const MAX_RERANK_DOCUMENTS = 1000;
/** Longest query, in characters. */
export const MAX_RERANK_QUERY_CHARS = 16_384;
/** Longest document, in characters (what is tokenized before a `truncate` cut). */
export const MAX_RERANK_DOCUMENT_CHARS = 262_144;

const text = (max: number) => z.string().min(1, 'must not be empty').max(max, `must be at most ${max} characters`);
const documentField = text(MAX_RERANK_DOCUMENT_CHARS);

export const rerankRequestSchema = z.object({
  model: z.string().min(1, 'must not be empty'),
  keep_alive: keepAliveField,
  query: text(MAX_RERANK_QUERY_CHARS),
  documents: z
    .array(z.union([documentField, z.object({ text: documentField })]))
    .min(1, 'must not be empty')
    .max(MAX_RERANK_DOCUMENTS, `must contain at most ${MAX_RERANK_DOCUMENTS} documents`),
  /** As Cohere and Jina: a top_n above the number of documents returns them all (clamped, not refused). */
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
