import { z } from 'zod';
import { chatCompletionSchema, MAX_OUTPUT_TOKENS, MAX_STOP_SEQUENCES, toChatRequest } from './chat.js';
import { keepAliveField } from './common.js';
import { UnsupportedError } from '../core/errors.js';
import type { ChatRequest, CompletionRequest } from '../core/tasks/chat.js';
import type { InfillRequest } from '../core/tasks/infill.js';

/**
 * llama.cpp's server utility routes (tools/server/README.md, read
 * 2026-11-29: /tokenize, /detokenize, /apply-template, /infill), as its
 * clients send them: editor plugins (llama.vim, llama.vscode) for /infill,
 * prompt tools for the rest. llama.cpp serves one model; lserve several, so
 * each body may name one in `model`, and without it the default chat model
 * answers (docs/models.md). Like llama.cpp, fields a route does not know
 * are ignored; the fields of its reference are listed in each schema:
 * mapped, accepted without effect (what tunes llama.cpp's own slots and
 * clocks), or a 400 naming the field where a value would change the answer
 * and cannot be honoured.
 */

/** Longest text a route tokenizes (characters; the body limit applies first). */
export const MAX_TEXT_CHARS = 4 * 1024 * 1024;
/** Most token ids /detokenize takes. */
export const MAX_TOKEN_IDS = 1 << 20;
/** Most `input_extra` chunks, and the longest chunk and file name. */
export const MAX_EXTRA_CHUNKS = 256;
export const MAX_EXTRA_CHARS = 1024 * 1024;
export const MAX_FILENAME_CHARS = 4096;
/** Longest model name. */
export const MAX_MODEL_NAME = 200;

const modelField = z.string().min(1).max(MAX_MODEL_NAME, `must be at most ${MAX_MODEL_NAME} characters`).nullish();
const text = (max: number) => z.string().max(max, `must be at most ${max} characters`);

export const tokenizeSchema = z.object({
  model: modelField,
  content: text(MAX_TEXT_CHARS),
  add_special: z.boolean().default(false),
  parse_special: z.boolean().default(true),
  with_pieces: z.boolean().default(false),
});
export type TokenizeBody = z.output<typeof tokenizeSchema>;

export const detokenizeSchema = z.object({
  model: modelField,
  tokens: z.array(z.int().min(0, 'must be a token id (0 or more)')).max(MAX_TOKEN_IDS, `must contain at most ${MAX_TOKEN_IDS} tokens`),
});
export type DetokenizeBody = z.output<typeof detokenizeSchema>;

/** /apply-template: a chat completion's body (its messages, tools and template switches) with `model` optional. */
export const applyTemplateSchema = chatCompletionSchema.extend({
  model: modelField,
  /** llama.cpp's extra template variables; `enable_thinking` is Qwen3's switch (lserve's `thinking_enabled`). */
  chat_template_kwargs: z.object({ enable_thinking: z.boolean().optional() }).loose().nullish(),
  add_generation_prompt: z.literal(true, "only true is supported: the prompt ends where the assistant's answer begins").nullish(),
});
export type ApplyTemplateBody = z.output<typeof applyTemplateSchema>;

/** The chat task's request whose prompt /apply-template renders. */
export function toTemplateRequest(body: ApplyTemplateBody, model: string): ChatRequest {
  const request = toChatRequest({ ...body, model });
  const thinking = body.chat_template_kwargs?.enable_thinking;
  return thinking === undefined || request.thinking !== undefined ? request : { ...request, thinking };
}

/** llama.cpp's logit_bias: `{"id": bias}` or `[[id, bias], …]`, `false` banning the token. */
const biasValue = z.union([z.number().min(-100).max(100), z.literal(false)]);
const llamaLogitBias = z
  .union([z.record(z.string().regex(/^\d+$/, 'keys must be token ids'), biasValue), z.array(z.tuple([z.int().min(0), biasValue]))])
  .refine((bias) => (Array.isArray(bias) ? bias.length : Object.keys(bias).length) <= 300, 'must have at most 300 entries');

