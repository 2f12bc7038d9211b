import type { ControlledEvaluateInputItem, LlamaContextSequence, LlamaModel, Token } from 'node-llama-cpp';
import type { TokenLogprob } from '../../core/tasks/chat.js';
import { evaluateWithLogprobs, MAX_NATIVE_TOP, nativeLogprobs, type PositionLogprobs } from '../../runtimes/llama/native-logprobs.js';
import type { ScoredPrefixes } from './scored-prefixes.js';

/**
 * Log-probabilities as OpenAI and llama.cpp report them: the log-softmax of
 * the model's logits at each position, at temperature 1 and before any
 * sampling filter, whatever the request samples with. Read natively where
 * the loaded binary is lserve's addon (runtimes/llama/native-logprobs.ts);
 * elsewhere from node-llama-cpp's sampler, which, asked for probabilities
 * with its default (greedy) settings, hands back the softmax of the
 * untouched logits over the whole vocabulary, sorted.
 */

/**
 * Evaluates `tokens` at the end of `sequence`; position i gives the
 * log-probability of `targets[i]` and the `top` likeliest tokens, for the
 * positions from `from` on (the ones before are only evaluated).
 */
async function evaluateScored(model: LlamaModel, sequence: LlamaContextSequence, tokens: readonly Token[], targets: readonly Token[], top: number, from = 0): Promise<PositionLogprobs[]> {
  const read = nativeLogprobs(model);
  const wanted = targets.map((t, i) => (i < from ? -1 : t));
  if (read) return evaluateWithLogprobs(read, sequence, tokens, wanted, top, from);
  const input: ControlledEvaluateInputItem[] = tokens.map((token, i) => (i < from ? token : [token, { generateNext: { probabilities: true } }]));
  const results = await sequence.controlledEvaluate(input);
  return tokens.map((_, i) => {
    const distribution = results[i]?.next?.probabilities;
    if (!distribution) return { logprob: null, top: [] };
    const alternatives: PositionLogprobs['top'] = [];
    for (const [id, probability] of distribution) {
      if (alternatives.length >= top) break;
      alternatives.push({ id, logprob: logOf(probability) });
    }
    return { logprob: logOf(distribution.get(wanted[i] as Token)), top: alternatives };
  });
}

/** A probability as a log-probability; one too small for float32 is OpenAI's floor, -9999. */
function logOf(probability: number | undefined): number {
  return probability !== undefined && probability > 0 ? Math.log(probability) : -9999;
}

/** `token` with its log-probability at `position` and the `top` likeliest tokens there, as text. */
function tokenLogprob(model: LlamaModel, token: Token, position: PositionLogprobs | undefined, top: number): TokenLogprob {
  const alternatives = (position?.top ?? []).slice(0, top).map(({ id, logprob }) => ({ id, text: model.detokenize([id], true), logprob }));
  return { id: token, text: model.detokenize([token], true), logprob: position ? (position.logprob ?? -9999) : null, top: alternatives };
}

/**
 * Scores a whole prompt: each token's log-probability given the ones before
 * it, the first token's null. Positions a recently scored prompt shares
 * (`known`) are taken from it; the rest are evaluated on `sequence` after
 * the part of the prompt it already holds, so the prompts of one
 * multiple-choice item — one context, several continuations — evaluate
 * their context once. The sequence holds all but the prompt's last token
 * afterwards.
 */
export async function promptLogprobs(model: LlamaModel, sequence: LlamaContextSequence, prompt: readonly Token[], top: number, known: ScoredPrefixes): Promise<TokenLogprob[]> {
  // Position i predicts token i + 1: the last token predicts nothing of the prompt.
  const positions = prompt.length - 1;
  const remembered = known.lookup(prompt, top);
  let scored: PositionLogprobs[] = remembered;
  if (remembered.length < positions) {
    const held = sequence.compareContextTokens(prompt.slice(0, positions)).firstDifferentIndex;
    const start = Math.min(held, remembered.length);
    if (sequence.nextTokenIndex > start) await sequence.eraseContextTokenRanges([{ start, end: sequence.nextTokenIndex }]);
    const width = Math.max(top, 0);
    const evaluated = await evaluateScored(model, sequence, prompt.slice(start, positions), prompt.slice(start + 1), width, remembered.length - start);
    scored = [...remembered, ...evaluated.slice(remembered.length - start)];
    known.remember(prompt, scored, width);
  }
  return prompt.map((token, i) => tokenLogprob(model, token, i === 0 ? undefined : scored[i - 1], top));
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
  const after = await evaluateScored(model, sequence, [prompt[from]!, ...answer.slice(0, -1)], answer, Math.min(top, MAX_NATIVE_TOP));
  return answer.map((token, i) => tokenLogprob(model, token, after[i], top));
}
