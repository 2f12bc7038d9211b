import { z } from 'zod';
import { logitBias, MAX_CHAT_MESSAGES, MAX_OUTPUT_TOKENS, MAX_TOOLS, stopList } from '../chat.js';
import { anthropicImageBlock } from '../chat-media.js';
import { keepAliveField, stringOr } from '../common.js';
import { assertFieldsListed, parseKnownFields } from '../validate.js';
import { COUNT_TOKENS_FIELDS, EXTENSION_FIELDS, MESSAGE_FIELDS } from './fields.js';
import { CLIENT_TOOL_SCHEMAS, isServerTool, UNSUPPORTED_CLIENT_TOOLS } from './tool-types.js';

/**
 * POST /v1/messages (and /v1/messages/count_tokens): the request as
 * Anthropic's API reference has it (fields.ts lists every field and what is
 * done with it). Content blocks a client echoes back from an earlier
 * response (thinking with its signature, server tool blocks) are accepted;
 * what they mean for the prompt is to-chat.ts's business.
 */

const loose = z.unknown().optional();

const refused = (message: string) => z.unknown().refine(() => false, { message, params: { code: 'unsupported_parameter' } });

export const textBlock = z.object({ type: z.literal('text'), text: z.string(), cache_control: loose, citations: loose });

const searchResultBlock = z.object({
  type: z.literal('search_result'),
  source: z.string(),
  title: z.string(),
  content: z.array(textBlock),
  citations: loose,
  cache_control: loose,
});

/** A document whose text the model can read; PDFs, URLs and file ids are refused (no document reader here). */
const documentBlock = z.object({
  type: z.literal('document'),
  source: z.discriminatedUnion(
    'type',
    [
      z.object({ type: z.literal('text'), media_type: z.literal('text/plain').optional(), data: z.string() }),
      z.object({ type: z.literal('content'), content: z.union([z.string(), z.array(textBlock)]) }),
      z.object({ type: z.enum(['base64', 'url', 'file']) }).refine(() => false, {
        message: 'only text documents are read here (source type text or content): PDFs, URLs and file ids are not supported',
        params: { code: 'unsupported_parameter' },
      }),
    ],
    { error: "document source type must be 'text' or 'content'" },
  ),
  title: z.string().nullish(),
  context: z.string().nullish(),
  citations: loose,
  cache_control: loose,
});

export const toolReferenceBlock = z.object({ type: z.literal('tool_reference'), tool_name: z.string().min(1), cache_control: loose });

const toolResultBlock = z.object({
  type: z.literal('tool_result'),
  tool_use_id: z.string().min(1),
  content: stringOr(
    z.array(
      z.discriminatedUnion('type', [textBlock, anthropicImageBlock, searchResultBlock, documentBlock, toolReferenceBlock], {
        error: "tool_result content blocks are 'text', 'image', 'search_result', 'document' or 'tool_reference'",
      }),
    ),
  ).optional(),
  is_error: z.boolean().optional(),
  cache_control: loose,
  toolset_name: z.string().nullish(),
});

const toolUseBlock = z.object({
  type: z.literal('tool_use'),
  id: z.string().min(1),
  name: z.string().min(1),
  input: z.record(z.string(), z.unknown()),
  cache_control: loose,
  caller: loose,
  toolset_name: z.string().nullish(),
});

const thinkingBlock = z.object({ type: z.literal('thinking'), thinking: z.string(), signature: z.string() });
const redactedThinkingBlock = z.object({ type: z.literal('redacted_thinking'), data: z.string() });

