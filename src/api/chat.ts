import { z } from 'zod';
import { InvalidRequestError, UnsupportedError } from '../core/errors.js';
import type { ChatMessage, ChatRequest, ChatResult, ChatToolChoice, ChatUsage, TokenLogprob } from '../core/tasks/chat.js';
import { parseKnownFields } from './validate.js';
import { keepAliveField, stringOr, textContent } from './common.js';
import { openAiAudioPart, openAiImagePart, partsToContent } from './chat-media.js';

/**
 * POST /v1/chat/completions: request schema and wire shapes (OpenAI's).
 * Fields OpenAI clients send routinely but that change nothing here are
 * accepted; any other unknown field, or a value the engine cannot honour,
 * is a 400 naming it.
 */

const textPart = z.object({ type: z.literal('text'), text: z.string() });
const content = z.union([z.string(), z.array(textPart)]);
/** A user turn may carry images and audio (api/chat-media.ts). */
const userContent = stringOr(z.array(z.discriminatedUnion('type', [textPart, openAiImagePart, openAiAudioPart], { error: "content parts are 'text', 'image_url' or 'input_audio'" })));

const toolCall = z.object({
  id: z.string().min(1),
  type: z.literal('function'),
  function: z.object({ name: z.string().min(1), arguments: z.string() }),
});

const message = z.discriminatedUnion('role', [
  z.object({ role: z.enum(['system', 'developer']), content, name: z.string().optional() }),
  z.object({ role: z.literal('user'), content: userContent, name: z.string().optional() }),
  z.object({
    role: z.literal('assistant'),
    content: content.nullish(),
    name: z.string().optional(),
    reasoning_content: z.string().nullish(),
    tool_calls: z.array(toolCall).nullish(),
    refusal: z.string().nullish(),
  }),
  z.object({ role: z.literal('tool'), content, tool_call_id: z.string().min(1) }),
]);

/** A function tool's name, as OpenAI allows it (the Realtime API's tools use it too). */
export const toolName = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, _ or -');

const tool = z.object({
  type: z.literal('function'),
  function: z.object({
    name: toolName,
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullish(),
  }),
});

const responseFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({
    type: z.literal('json_schema'),
    json_schema: z.object({
      name: z.string().min(1),
      description: z.string().optional(),
      schema: z.record(z.string(), z.unknown()).optional(),
      strict: z.boolean().nullish(),
    }),
  }),
]);

/*
 * Bounds on the fields that multiply work or memory (DESIGN.md §3), checked
 * here, before the model is resolved or loaded; each is a 400 naming the
 * field, whose message states the limit. The Anthropic route uses the same.
 */

/** Most messages in one conversation (OpenAI's limit). */
export const MAX_CHAT_MESSAGES = 2048;
/**
 * Most tokens `max_tokens` / `max_completion_tokens` (and a thinking budget)
 * may ask for. An absolute cap: a generation also stops where the model's
 * context is full (the room the prompt leaves), so a larger value than the
 * room is read as "up to the context", as llama.cpp's server does.
 */
export const MAX_OUTPUT_TOKENS = 262_144;
/** Most stop sequences (`stop`, Anthropic's `stop_sequences`). */
export const MAX_STOP_SEQUENCES = 16;
/** Most `logit_bias` entries (OpenAI's limit). */
export const MAX_LOGIT_BIAS_ENTRIES = 300;
/** Most `tools` (OpenAI's limit): each is rendered into the prompt and the tool-call grammar. */
export const MAX_TOOLS = 128;

/** A token count from 1 to MAX_OUTPUT_TOKENS. */
export const outputTokens = z.int().positive().max(MAX_OUTPUT_TOKENS, `must be at most ${MAX_OUTPUT_TOKENS}`);
/** A list of at most MAX_CHAT_MESSAGES messages, at least one. */
export const messageList = <T extends z.ZodType>(item: T) =>
  z.array(item).min(1, 'must contain at least one message').max(MAX_CHAT_MESSAGES, `must contain at most ${MAX_CHAT_MESSAGES} messages`);
/** A list of at most MAX_STOP_SEQUENCES non-empty strings. */
export const stopList = z.array(z.string().min(1)).max(MAX_STOP_SEQUENCES, `must contain at most ${MAX_STOP_SEQUENCES} sequences`);

