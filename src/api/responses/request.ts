import { z } from 'zod';
import { InvalidRequestError, UnsupportedError } from '../../core/errors.js';
import type { ChatRequest, ChatToolChoice } from '../../core/tasks/chat.js';
import { logitBias, MAX_CHAT_MESSAGES, MAX_OUTPUT_TOKENS, MAX_TOOLS, outputTokens, tokenBias } from '../chat.js';
import { keepAliveField } from '../common.js';
import type { OmittedTool } from '../hosted-tools.js';
import { assertFieldsListed, parseKnownFields, parseRequest } from '../validate.js';
import { EXTENSION_FIELDS, RESPONSE_FIELDS } from './fields.js';
import { inputItem, itemsToMessages, type ResponseItem } from './items.js';
import { declaredTool, ToolRegistry, visibleName, type McpListedTool, type McpToolDeclaration } from './tools.js';

/**
 * POST /v1/responses (OpenAI's Responses API): request schema, and its
 * translation into the one chat request every chat route shares. Every
 * field of the reference is placed in fields.ts (handled, ignored or
 * refused); anything else is a 400 naming it. Tools are in tools.ts, the
 * conversation's items in items.ts.
 */

const loose = z.unknown().optional();
const refused = (message: string) => z.unknown().refine((value) => value === null || value === undefined, { message, params: { code: 'unsupported_parameter' } }).optional();

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

const EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'] as const;

/** tool_choice: the options, a named tool, the allowed subset, or a hosted tool (which, left out, cannot be forced). */
const toolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.object({ type: z.enum(['function', 'custom']), name: z.string().min(1), namespace: z.string().nullish() }),
  z.object({ type: z.literal('allowed_tools'), mode: z.enum(['auto', 'required']), tools: z.array(z.looseObject({ type: z.string(), name: z.string().optional() })).max(MAX_TOOLS) }),
  z.looseObject({ type: z.string() }),
]);

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
  tools: z.array(declaredTool).max(MAX_TOOLS, `must contain at most ${MAX_TOOLS} tools`).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  text: z.object({ format: textFormat.nullish(), verbosity: z.enum(['low', 'medium', 'high']).nullish() }).nullish(),
  reasoning: z
    .object({
      effort: z.enum(EFFORTS).nullish(),
      summary: z.enum(['auto', 'concise', 'detailed']).nullish(),
      generate_summary: z.enum(['auto', 'concise', 'detailed']).nullish(),
      // Which earlier reasoning the prompt shows, and the execution mode: the model's template decides here.
      context: z.enum(['auto', 'current_turn', 'all_turns']).nullish(),
      mode: z.string().nullish(),
    })
    .nullish(),
  metadata: metadata.nullish(),
  // 'auto' drops the oldest turns when the conversation overflows the context (see the route).
  truncation: z.enum(['auto', 'disabled']).nullish(),
  store: z.boolean().nullish(),
  previous_response_id: z.string().min(1).nullish(),
  stream: z.boolean().nullish(),
  background: z.literal(false, 'background responses are not supported').nullish(),
  include: z.array(z.string()).max(16).nullish(),
  top_logprobs: z.int().min(0).max(20).nullish(),
  stream_options: z.object({ include_obfuscation: z.boolean().optional(), reasoning_summary_delivery: z.string().optional() }).nullish(),
  prompt_cache_key: z.string().nullish(),
  prompt_cache_options: loose,
  prompt_cache_retention: loose,
  safety_identifier: z.string().nullish(),
  service_tier: z.string().nullish(),
  user: z.string().nullish(),
  max_tool_calls: z.int().min(0).nullish(),
  client_metadata: z.record(z.string(), z.unknown()).nullish(),
  conversation: refused('server-held conversations are not kept here: send the items, or continue with previous_response_id'),
  prompt: refused('stored prompt templates are not kept here: send the instructions and input'),
  moderation: refused('moderation is not run here'),
  context_management: refused('server-side compaction is not done here'),
  // Extensions, as chat completions take them (the Responses API has no way to ban or favour a token).
  logit_bias: logitBias.nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  thinking_enabled: z.boolean().nullish(),
  thinking_tokens: z.int().min(0).max(MAX_OUTPUT_TOKENS, `must be at most ${MAX_OUTPUT_TOKENS}`).nullish(),
  keep_alive: keepAliveField,
});
const itemList = z.object({ input: z.array(inputItem) });
export type ResponseCreateBody = Omit<z.output<typeof responseCreateSchema>, 'input'> & { input: string | ResponseItem[] };

assertFieldsListed(responseCreateSchema, { ...RESPONSE_FIELDS, ...EXTENSION_FIELDS }, 'Responses');

export function parseResponseCreate(body: unknown): ResponseCreateBody {
  const parsed = parseKnownFields(responseCreateSchema, body);
  return typeof parsed.input === 'string' ? { ...parsed, input: parsed.input } : { ...parsed, input: parseRequest(itemList, { input: parsed.input }).input };
}

/** The request's own input as items (a string is one user message). */
export function inputItems(body: ResponseCreateBody): ResponseItem[] {
  return typeof body.input === 'string' ? [{ type: 'message', role: 'user', content: body.input }] : body.input;
}