/** A server tool's call that an earlier response made (the tool search lserve runs, or a cloud server's web search). */
const serverToolUseBlock = z.object({ type: z.literal('server_tool_use'), id: z.string().min(1), name: z.string().min(1), input: loose, cache_control: loose, caller: loose });
export const toolSearchResultBlock = z.object({
  type: z.literal('tool_search_tool_result'),
  tool_use_id: z.string().min(1),
  content: z.union([
    z.object({ type: z.literal('tool_search_tool_search_result'), tool_references: z.array(toolReferenceBlock) }),
    z.object({ type: z.literal('tool_search_tool_result_error'), error_code: z.string(), error_message: z.string().nullish() }),
  ]),
  cache_control: loose,
  caller: loose,
});
/** Results of server tools that lserve never ran (a conversation begun on another server): kept out of the prompt. */
const foreignServerBlock = z.looseObject({
  type: z.enum([
    'web_search_tool_result',
    'web_fetch_tool_result',
    'code_execution_tool_result',
    'bash_code_execution_tool_result',
    'text_editor_code_execution_tool_result',
    'mcp_tool_use',
    'mcp_tool_result',
    'advisor_tool_result',
    'compaction',
    'fallback',
  ]),
});

const containerUpload = z.object({ type: z.literal('container_upload') }).refine(() => false, { message: 'container uploads need code execution, which is not run here', params: { code: 'unsupported_parameter' } });

const userBlock = z.discriminatedUnion('type', [textBlock, anthropicImageBlock, documentBlock, searchResultBlock, toolResultBlock, containerUpload], {
  error: "user content blocks are 'text', 'image', 'document', 'search_result' or 'tool_result'",
});
const assistantBlock = z.discriminatedUnion('type', [textBlock, thinkingBlock, redactedThinkingBlock, toolUseBlock, serverToolUseBlock, toolSearchResultBlock, foreignServerBlock], {
  error: "assistant content blocks are 'text', 'thinking', 'redacted_thinking', 'tool_use' or a server tool's blocks",
});

const systemMessage = z.object({
  role: z.literal('system'),
  content: stringOr(z.array(textBlock)).optional(),
  // Beta: shown until the next user message, and a per-turn effort.
  clear_at: z.enum(['next_user_message', 'never']).nullish(),
  output_config: z.object({ effort: z.enum(['low', 'medium', 'high', 'xhigh', 'max']).nullish() }).nullish(),
});

export const messageParam = z.discriminatedUnion(
  'role',
  [
    z.object({ role: z.literal('user'), content: stringOr(z.array(userBlock).min(1, 'must contain at least one block')) }),
    z.object({ role: z.literal('assistant'), content: stringOr(z.array(assistantBlock)) }),
    systemMessage,
  ],
  { error: "role must be 'user', 'assistant' or 'system'" },
);
export type MessageParam = z.output<typeof messageParam>;
export type UserBlock = z.output<typeof userBlock>;
export type AssistantBlock = z.output<typeof assistantBlock>;
export type ToolResultBlock = z.output<typeof toolResultBlock>;

/** A tool's name as Anthropic allows it. */
const toolName = z.string().regex(/^[a-zA-Z0-9_-]{1,128}$/, 'must be 1-128 letters, digits, _ or -');

const customTool = z.object({
  type: z.literal('custom').nullish(),
  name: toolName,
  description: z.string().optional(),
  input_schema: z.looseObject({ type: z.literal('object', "input_schema.type must be 'object'") }),
  cache_control: loose,
  strict: z.boolean().optional(),
  defer_loading: z.boolean().optional(),
  input_examples: z.array(z.record(z.string(), z.unknown())).max(16, 'must contain at most 16 examples').optional(),
  // Programmatic calling from code execution, and streaming of partial inputs: nothing to change here.
  allowed_callers: loose,
  eager_input_streaming: z.boolean().nullish(),
});
export type CustomTool = z.output<typeof customTool>;

/** A server tool (run by Anthropic's servers): its settings are not read, only that it was asked for. */
const serverTool = z.looseObject({ type: z.string(), name: z.string().optional() });

export type AnthropicTool =
  | { kind: 'custom'; tool: CustomTool }
  | { kind: 'client'; type: string; name: string; defer_loading?: boolean }
  | { kind: 'server'; type: string; name: string };

