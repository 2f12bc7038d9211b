import { z } from 'zod';
import { UnsupportedError } from '../core/errors.js';
import type { ChatRequest, ChatToolChoice } from '../core/tasks/chat.js';
import { logitBias, MAX_CHAT_MESSAGES, MAX_OUTPUT_TOKENS, MAX_TOOLS, outputTokens, tokenBias } from './chat.js';
import { keepAliveField } from './common.js';
import { CUSTOM_INPUT_PARAMETERS, inputItem, itemsToMessages, type ResponseItem } from './responses-items.js';
import { parseKnownFields, parseRequest } from './validate.js';

/**
 * POST /v1/responses (OpenAI's Responses API): request schema, and its
 * translation into the one chat request every chat route shares. As for
 * chat completions, fields OpenAI clients send routinely but that change
 * nothing here are accepted; any other unknown field, or a value the engine
 * cannot honour, is a 400 naming it. The item types are in responses-items.ts.
 */

/** OpenAI's built-in tools: lserve runs none of them, and dropping one silently would change the answer. */
const BUILTIN_TOOLS = new Set([
  'web_search', 'web_search_preview', 'web_search_2025_08_26', 'web_search_preview_2025_03_11', 'file_search', 'computer_use',
  'computer_use_preview', 'code_interpreter', 'image_generation', 'mcp', 'local_shell', 'shell', 'apply_patch',
]);

const toolName = z.string().regex(/^[a-zA-Z0-9_-]{1,64}$/, 'must be 1-64 letters, digits, _ or -');

const tool = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('function'),
    name: toolName,
    description: z.string().nullish(),
    parameters: z.record(z.string(), z.unknown()).nullish(),
    strict: z.boolean().nullish(),
  }),
  z.object({
    type: z.literal('custom'),
    name: toolName,
    description: z.string().nullish(),
    format: z
      .discriminatedUnion('type', [
        z.object({ type: z.literal('text') }),
        // A lark or regex grammar over free text cannot be enforced by the engine's tool calling
        // (its calls are JSON whose schema grammar has no regex), so it is refused rather than ignored.
        z.object({
          type: z.literal('grammar'),
          syntax: z.enum(['lark', 'regex']),
          definition: z.string(),
        }).refine(() => false, { message: 'grammar-constrained custom tools are not supported: the engine cannot enforce a lark or regex grammar on tool input', params: { code: 'unsupported_parameter' } }),
      ])
      .optional(),
  }),
]);

const textFormat = z.discriminatedUnion('type', [
  z.object({ type: z.literal('text') }),
  z.object({ type: z.literal('json_object') }),
  z.object({
    type: z.literal('json_schema'),
    name: z.string().min(1),
    description: z.string().nullish(),
    schema: z.record(z.string(), z.unknown()),
    strict: z.boolean().nullish(),
  }),
]);

/** OpenAI's limits on metadata: 16 pairs, keys up to 64 characters, values up to 512. */
const metadata = z
  .record(z.string().max(64, 'keys must be at most 64 characters'), z.string().max(512, 'values must be at most 512 characters'))
  .refine((m) => Object.keys(m).length <= 16, 'must have at most 16 keys');

export const responseCreateSchema = z.object({
  model: z.string().min(1),
  // The items are checked after the union (parseResponseCreate), so that an error names the item's field rather than 'input'.
  input: z.union([
    z.string(),
    z.array(z.unknown()).min(1, 'must contain at least one item').max(MAX_CHAT_MESSAGES, `must contain at most ${MAX_CHAT_MESSAGES} items`),
  ]),
  instructions: z.string().nullish(),
  max_output_tokens: outputTokens.nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  tools: z.array(tool).max(MAX_TOOLS, `must contain at most ${MAX_TOOLS} tools`).nullish(),
  tool_choice: z
    .union([z.enum(['none', 'auto', 'required']), z.object({ type: z.enum(['function', 'custom']), name: z.string().min(1) })])
    .nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  text: z
    .object({ format: textFormat.nullish(), verbosity: z.enum(['low', 'medium', 'high']).nullish() })
    .nullish(),
  reasoning: z
    .object({
      effort: z.enum(['none', 'minimal', 'low', 'medium', 'high', 'xhigh']).nullish(),
      summary: z.enum(['auto', 'concise', 'detailed']).nullish(),
      generate_summary: z.enum(['auto', 'concise', 'detailed']).nullish(),
    })
    .nullish(),
  /** Extensions, as chat completions take them (the Responses API has no way to ban or favour a token). */
  logit_bias: logitBias.nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  thinking_enabled: z.boolean().nullish(),
  thinking_tokens: z.int().min(0).max(MAX_OUTPUT_TOKENS, `must be at most ${MAX_OUTPUT_TOKENS}`).nullish(),
  keep_alive: keepAliveField,
  metadata: metadata.nullish(),
  // 'auto' drops the oldest turns when the conversation overflows the context (see the route).
  truncation: z.enum(['auto', 'disabled']).nullish(),
  store: z.boolean().nullish(),
  previous_response_id: z.string().min(1).nullish(),
  stream: z.boolean().nullish(),
  background: z.literal(false, 'background responses are not supported').nullish(),
  include: z
    .array(z.string().refine((v) => v !== 'message.output_text.logprobs', 'logprobs are not supported'))
    .nullish(),
  // Sent by common clients; no effect on a local engine.
  user: z.string().nullish(),
  safety_identifier: z.string().nullish(),
  prompt_cache_key: z.string().nullish(),
  service_tier: z.string().nullish(),
  stream_options: z.object({ include_obfuscation: z.boolean().optional() }).nullish(),
  // Logprobs are returned only when `include` asks for them, which is refused above.
  top_logprobs: z.int().min(0).max(20).nullish(),
});
const itemList = z.object({ input: z.array(inputItem) });
export type ResponseCreateBody = Omit<z.output<typeof responseCreateSchema>, 'input'> & { input: string | ResponseItem[] };

