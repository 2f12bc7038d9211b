import type { LoadedModel } from '../loader.js';
import { InvalidRequestError } from '../errors.js';
import type { InstalledModel } from '../store.js';

/**
 * The rerank task: scores every document against the query with a
 * cross-encoder, sorts by score and cuts to top_n. Knows nothing about HTTP.
 */

export interface RankingModel extends LoadedModel {
  /** Longest query + document pair the model evaluates, in tokens, special tokens included. */
  readonly maxInputTokens: number;
  /** Texts → token ids as the model reads a query or document (batched: one call per request, wherever the model runs). */
  tokenize(texts: readonly string[]): Promise<number[][]>;
  /** Tokens evaluated for the query with each document: both, and the model's separators/template. */
  pairLengths(query: readonly number[], documents: readonly (readonly number[])[]): Promise<number[]>;
  /** Relevance (0–1) of each document; all documents are evaluated together, spread over the model's contexts. */
  score(query: readonly number[], documents: readonly number[][], signal: AbortSignal): Promise<number[]>;
}

export interface RerankTaskRequest {
  query: string;
  documents: readonly string[];
  /** Results to keep; more than there are documents keeps them all (Cohere's and Jina's clamp, not a 400). */
  topN?: number;
  /** Cut documents that do not fit next to the query instead of refusing them. */
  truncate: boolean;
}

export interface RankedDocument {
  index: number;
  score: number;
}

export interface RerankResult {
  /** Best first, at most topN. */
  results: RankedDocument[];
  promptTokens: number;
}

function fitDocument(model: RankingModel, installed: InstalledModel, document: number[], length: number, index: number, truncate: boolean): number[] {
  if (length <= model.maxInputTokens) return document;
  if (!truncate) {
    throw new InvalidRequestError(
      `Document ${index} with the query is ${length} tokens, more than the ${model.maxInputTokens} that model '${installed.id}' accepts. Shorten it or pass "truncate": true.`,
      { param: `documents.${index}`, code: 'context_length_exceeded' },
    );
  }
  return document.slice(0, Math.max(0, document.length - (length - model.maxInputTokens)));
}

export async function rerank(model: RankingModel, installed: InstalledModel, request: RerankTaskRequest, signal: AbortSignal): Promise<RerankResult> {
  const [query, ...tokenized] = await model.tokenize([request.query, ...request.documents]);
  // The query must leave room for at least one document token.
  const [queryLength, ...lengths] = await model.pairLengths(query!, [[query![0] ?? 0], ...tokenized]);
  if (queryLength! > model.maxInputTokens) {
    throw new InvalidRequestError(`The query is ${queryLength! - 1} tokens, too long for model '${installed.id}' (${model.maxInputTokens} tokens with a document).`, {
      param: 'query',
      code: 'context_length_exceeded',
    });
  }
  const documents = tokenized.map((document, i) => fitDocument(model, installed, document, lengths[i]!, i, request.truncate));
  const cut = documents.some((d, i) => d !== tokenized[i]);
  const promptTokens = (cut ? await model.pairLengths(query!, documents) : lengths).reduce((sum, n) => sum + n, 0);
  const scores = await model.score(query!, documents, signal);
  const results = scores
    .map((score, index) => ({ index, score }))
    .sort((a, b) => b.score - a.score || a.index - b.index)
    .slice(0, request.topN ?? scores.length);
  return { results, promptTokens };
}