/** One entry of `tools`, by its type: a custom tool, a client tool Anthropic defines (bash, text editor, memory), or a server tool. */
const toolEntry = z.unknown().transform((value, ctx): AnthropicTool => {
  const type = value !== null && typeof value === 'object' && typeof (value as { type?: unknown }).type === 'string' ? (value as { type: string }).type : 'custom';
  const forward = (issues: z.core.$ZodIssue[]) => {
    for (const issue of issues) ctx.addIssue(issue as Parameters<typeof ctx.addIssue>[0]);
    return z.NEVER;
  };
  if (type === 'custom') {
    const parsed = customTool.safeParse(value);
    return parsed.success ? { kind: 'custom', tool: parsed.data } : forward(parsed.error.issues);
  }
  const client = CLIENT_TOOL_SCHEMAS[type];
  if (client) {
    const parsed = z.looseObject({ type: z.string(), name: z.literal(client.name, `must be '${client.name}' for a ${type} tool`), defer_loading: z.boolean().optional() }).safeParse(value);
    return parsed.success ? { kind: 'client', type, name: client.name, defer_loading: parsed.data.defer_loading } : forward(parsed.error.issues);
  }
  if (UNSUPPORTED_CLIENT_TOOLS.some((prefix) => type.startsWith(prefix))) {
    ctx.addIssue({ code: 'custom', message: `'${type}' tools are not supported here: declare the actions you need as custom tools`, path: ['type'], params: { code: 'unsupported_parameter' } });
    return z.NEVER;
  }
  if (isServerTool(type)) {
    const parsed = serverTool.safeParse(value);
    return parsed.success ? { kind: 'server', type, name: parsed.data.name ?? type } : forward(parsed.error.issues);
  }
  ctx.addIssue({ code: 'custom', message: `unknown tool type '${type}'`, path: ['type'], params: { code: 'unsupported_parameter' } });
  return z.NEVER;
});

const disableParallel = { disable_parallel_tool_use: z.boolean().optional() };
const toolChoice = z.discriminatedUnion(
  'type',
  [
    z.object({ type: z.literal('auto'), ...disableParallel }),
    z.object({ type: z.literal('any'), ...disableParallel }),
    z.object({ type: z.literal('tool'), name: z.string().min(1), ...disableParallel }),
    z.object({ type: z.literal('none') }),
  ],
  { error: "tool_choice type must be 'auto', 'any', 'tool' or 'none'" },
);

const display = z.enum(['summarized', 'omitted', 'updates']).nullish();
const budget = z.int().min(0).max(MAX_OUTPUT_TOKENS, `must be at most ${MAX_OUTPUT_TOKENS}`);
const thinking = z.discriminatedUnion(
  'type',
  [
    z.object({ type: z.literal('enabled'), budget_tokens: budget, display, block_binding: loose }),
    z.object({ type: z.literal('adaptive'), display, block_binding: loose }),
    z.object({ type: z.literal('disabled') }),
    // Thinking off; the short notes a model writes between tool calls would come back as thinking.
    z.object({ type: z.literal('between_tools') }),
  ],
  { error: "thinking type must be 'enabled', 'adaptive', 'disabled' or 'between_tools'" },
);

export const EFFORTS = ['low', 'medium', 'high', 'xhigh', 'max'] as const;
const jsonSchemaFormat = z.object({ type: z.literal('json_schema'), schema: z.record(z.string(), z.unknown()) });
const outputConfig = z.object({
  effort: z.enum(EFFORTS).nullish(),
  format: jsonSchemaFormat.nullish(),
  // Beta: a budget across an agentic loop's requests, which the client keeps; one request here has max_tokens.
  task_budget: loose,
});