const EFFORT = { minimal: 'low', low: 'low', medium: 'medium', high: 'high', xhigh: 'high', max: 'high' } as const;

export interface ResponsesChat {
  request: ChatRequest;
  /** What each name the model may call stands for, to shape its calls back into items. */
  tools: ToolRegistry;
  omitted: OmittedTool[];
}

/** An MCP server's tools as listed (now or earlier in the conversation), to offer the model. */
export interface McpListing {
  declaration: McpToolDeclaration;
  tools: readonly McpListedTool[];
  /** The request's tool that names the server ('tools.2'). */
  param: string;
}

/** The chat request for this body, after the conversation's earlier items (`prefix`, from previous_response_id). */
export function toChatRequest(
  body: ResponseCreateBody,
  prefix: ResponseItem[],
  openReasoning: (sealed: string) => string | undefined = () => undefined,
  mcp: readonly McpListing[] = [],
): ResponsesChat {
  const registry = new ToolRegistry(body.tools ?? []);
  for (const listing of mcp) registry.addMcp(listing.declaration, listing.tools, listing.param);
  const messages = itemsToMessages([...prefix, ...inputItems(body)], { tools: registry, openReasoning }, prefix.length);
  if (body.instructions) messages.unshift({ role: 'system', content: body.instructions });
  const format = body.text?.format;
  const effort = body.reasoning?.effort;
  const { tools, toolChoice } = chosenTools(body, registry);
  return {
    request: {
      model: body.model,
      messages,
      maxTokens: body.max_output_tokens ?? undefined,
      temperature: body.temperature ?? undefined,
      topP: body.top_p ?? undefined,
      logitBias: tokenBias(body.logit_bias),
      logprobs: body.include?.includes('message.output_text.logprobs') ? (body.top_logprobs ?? 0) : undefined,
      presencePenalty: body.presence_penalty ?? undefined,
      frequencyPenalty: body.frequency_penalty ?? undefined,
      // effort 'none' is the thinking switch off; the others are chat's reasoning_effort.
      thinking: body.thinking_enabled ?? (effort === 'none' ? false : undefined),
      thinkingBudget: body.thinking_tokens ?? undefined,
      reasoningEffort: effort == null || effort === 'none' ? undefined : EFFORT[effort],
      responseFormat: format == null ? undefined : format.type === 'json_schema' ? { type: 'json_schema', schema: format.schema } : format,
      ...(tools.length ? { tools } : {}),
      toolChoice,
      parallelToolCalls: body.parallel_tool_calls ?? undefined,
      keepAliveMs: body.keep_alive,
    },
    tools: registry,
    omitted: registry.omitted,
  };
}

/** The tools offered and how the model must use them, from tool_choice. */
function chosenTools(body: ResponseCreateBody, registry: ToolRegistry): Pick<ChatRequest, 'tools' | 'toolChoice'> & { tools: NonNullable<ChatRequest['tools']> } {
  const tools = registry.chatTools();
  const choice = body.tool_choice;
  if (choice == null || choice === 'auto' || choice === 'none') return { tools, toolChoice: (choice ?? undefined) as ChatToolChoice | undefined };
  if (tools.length === 0) throw new UnsupportedError('tool_choice requires tools the model can call.', { param: 'tool_choice' });
  if (choice === 'required') return { tools, toolChoice: 'required' };
  if (choice.type === 'allowed_tools') {
    const allowed = new Set((choice.tools as Array<{ type: string; name?: string; namespace?: string }>).map((t) => visibleName(t.name ?? t.type, t.namespace)));
    const subset = tools.filter((tool) => allowed.has(tool.name));
    if (subset.length === 0) throw new InvalidRequestError('tool_choice.tools names none of the tools the model can call.', { param: 'tool_choice.tools' });
    return { tools: subset, toolChoice: choice.mode as ChatToolChoice };
  }
  if (choice.type === 'function' || choice.type === 'custom') {
    const name = visibleName(choice.name as string, choice.namespace as string | null | undefined);
    if (!tools.some((tool) => tool.name === name)) throw new InvalidRequestError(`tool_choice names '${name}', which is not one of the tools the model can call.`, { param: 'tool_choice.name' });
    return { tools, toolChoice: { name } };
  }
  if (choice.type === 'mcp' && typeof choice.server_label === 'string') {
    // One tool of an MCP server, or (no name) any of its tools.
    const names = typeof choice.name === 'string' ? [visibleName(choice.name, choice.server_label)] : tools.filter((t) => registry.byName.get(t.name)?.identity.namespace === choice.server_label && registry.byName.get(t.name)?.identity.kind === 'mcp').map((t) => t.name);
    const offered = names.filter((name) => tools.some((tool) => tool.name === name));
    if (offered.length === 0) throw new InvalidRequestError(`tool_choice names no tool that the MCP server '${choice.server_label}' offers the model.`, { param: 'tool_choice' });
    return offered.length === 1 ? { tools, toolChoice: { name: offered[0]! } } : { tools: tools.filter((t) => offered.includes(t.name)), toolChoice: 'required' };
  }
  throw new UnsupportedError(`tool_choice '${choice.type}' forces a tool this server does not run.`, { param: 'tool_choice' });
}
