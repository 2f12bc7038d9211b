import type { LoadedModel } from '../loader.js';
import { InvalidRequestError, UnsupportedError } from '../errors.js';
import type { InstalledModel } from '../store.js';

/**
 * The embedding task: token accounting, context-length checks (or
 * truncation), batched evaluation, optional Matryoshka shortening and L2
 * normalisation. It knows nothing about HTTP; the route formats the result.
 */

export interface EmbeddingModel extends LoadedModel {
  /** Length of the vectors the model produces. */
  readonly dimensions: number;
  /** Longest input the model evaluates, in tokens, special tokens included. */
  readonly maxInputTokens: number;
  /** Token ids must be below this. */
  readonly vocabularySize: number;
  /** Texts → token ids, without the special tokens the model adds (batched: one call per request, wherever the model runs). */
  tokenize(texts: readonly string[]): Promise<number[][]>;
  /** Tokens the model evaluates for each input's ids: with its BOS/CLS and EOS/SEP. */
  evaluatedLengths(inputs: readonly (readonly number[])[]): Promise<number[]>;
  /** One vector per input; all inputs are evaluated together, spread over the model's contexts. */
  embed(inputs: readonly number[][], signal: AbortSignal): Promise<Float32Array[]>;
}

export interface EmbedRequest {
  /** Texts, or token ids given by the client. */
  inputs: ReadonlyArray<string | number[]>;
  /** Shorten vectors to this many dimensions (Matryoshka models only). */
  dimensions?: number;
  /** Cut overlong inputs to the context instead of refusing them. */
  truncate: boolean;
}

export interface EmbedResult {
  vectors: Float32Array[];
  /** Tokens evaluated, special tokens included (what usage reports). */
  promptTokens: number;
}

/**
 * Whether the model was trained to keep its meaning when its vectors are cut
 * short (Matryoshka representation learning): the catalog says so with
 * `defaults.matryoshka` (Qwen3-Embedding, nomic-embed-text-v1.5).
 */
export function supportsShortening(installed: InstalledModel): boolean {
  return installed.entry.defaults.matryoshka === true;
}

function checkDimensions(model: EmbeddingModel, installed: InstalledModel, dimensions: number | undefined): number {
  if (dimensions === undefined || dimensions === model.dimensions) return model.dimensions;
  if (dimensions > model.dimensions) {
    throw new InvalidRequestError(`'dimensions' is ${dimensions}, but model '${installed.id}' produces ${model.dimensions}-dimensional embeddings.`, {
      param: 'dimensions',
      code: 'invalid_value',
    });
  }
  if (!supportsShortening(installed)) {
    throw new UnsupportedError(
      `Model '${installed.id}' does not support shortened embeddings; omit 'dimensions' or set it to ${model.dimensions}.`,
      { param: 'dimensions' },
    );
  }
  return dimensions;
}

/** Token ids of every input: texts tokenized (in one call), ids given by the client checked against the vocabulary. */
async function tokensOf(model: EmbeddingModel, installed: InstalledModel, inputs: EmbedRequest['inputs']): Promise<number[][]> {
  const texts = inputs.filter((input): input is string => typeof input === 'string');
  const tokenized = texts.length ? await model.tokenize(texts) : [];
  let next = 0;
  return inputs.map((input, index) => {
    if (typeof input === 'string') return tokenized[next++]!;
    const bad = input.find((id) => id >= model.vocabularySize);
    if (bad !== undefined) {
      throw new InvalidRequestError(`Input ${index} has token id ${bad}; model '${installed.id}' has ${model.vocabularySize} tokens.`, { param: `input.${index}`, code: 'invalid_value' });
    }
    return input;
  });
}

/** One input's tokens checked against the context: `length` is what the model evaluates for them. */
function fitInput(model: EmbeddingModel, installed: InstalledModel, tokens: number[], length: number, index: number, truncate: boolean): number[] {
  if (length <= model.maxInputTokens) return tokens;
  if (!truncate) {
    throw new InvalidRequestError(
      `Input ${index} is ${length} tokens, more than the ${model.maxInputTokens} that model '${installed.id}' accepts. Shorten it or pass "truncate": true.`,
      { param: `input.${index}`, code: 'context_length_exceeded' },
    );
  }
  // The special tokens the model adds stay; the text is cut at the end.
  return tokens.slice(0, Math.max(0, tokens.length - (length - model.maxInputTokens)));
}

/** Scales to unit length, as OpenAI's and llama.cpp's servers return embeddings. */
export function normalize(vector: Float32Array): Float32Array {
  let sum = 0;
  for (const v of vector) sum += v * v;
  const norm = Math.sqrt(sum);
  if (norm > 0) for (let i = 0; i < vector.length; i++) vector[i]! /= norm;
  return vector;
}

export async function embed(model: EmbeddingModel, installed: InstalledModel, request: EmbedRequest, signal: AbortSignal): Promise<EmbedResult> {
  const dimensions = checkDimensions(model, installed, request.dimensions);
  const tokens = await tokensOf(model, installed, request.inputs);
  const lengths = await model.evaluatedLengths(tokens);
  const inputs = tokens.map((t, i) => fitInput(model, installed, t, lengths[i]!, i, request.truncate));
  const cut = inputs.some((t, i) => t !== tokens[i]);
  const promptTokens = (cut ? await model.evaluatedLengths(inputs) : lengths).reduce((sum, n) => sum + n, 0);
  const raw = await model.embed(inputs, signal);
  const vectors = raw.map((v) => normalize(dimensions < v.length ? v.slice(0, dimensions) : v));
  return { vectors, promptTokens };
}
