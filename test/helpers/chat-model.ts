import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { TINY_QWEN3, TINY_QWEN3_LONG, writeQwen3Model } from '../fixtures/gguf/qwen3.js';
import { startTestServer, type TestServer } from './server.js';

/** The tiny random-weight Qwen3 GGUF the chat suites share (generated once into test/.cache). */
export function tinyQwen3File(): string {
  return writeQwen3Model(fileURLToPath(new URL('../.cache/qwen3-tiny.gguf', import.meta.url)), TINY_QWEN3);
}

/** The same tiny model with Qwen3's 40960-token training context (registered without --ctx-size: agents' prompts fit). */
export function tinyQwen3LongFile(): string {
  return writeQwen3Model(fileURLToPath(new URL('../.cache/qwen3-tiny-40k.gguf', import.meta.url)), TINY_QWEN3_LONG);
}

export const CHAT_MODEL_ID = 'qwen3-test';

/** Qwen3's special tokens, for steering the random model with logit_bias. */
export const TOKENS = { think: 151667, endThink: 151668, toolCall: 151657, imEnd: 151645, endOfText: 151643, newline: 198 } as const;

/** logit_bias that bans both end-of-generation tokens, so a generation runs to max_tokens. */
export const NEVER_END = { [TOKENS.imEnd]: -100, [TOKENS.endOfText]: -100 } as const;

/** logit_bias that makes the random model open a thought at once and stay in it. */
export const THINK_BIAS = { [TOKENS.think]: 4.5, [TOKENS.newline]: 3, [TOKENS.endThink]: -100, ...NEVER_END } as const;

/**
 * A test server with the tiny chat model registered and loaded (one request
 * made, so tests measure requests, not the load), and the official openai
 * client pointed at it.
 */
export async function startChatServer(): Promise<{ server: TestServer; client: OpenAI }> {
  const server = await startTestServer({ engine: { threads: 1, parallel: 4 } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  await client.chat.completions.create({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 });
  return { server, client };
}