/** OpenAI's logit_bias: token id (a decimal string, JSON keys being strings) → bias from -100 to 100. */
export const logitBias = z
  .record(z.string().regex(/^\d+$/, 'keys must be token ids'), z.number().min(-100).max(100))
  .refine((bias) => Object.keys(bias).length <= MAX_LOGIT_BIAS_ENTRIES, `must have at most ${MAX_LOGIT_BIAS_ENTRIES} entries`);

/** A parsed logit_bias as the chat task takes it: numeric token ids. */
export function tokenBias(bias: Record<string, number> | null | undefined): Record<number, number> | undefined {
  return bias ? Object.fromEntries(Object.entries(bias).map(([k, v]) => [Number(k), v])) : undefined;
}

export const chatCompletionSchema = z.object({
  model: z.string().min(1),
  messages: messageList(message),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  /** Extension (llama.cpp, vLLM, Ollama clients send it). */
  top_k: z.int().min(0).nullish(),
  max_tokens: outputTokens.nullish(),
  max_completion_tokens: outputTokens.nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullish(),
  // The count is checked after the union, so that the answer names the limit rather than "invalid input".
  stop: z
    .union([z.string().min(1), z.array(z.string().min(1))])
    .refine((stop) => typeof stop === 'string' || stop.length <= MAX_STOP_SEQUENCES, `must contain at most ${MAX_STOP_SEQUENCES} sequences`)
    .nullish(),
  seed: z.int().nullish(),
  n: z.literal(1, 'only n=1 is supported').nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  logit_bias: logitBias.nullish(),
  response_format: responseFormat.nullish(),
  tools: z.array(tool).max(MAX_TOOLS, `must contain at most ${MAX_TOOLS} tools`).nullish(),
  tool_choice: z
    .union([z.enum(['none', 'auto', 'required']), z.object({ type: z.literal('function'), function: z.object({ name: z.string().min(1) }) })])
    .nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  reasoning_effort: z.enum(['low', 'medium', 'high']).nullish(),
  thinking_enabled: z.boolean().nullish(),
  thinking_tokens: z.int().min(0).max(MAX_OUTPUT_TOKENS, `must be at most ${MAX_OUTPUT_TOKENS}`).nullish(),
  keep_alive: keepAliveField,
  // Sent by common clients; no effect on a local engine.
  user: z.string().nullish(),
  store: z.boolean().nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
  service_tier: z.string().nullish(),
  prompt_cache_key: z.string().nullish(),
  safety_identifier: z.string().nullish(),
  modalities: z.array(z.literal('text', "only 'text' output is supported")).nullish(),
  logprobs: z.boolean().nullish(),
  top_logprobs: z.int().min(0).max(20, 'must be at most 20').nullish(),
});
export type ChatCompletionBody = z.output<typeof chatCompletionSchema>;

export function parseChatCompletion(body: unknown): ChatCompletionBody {
  const parsed = parseKnownFields(chatCompletionSchema, body);
  // As OpenAI: alternatives are asked for with the log-probabilities themselves.
  if (parsed.top_logprobs != null && parsed.logprobs !== true) throw new InvalidRequestError("Invalid 'top_logprobs': needs logprobs: true.", { param: 'top_logprobs' });
  return parsed;
}

export function toChatRequest(body: ChatCompletionBody): ChatRequest {
  const messages: ChatMessage[] = body.messages.map((m, i) => {
    switch (m.role) {
      case 'system':
      case 'developer':
        return { role: 'system', content: textContent(m.content) };
      case 'user': {
        const { content, media } = partsToContent(m.content, `messages.${i}.content`);
        return { role: 'user', content, ...(media.length ? { media } : {}) };
      }
      case 'tool':
        return { role: 'tool', content: textContent(m.content), toolCallId: m.tool_call_id };
      case 'assistant':
        return {
          role: 'assistant',
          content: textContent(m.content),
          ...(m.reasoning_content ? { reasoning: m.reasoning_content } : {}),
          ...(m.tool_calls?.length ? { toolCalls: m.tool_calls.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })) } : {}),
        };
    }
  });
  const choice = body.tool_choice;
  const toolChoice: ChatToolChoice | undefined = choice == null ? undefined : typeof choice === 'string' ? choice : { name: choice.function.name };
  if (toolChoice !== undefined && toolChoice !== 'none' && toolChoice !== 'auto' && !body.tools?.length) {
    throw new UnsupportedError('tool_choice requires tools.', { param: 'tool_choice' });
  }
  const format = body.response_format;
  const stop = body.stop == null ? undefined : typeof body.stop === 'string' ? [body.stop] : body.stop;
  return {
    model: body.model,
    messages,
    maxTokens: body.max_completion_tokens ?? body.max_tokens ?? undefined,
    temperature: body.temperature ?? undefined,
    topP: body.top_p ?? undefined,
    topK: body.top_k ?? undefined,
    seed: body.seed ?? undefined,
    stop,
    presencePenalty: body.presence_penalty ?? undefined,
    frequencyPenalty: body.frequency_penalty ?? undefined,
    logitBias: tokenBias(body.logit_bias),
    logprobs: body.logprobs ? (body.top_logprobs ?? 0) : undefined,
    thinking: body.thinking_enabled ?? undefined,
    thinkingBudget: body.thinking_tokens ?? undefined,
    reasoningEffort: body.reasoning_effort ?? undefined,
    responseFormat:
      format == null ? undefined
      : format.type === 'json_schema' ? { type: 'json_schema', schema: format.json_schema.schema ?? {} }
      : format,
    tools: body.tools?.map((t) => ({ name: t.function.name, description: t.function.description, parameters: t.function.parameters })),
    toolChoice,
    parallelToolCalls: body.parallel_tool_calls ?? undefined,
    keepAliveMs: body.keep_alive,
  };
}