const inputTokens = z.object({ type: z.literal('input_tokens'), value: z.int().min(0) });
const contextManagement = z.object({
  edits: z
    .array(
      z.discriminatedUnion(
        'type',
        [
          z.object({
            type: z.literal('clear_tool_uses_20250919'),
            trigger: z.discriminatedUnion('type', [inputTokens, z.object({ type: z.literal('tool_uses'), value: z.int().min(0) })]).nullish(),
            keep: z.object({ type: z.literal('tool_uses'), value: z.int().min(0) }).nullish(),
            clear_at_least: inputTokens.nullish(),
            exclude_tools: z.array(z.string()).nullish(),
            clear_tool_inputs: z.union([z.boolean(), z.array(z.string())]).nullish(),
          }),
          z.object({
            type: z.literal('clear_thinking_20251015'),
            keep: z.union([z.literal('all'), z.object({ type: z.literal('all') }), z.object({ type: z.literal('thinking_turns'), value: z.int().min(0) })]).nullish(),
          }),
          z.object({ type: z.literal('compact_20260112') }).refine(() => false, {
            message: 'compaction (summarizing the conversation) is not done here: use clear_tool_uses_20250919 or clear_thinking_20251015',
            params: { code: 'unsupported_parameter' },
          }),
        ],
        { error: "edit type must be 'clear_tool_uses_20250919' or 'clear_thinking_20251015'" },
      ),
    )
    .max(8, 'must contain at most 8 edits')
    .nullish(),
});
export type ContextManagement = z.output<typeof contextManagement>;

const systemField = stringOr(z.array(textBlock));

/** Fields both routes share; the lists in fields.ts decide which each accepts. */
const shared = {
  model: z.string().min(1),
  messages: z.array(messageParam).min(1, 'must contain at least one message').max(MAX_CHAT_MESSAGES, `must contain at most ${MAX_CHAT_MESSAGES} messages`),
  system: systemField.optional(),
  thinking: thinking.optional(),
  tools: z.array(toolEntry).max(MAX_TOOLS, `must contain at most ${MAX_TOOLS} tools`).optional(),
  tool_choice: toolChoice.optional(),
  output_config: outputConfig.nullish(),
  output_format: jsonSchemaFormat.nullish(),
  context_management: contextManagement.nullish(),
  mcp_servers: z.array(z.looseObject({ type: z.literal('url'), name: z.string(), url: z.string() })).nullish(),
};

const ignored = {
  cache_control: loose,
  metadata: z.looseObject({ user_id: z.string().nullish() }).nullish(),
  service_tier: loose,
  speed: loose,
  inference_geo: loose,
  diagnostics: loose,
  container: loose,
  fallbacks: loose,
  fallback_credit_token: loose,
  billing_policy: loose,
};

export const messagesSchema = z.object({
  ...shared,
  ...ignored,
  // 0 fills the prompt cache and generates nothing (Anthropic's cache warming).
  max_tokens: z.int().min(0).max(MAX_OUTPUT_TOKENS, `must be at most ${MAX_OUTPUT_TOKENS}`),
  stop_sequences: stopList.optional(),
  stream: z.boolean().optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().gt(0).max(1).optional(),
  top_k: z.int().min(0).optional(),
  compaction: refused('compaction requests (summarizing the conversation) are not served here').nullish(),
  thread: refused('server-held threads are not kept here: send the whole conversation').nullish(),
  logit_bias: logitBias.optional(),
  presence_penalty: z.number().min(-2).max(2).optional(),
  frequency_penalty: z.number().min(-2).max(2).optional(),
  keep_alive: keepAliveField,
});
export type MessagesBody = z.output<typeof messagesSchema>;

export const countTokensSchema = z.object({
  ...shared,
  cache_control: loose,
  speed: loose,
  billing_policy: loose,
  compaction: loose,
});
export type CountTokensBody = z.output<typeof countTokensSchema>;

assertFieldsListed(messagesSchema, { ...MESSAGE_FIELDS, ...EXTENSION_FIELDS }, 'Anthropic messages');
assertFieldsListed(countTokensSchema, COUNT_TOKENS_FIELDS, 'Anthropic count_tokens');

export function parseMessages(body: unknown): MessagesBody {
  return parseKnownFields(messagesSchema, body);
}

export function parseCountTokens(body: unknown): CountTokensBody {
  return parseKnownFields(countTokensSchema, body);
}
