import type { ControlledEvaluateInputItem, LlamaContextSequence, LlamaModel, Token } from 'node-llama-cpp';
import type { TokenLogprob } from '../../core/tasks/chat.js';

/**
 * Log-probabilities as OpenAI and llama.cpp report them: the log-softmax of
 * the model's logits at each position, at temperature 1 and before any
 * sampling filter, whatever the request samples with. node-llama-cpp's
 * sampler, asked for probabilities with its default (greedy) settings,
 * hands back the softmax of the untouched logits over the whole
 * vocabulary, sorted; the likeliest alternatives are its first entries.
 */

/** The distribution after each of `tokens`, evaluated at the end of `sequence`. */
export async function distributionsAfter(sequence: LlamaContextSequence, tokens: readonly Token[]): Promise<Array<Map<Token, number>>> {
  const input: ControlledEvaluateInputItem[] = tokens.map((token) => [token, { generateNext: { probabilities: true } }]);
  const results = await sequence.controlledEvaluate(input);
  return tokens.map((_, i) => results[i]?.next?.probabilities ?? new Map<Token, number>());
}

/** A probability as a log-probability; one too small for float32 is OpenAI's floor, -9999. */
function logOf(probability: number | undefined): number {
  return probability !== undefined && probability > 0 ? Math.log(probability) : -9999;
}

/** `token`'s log-probability in `distribution`, with the `top` likeliest tokens there. */
export function tokenLogprob(model: LlamaModel, token: Token, distribution: ReadonlyMap<Token, number> | undefined, top: number): TokenLogprob {
  const alternatives: TokenLogprob['top'] = [];
  if (distribution) {
    for (const [id, probability] of distribution) {
      if (alternatives.length >= top) break;
      alternatives.push({ id, text: model.detokenize([id], true), logprob: logOf(probability) });
    }
  }
  return { id: token, text: model.detokenize([token], true), logprob: distribution ? logOf(distribution.get(token)) : null, top: alternatives };
}

/**
 * Scores a whole prompt on `sequence` (emptied first: a cached prefix keeps
 * no logits): each token's log-probability given the ones before it, the
 * first token's null. The sequence holds the prompt afterwards.
 */
export async function promptLogprobs(model: LlamaModel, sequence: LlamaContextSequence, prompt: readonly Token[], top: number): Promise<TokenLogprob[]> {
  if (sequence.nextTokenIndex > 0) await sequence.eraseContextTokenRanges([{ start: 0, end: sequence.nextTokenIndex }]);
  const after = await distributionsAfter(sequence, prompt);
  return prompt.map((token, i) => tokenLogprob(model, token, i === 0 ? undefined : after[i - 1], top));
}

/**
 * Scores an answer generated after `prompt` on `sequence`: the answer's
 * tokens are evaluated again after the prompt's last one, each position's
 * logits kept (a generation keeps only the sampler's view of them).
 */
export async function answerLogprobs(model: LlamaModel, sequence: LlamaContextSequence, prompt: readonly Token[], answer: readonly Token[], top: number): Promise<TokenLogprob[]> {
  if (answer.length === 0) return [];
  const from = prompt.length - 1;
  if (sequence.nextTokenIndex > from) await sequence.eraseContextTokenRanges([{ start: from, end: sequence.nextTokenIndex }]);
  const after = await distributionsAfter(sequence, [prompt[from]!, ...answer.slice(0, -1)]);
  return answer.map((token, i) => tokenLogprob(model, token, after[i], top));
}
