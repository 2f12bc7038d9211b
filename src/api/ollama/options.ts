import { z } from 'zod';
import type { ChatRequest } from '../../core/tasks/chat.js';
import { logitBias, MAX_OUTPUT_TOKENS, stopList, tokenBias } from '../chat.js';
import { keepAliveField } from '../common.js';

/**
 * Ollama's `options`: the Modelfile parameters a request may set. The ones
 * lserve's llama.cpp sampling has are checked and used; the rest of
 * Ollama's list (num_keep, typical_p, repeat_last_n, penalize_newline, numa,
 * num_batch, num_gpu, main_gpu, use_mmap, num_thread…) are accepted and
 * ignored, as Ollama itself ignores options a runner does not know: the
 * server's thread plan (--threads) and batch sizes are its own, one per
 * machine.
 */
export const ollamaOptions = z
  .looseObject({
    temperature: z.number().min(0).max(2).optional(),
    top_k: z.int().min(0).max(1000).optional(),
    top_p: z.number().min(0).max(1).optional(),
    min_p: z.number().min(0).max(1).optional(),
    /** Tokens to generate: -1 (and -2, "until the context is full") for no limit. */
    num_predict: z.int().min(-2).max(MAX_OUTPUT_TOKENS).optional(),
    stop: stopList.optional(),
    seed: z.int().optional(),
    repeat_penalty: z.number().min(0).max(10).optional(),
    presence_penalty: z.number().min(-2).max(2).optional(),
    frequency_penalty: z.number().min(-2).max(2).optional(),
    /** Tokens per context, as --ctx-size sets them (Engine.setContextSize): the model is loaded again at this size. */
    num_ctx: z.int().min(64).max(1 << 20).optional(),
    /** lserve's extension, as on its other chat routes: token id → additive logit bias (-100 bans a token). */
    logit_bias: logitBias.optional(),
  })
  .optional();
export type OllamaOptions = z.infer<typeof ollamaOptions>;

/** `keep_alive` as Ollama sends it: "5m", seconds, 0 (unload at once), negative (forever). */
export const ollamaKeepAlive = keepAliveField;

/** Ollama's `think`: on, off, or a level (gpt-oss's low/medium/high). */
export const ollamaThink = z.union([z.boolean(), z.enum(['low', 'medium', 'high'])]).optional();

/** Ollama's `format`: "json", a JSON schema, or "" (none). */
export const ollamaFormat = z.union([z.literal(''), z.literal('json'), z.record(z.string(), z.unknown())]).optional();

/** What `options`, `think` and `format` ask of the chat task. */
export function samplingOf(
  options: OllamaOptions,
  think: z.infer<typeof ollamaThink>,
  format: z.infer<typeof ollamaFormat>,
): Pick<ChatRequest, 'temperature' | 'topK' | 'topP' | 'minP' | 'maxTokens' | 'stop' | 'seed' | 'repeatPenalty' | 'presencePenalty' | 'frequencyPenalty' | 'logitBias' | 'thinking' | 'reasoningEffort' | 'responseFormat'> {
  const o = options ?? {};
  return {
    temperature: o.temperature,
    topK: o.top_k,
    topP: o.top_p,
    minP: o.min_p,
    maxTokens: o.num_predict === undefined || o.num_predict < 0 ? undefined : Math.max(1, o.num_predict),
    stop: o.stop,
    seed: o.seed,
    repeatPenalty: o.repeat_penalty,
    presencePenalty: o.presence_penalty,
    frequencyPenalty: o.frequency_penalty,
    logitBias: tokenBias(o.logit_bias),
    thinking: think === undefined ? undefined : think !== false,
    reasoningEffort: typeof think === 'string' ? think : undefined,
    responseFormat: format === 'json' ? { type: 'json_object' } : format && typeof format === 'object' ? { type: 'json_schema', schema: format } : undefined,
  };
}