// ---- wire shapes ----

export interface ChatCompletionToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ChatCompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** As OpenAI and llama.cpp's server report them: the prompt tokens the model's cache held, the completion tokens spent thinking. */
  prompt_tokens_details: { cached_tokens: number };
  completion_tokens_details: { reasoning_tokens: number };
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  system_fingerprint: string;
  choices: Array<{
    index: 0;
    message: { role: 'assistant'; content: string | null; reasoning_content?: string; tool_calls?: ChatCompletionToolCall[] };
    logprobs: ChatLogprobs | null;
    finish_reason: 'stop' | 'length' | 'tool_calls';
  }>;
  usage: ChatCompletionUsage;
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  system_fingerprint: string;
  choices: Array<{
    index: 0;
    delta: {
      role?: 'assistant';
      content?: string;
      reasoning_content?: string;
      tool_calls?: Array<{ index: number } & ChatCompletionToolCall>;
    };
    logprobs: ChatLogprobs | null;
    finish_reason: 'stop' | 'length' | 'tool_calls' | null;
  }>;
  usage?: ChatCompletionUsage | null;
}

/** OpenAI's chat logprobs: each answer token with its bytes and likeliest alternatives. */
export interface ChatLogprobs {
  content: Array<{ token: string; logprob: number; bytes: number[]; top_logprobs: Array<{ token: string; logprob: number; bytes: number[] }> }>;
  refusal: null;
}

export function chatLogprobs(tokens: readonly TokenLogprob[]): ChatLogprobs {
  const bytes = (text: string) => [...Buffer.from(text, 'utf8')];
  return {
    content: tokens.map((t) => ({ token: t.text, logprob: t.logprob ?? 0, bytes: bytes(t.text), top_logprobs: t.top.map((a) => ({ token: a.text, logprob: a.logprob, bytes: bytes(a.text) })) })),
    refusal: null,
  };
}

export const SYSTEM_FINGERPRINT = 'fp_lserve_llama';

export function usageOf(usage: ChatUsage): ChatCompletionUsage {
  return {
    prompt_tokens: usage.promptTokens,
    completion_tokens: usage.completionTokens,
    total_tokens: usage.promptTokens + usage.completionTokens,
    prompt_tokens_details: { cached_tokens: usage.cachedPromptTokens },
    completion_tokens_details: { reasoning_tokens: usage.reasoningTokens },
  };
}

/** The non-streamed response (HTTP and `lserve run --json`). */
export function chatCompletionFrom(result: ChatResult, model: string, id: string, created: number): ChatCompletion {
  const called = result.toolCalls.length > 0;
  return {
    id,
    object: 'chat.completion',
    created,
    model,
    system_fingerprint: SYSTEM_FINGERPRINT,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: called && result.content === '' ? null : result.content,
          ...(result.reasoning ? { reasoning_content: result.reasoning } : {}),
          ...(called ? { tool_calls: result.toolCalls.map((c) => ({ id: c.id, type: 'function' as const, function: { name: c.name, arguments: c.arguments } })) } : {}),
        },
        logprobs: result.logprobs ? chatLogprobs(result.logprobs) : null,
        finish_reason: called ? 'tool_calls' : result.finishReason,
      },
    ],
    usage: usageOf(result.usage),
  };
}