export function parseResponseCreate(body: unknown): ResponseCreateBody {
  const tools = (body as { tools?: unknown } | null)?.tools;
  if (Array.isArray(tools)) {
    tools.forEach((t: unknown, i) => {
      const type = (t as { type?: unknown } | null)?.type;
      if (typeof type === 'string' && BUILTIN_TOOLS.has(type)) {
        throw new UnsupportedError(`The built-in tool '${type}' is not available on this server: declare a function or custom tool instead.`, { param: `tools.${i}.type` });
      }
    });
  }
  const parsed = parseKnownFields(responseCreateSchema, body);
  return typeof parsed.input === 'string' ? { ...parsed, input: parsed.input } : { ...parsed, input: parseRequest(itemList, { input: parsed.input }).input };
}

/** The request's own input as items (a string is one user message). */
export function inputItems(body: ResponseCreateBody): ResponseItem[] {
  return typeof body.input === 'string' ? [{ type: 'message', role: 'user', content: body.input }] : body.input;
}

const EFFORT = { minimal: 'low', low: 'low', medium: 'medium', high: 'high', xhigh: 'high' } as const;

/** The chat request for this body, after the conversation's earlier items (`prefix`, from previous_response_id). */
export function toChatRequest(body: ResponseCreateBody, prefix: ResponseItem[]): ChatRequest {
  const tools = body.tools ?? [];
  const messages = itemsToMessages([...prefix, ...inputItems(body)], prefix.length);
  if (body.instructions) messages.unshift({ role: 'system', content: body.instructions });
  const choice = body.tool_choice;
  const toolChoice: ChatToolChoice | undefined = choice == null ? undefined : typeof choice === 'string' ? choice : { name: choice.name };
  if (toolChoice !== undefined && toolChoice !== 'none' && toolChoice !== 'auto' && tools.length === 0) {
    throw new UnsupportedError('tool_choice requires tools.', { param: 'tool_choice' });
  }
  const format = body.text?.format;
  const effort = body.reasoning?.effort;
  return {
    model: body.model,
    messages,
    maxTokens: body.max_output_tokens ?? undefined,
    temperature: body.temperature ?? undefined,
    topP: body.top_p ?? undefined,
    logitBias: tokenBias(body.logit_bias),
    presencePenalty: body.presence_penalty ?? undefined,
    frequencyPenalty: body.frequency_penalty ?? undefined,
    // effort 'none' is the thinking switch off; the others are chat's reasoning_effort.
    thinking: body.thinking_enabled ?? (effort === 'none' ? false : undefined),
    thinkingBudget: body.thinking_tokens ?? undefined,
    reasoningEffort: effort == null || effort === 'none' ? undefined : EFFORT[effort],
    responseFormat: format == null ? undefined : format.type === 'json_schema' ? { type: 'json_schema', schema: format.schema } : format,
    // A custom tool takes free text: to the engine it is a function of one string argument.
    tools: tools.map((t) =>
      t.type === 'function'
        ? { name: t.name, description: t.description ?? undefined, parameters: t.parameters ?? undefined }
        : { name: t.name, description: t.description ?? undefined, parameters: CUSTOM_INPUT_PARAMETERS },
    ),
    toolChoice,
    parallelToolCalls: body.parallel_tool_calls ?? undefined,
    keepAliveMs: body.keep_alive,
  };
}