export const infillSchema = z.object({
  model: modelField,
  input_prefix: text(MAX_TEXT_CHARS),
  input_suffix: text(MAX_TEXT_CHARS),
  input_extra: z
    .array(z.object({ filename: text(MAX_FILENAME_CHARS).optional(), text: text(MAX_EXTRA_CHARS) }))
    .max(MAX_EXTRA_CHUNKS, `must contain at most ${MAX_EXTRA_CHUNKS} chunks`)
    .nullish(),
  /** Text right after the prefix (llama.cpp's server appends its tokens to the prefix's), special tokens read as such. */
  prompt: text(MAX_TEXT_CHARS).default(''),
  n_predict: z.int().min(-1).max(MAX_OUTPUT_TOKENS, `must be at most ${MAX_OUTPUT_TOKENS}`).nullish(),
  max_tokens: z.int().min(-1).max(MAX_OUTPUT_TOKENS, `must be at most ${MAX_OUTPUT_TOKENS}`).nullish(),
  temperature: z.number().min(0).max(100).nullish(),
  top_k: z.int().min(0).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  seed: z.int().min(-1).max(0xffffffff).nullish(),
  stop: z
    .union([z.string(), z.array(z.string())])
    .refine((stop) => typeof stop === 'string' || stop.length <= MAX_STOP_SEQUENCES, `must contain at most ${MAX_STOP_SEQUENCES} sequences`)
    .nullish(),
  stream: z.boolean().default(false),
  repeat_penalty: z.number().min(0).max(10).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  logit_bias: llamaLogitBias.nullish(),
  json_schema: z.record(z.string(), z.unknown()).nullish(),
  /** Only these fields of the answer (llama.cpp's `response_fields`, nested ones as `timings/prompt_n`). */
  response_fields: z.array(z.string().min(1).max(200)).max(64).nullish(),
  keep_alive: keepAliveField,
  // llama.cpp's slot, cache and clock controls: nothing to do here (docs/api.md).
  cache_prompt: z.boolean().nullish(),
  id_slot: z.int().nullish(),
  n_keep: z.int().nullish(),
  n_indent: z.int().min(0).nullish(),
  t_max_prompt_ms: z.number().nullish(),
  t_max_predict_ms: z.number().nullish(),
  samplers: z.union([z.array(z.string().max(64)).max(32), z.string().max(256)]).nullish(),
  timings_per_token: z.boolean().nullish(),
  return_progress: z.boolean().nullish(),
  return_tokens: z.boolean().nullish(),
  // Fields that would change the answer: accepted at their defaults only.
  n_probs: z.literal(0, 'token probabilities are not supported').nullish(),
  ignore_eos: z.literal(false, 'ignore_eos is not supported').nullish(),
  mirostat: z.literal(0, 'mirostat sampling is not supported').nullish(),
  grammar: z.literal('', 'GBNF grammars are not supported here: send json_schema').nullish(),
});
export type InfillBody = z.output<typeof infillSchema>;

