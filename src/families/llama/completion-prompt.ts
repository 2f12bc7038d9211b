import type { LlamaModel, Token } from 'node-llama-cpp';
import { InvalidRequestError, UnsupportedError } from '../../core/errors.js';
import { vocabularySize } from '../../runtimes/llama/runtime.js';
import type { CompletionRequest } from '../../core/tasks/chat.js';

/**
 * The tokens a completion request puts before its answer, as node-llama-cpp's
 * LlamaCompletion will evaluate them: the prompt with special tokens read as
 * such, after the BOS token where the model wants one; or, to fill a middle,
 * the model's FIM layout (llama.cpp's: BOS, FIM prefix token, the prefix,
 * FIM suffix token, the suffix, FIM middle token).
 */
export interface CompletionPrompt {
  /** What is evaluated, in order (for choosing a sequence and counting). */
  tokens: Token[];
  /** The text before the gap (or the whole prompt), tokenized. */
  prefix: Token[];
  /** The text after the gap; undefined for a plain completion. */
  suffix?: Token[];
}

export function completionPrompt(model: LlamaModel, request: CompletionRequest, label: string): CompletionPrompt {
  const bos = model.tokens.shouldPrependBosToken && model.tokens.bos !== null ? [model.tokens.bos] : [];
  const prefix = request.promptTokens ? checkedTokens(model, request.promptTokens, 'prompt') : model.tokenize(request.prompt, true);
  if (request.suffix === undefined) return { tokens: [...bos, ...prefix], prefix };
  const { prefix: pre, suffix: suf, middle: mid } = model.tokens.infill;
  if (pre === null || suf === null || mid === null) {
    throw new UnsupportedError(
      `Model '${label}' declares no fill-in-the-middle tokens (its GGUF has no FIM prefix, suffix and middle token ids): 'suffix' needs a code model that has them, such as Qwen2.5-Coder or CodeLlama.`,
      { param: 'suffix', code: 'fim_unsupported' },
    );
  }
  const suffix = model.tokenize(request.suffix, true);
  return { tokens: [...bos, pre, ...prefix, suf, ...suffix, mid], prefix, suffix };
}

/** Token ids a client gave: each must be one of the model's, else a 400 naming `param`. */
export function checkedTokens(model: LlamaModel, ids: readonly number[], param: string): Token[] {
  const vocab = vocabularySize(model) || Infinity;
  const bad = ids.find((id) => !Number.isInteger(id) || id < 0 || id >= vocab);
  if (bad !== undefined) throw new InvalidRequestError(`${bad} is not a token id of this model (its vocabulary has ${vocab} tokens).`, { param });
  return ids as Token[];
}
