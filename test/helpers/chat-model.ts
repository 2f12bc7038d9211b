import { fileURLToPath } from 'node:url';
import { TINY_QWEN3, writeQwen3Model } from '../fixtures/gguf/qwen3.js';

/** The tiny random-weight Qwen3 GGUF the chat suites share (generated once into test/.cache). */
export function tinyQwen3File(): string {
  return writeQwen3Model(fileURLToPath(new URL('../.cache/qwen3-tiny.gguf', import.meta.url)), TINY_QWEN3);
}

export const CHAT_MODEL_ID = 'qwen3-test';

/** Qwen3's special tokens, for steering the random model with logit_bias. */
export const TOKENS = { think: 151667, endThink: 151668, toolCall: 151657, imEnd: 151645, endOfText: 151643, newline: 198 } as const;

/** logit_bias that bans both end-of-generation tokens, so a generation runs to max_tokens. */
export const NEVER_END = { [TOKENS.imEnd]: -100, [TOKENS.endOfText]: -100 } as const;
