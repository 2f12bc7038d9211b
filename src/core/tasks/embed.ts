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
  /** Text → token ids, without the special tokens the model adds. */
  tokenize(text: string): number[];
  /** Tokens the model evaluates for these ids: with its BOS/CLS and EOS/SEP. */
  evaluatedLength(tokens: readonly number[]): number;
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

/** Token ids of one input, checked against the vocabulary and the context. */
function prepareInput(model: EmbeddingModel, installed: InstalledModel, input: string | number[], index: number, truncate: boolean): number[] {
  const param = `input.${index}`;
  let tokens: number[];
  if (typeof input === 'string') {
    tokens = model.tokenize(input);
  } else {
    const bad = input.find((id) => id >= model.vocabularySize);
    if (bad !== undefined) {
      throw new InvalidRequestError(`Input ${index} has token id ${bad}; model '${installed.id}' has ${model.vocabularySize} tokens.`, { param, code: 'invalid_value' });
    }
    tokens = input;
  }
  const length = model.evaluatedLength(tokens);
  if (length <= model.maxInputTokens) return tokens;
  if (!truncate) {
    throw new InvalidRequestError(
      `Input ${index} is ${length} tokens, more than the ${model.maxInputTokens} that model '${installed.id}' accepts. Shorten it or pass "truncate": true.`,
      { param, code: 'context_length_exceeded' },
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
  const inputs = request.inputs.map((input, i) => prepareInput(model, installed, input, i, request.truncate));
  const promptTokens = inputs.reduce((sum, tokens) => sum + model.evaluatedLength(tokens), 0);
  const raw = await model.embed(inputs, signal);
  const vectors = raw.map((v) => normalize(dimensions < v.length ? v.slice(0, dimensions) : v));
  return { vectors, promptTokens };
}