/** The infill task's request. */
export function toInfillRequest(body: InfillBody, model: string): InfillRequest {
  const predict = body.n_predict ?? body.max_tokens ?? -1;
  if (predict === 0) throw new UnsupportedError('n_predict 0 asks for no tokens: send -1 (no limit) or a positive count.', { param: body.n_predict != null ? 'n_predict' : 'max_tokens' });
  const stop = body.stop == null ? undefined : (typeof body.stop === 'string' ? [body.stop] : body.stop).filter((s) => s !== '');
  const sampling: Omit<CompletionRequest, 'prompt' | 'suffix'> = {
    model,
    maxTokens: predict > 0 ? predict : undefined,
    temperature: body.temperature ?? undefined,
    topK: body.top_k ?? undefined,
    topP: body.top_p ?? undefined,
    minP: body.min_p ?? undefined,
    seed: body.seed == null || body.seed === -1 || body.seed === 0xffffffff ? undefined : body.seed,
    stop: stop?.length ? stop : undefined,
    repeatPenalty: body.repeat_penalty ?? undefined,
    presencePenalty: body.presence_penalty ?? undefined,
    frequencyPenalty: body.frequency_penalty ?? undefined,
    logitBias: logitBiasOf(body.logit_bias),
    responseFormat: body.json_schema ? { type: 'json_schema', schema: body.json_schema } : undefined,
    keepAliveMs: body.keep_alive,
  };
  return {
    ...sampling,
    inputPrefix: body.input_prefix,
    inputSuffix: body.input_suffix,
    prompt: body.prompt,
    extra: (body.input_extra ?? []).map((chunk) => ({ filename: chunk.filename ?? 'tmp', text: chunk.text })),
  };
}

function logitBiasOf(bias: InfillBody['logit_bias']): Record<number, number> | undefined {
  if (bias == null) return undefined;
  const pairs = Array.isArray(bias) ? bias : Object.entries(bias).map(([id, value]) => [Number(id), value] as const);
  return pairs.length ? Object.fromEntries(pairs.map(([id, value]) => [id, value === false ? -100 : value])) : undefined;
}

// ---- wire shapes ----

/** llama.cpp's `timings`, as far as lserve measures them. */
export interface LlamaTimings {
  cache_n: number;
  prompt_n: number;
  prompt_ms: number;
  prompt_per_token_ms: number;
  prompt_per_second: number;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_token_ms: number;
  predicted_per_second: number;
}

/** The prompt's and the generation's counts and the time each took (ms), as llama.cpp reports them. */
export function llamaTimings(promptTokens: number, cachedTokens: number, promptMs: number, predicted: number, predictedMs: number): LlamaTimings {
  const evaluated = promptTokens - cachedTokens;
  return {
    cache_n: cachedTokens,
    prompt_n: evaluated,
    prompt_ms: promptMs,
    prompt_per_token_ms: evaluated > 0 ? promptMs / evaluated : 0,
    prompt_per_second: promptMs > 0 ? (evaluated * 1000) / promptMs : 0,
    predicted_n: predicted,
    predicted_ms: predictedMs,
    predicted_per_token_ms: predicted > 0 ? predictedMs / predicted : 0,
    predicted_per_second: predictedMs > 0 ? (predicted * 1000) / predictedMs : 0,
  };
}

/** One streamed piece of /infill (llama.cpp's partial completion result). */
export interface InfillChunk {
  index: 0;
  content: string;
  tokens: number[];
  stop: false;
  id_slot: number;
  tokens_predicted: number;
  tokens_evaluated: number;
}

/** /infill's answer (llama.cpp's final completion result); streamed last with `content` empty. */
export interface InfillResult {
  index: 0;
  content: string;
  tokens: number[];
  id_slot: number;
  stop: true;
  model: string;
  tokens_predicted: number;
  tokens_evaluated: number;
  generation_settings: Record<string, unknown>;
  prompt: string;
  has_new_line: boolean;
  truncated: boolean;
  stop_type: 'eos' | 'word' | 'limit' | 'none';
  stopping_word: string;
  tokens_cached: number;
  timings: LlamaTimings;
}

/** Only the `response_fields` of an answer, keyed by the path as it was asked (llama.cpp's json_get_nested_values). */
export function pickFields(result: object, fields: readonly string[] | null | undefined): object {
  if (!fields?.length) return result;
  const picked: Record<string, unknown> = {};
  for (const field of fields) {
    let value: unknown = result;
    for (const key of field.split('/')) value = value !== null && typeof value === 'object' && Object.hasOwn(value, key) ? (value as Record<string, unknown>)[key] : undefined;
    if (value !== undefined) picked[field] = value;
  }
  return picked;
}
