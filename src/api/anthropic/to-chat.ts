import { InvalidRequestError, UnsupportedError } from '../../core/errors.js';
import type { ChatMessage, ChatRequest, ChatTool, ChatToolChoice } from '../../core/tasks/chat.js';
import { tokenBias } from '../chat.js';
import { partsToContent } from '../chat-media.js';
import type { OmittedTool } from '../hosted-tools.js';
import { toolDefinitionsText } from '../tool-definitions.js';
import type { AssistantBlock, CountTokensBody, CustomTool, MessageParam, MessagesBody, ToolResultBlock, UserBlock } from './schema.js';
import { CLIENT_TOOL_SCHEMAS } from './tool-types.js';

/**
 * An Anthropic Messages request → the one chat request every route shares.
 *
 * - `system` first, then each message where it stands: system turns in
 *   the middle of a conversation stay there (the template renders them in
 *   place); consecutive user turns join, as Anthropic combines them.
 * - tool_use blocks are the assistant turn's tool calls; tool_result blocks
 *   are tool messages (text, search results and text documents as text;
 *   is_error marked; images follow in a user turn of their own, as no
 *   template takes images in a tool result).
 * - thinking blocks give the assistant turn back its reasoning, read from
 *   the signature lserve sealed it into (`reasoning`), so the prompt is what
 *   the model generated and its cache still applies.
 * - Deferred tools (`defer_loading`) are offered only once a tool_reference
 *   in a tool result names them, and their definitions go where it stands.
 * - Server tools are left out (hosted-tools.ts) and reported in `omitted`.
 */

/** The thinking budget each effort gives (adaptive thinking); `max` has none. */
export const EFFORT_BUDGET = { low: 1024, medium: 4096, high: 16_384, xhigh: 32_768, max: undefined } as const;
type Effort = keyof typeof EFFORT_BUDGET;
const TEMPLATE_EFFORT = { low: 'low', medium: 'medium', high: 'high', xhigh: 'high', max: 'high' } as const;

/** What opens the signatures of thinking blocks lserve returned (src/core/sealed.ts). */
export interface ReasoningSeal {
  open(signature: string): string | undefined;
}

export interface AnthropicChat {
  request: ChatRequest;
  omitted: OmittedTool[];
  /** What the answer's thinking blocks show: the text, or nothing but the signature. */
  display: 'summarized' | 'omitted';
}

export function toChatRequest(body: MessagesBody, seal: ReasoningSeal): AnthropicChat {
  const { request, omitted, display } = translate(body, seal);
  return {
    request: {
      ...request,
      maxTokens: body.max_tokens,
      temperature: body.temperature,
      topP: body.top_p,
      topK: body.top_k,
      stop: body.stop_sequences,
      logitBias: tokenBias(body.logit_bias),
      presencePenalty: body.presence_penalty,
      frequencyPenalty: body.frequency_penalty,
      keepAliveMs: body.keep_alive,
    },
    omitted,
    display,
  };
}

/** count_tokens: the same prompt, without the generation settings. */
export function countTokensRequest(body: CountTokensBody, seal: ReasoningSeal): ChatRequest {
  return translate(body, seal).request;
}

function translate(body: MessagesBody | CountTokensBody, seal: ReasoningSeal): AnthropicChat {
  const omitted: OmittedTool[] = [];
  const declared = declaredTools(body, omitted);
  const referenced = new Set<string>();
  const calls = new Set<string>();
  const messages: ChatMessage[] = [];
  if (body.system !== undefined) messages.push({ role: 'system', content: blockText(body.system) });
  body.messages.forEach((message, index) => {
    const later = body.messages.slice(index + 1);
    appendMessage(messages, message, index, { seal, declared, referenced, calls, laterUser: later.some((m) => m.role === 'user') });
  });
  const tools = offeredTools(declared, referenced);
  const effort = effortOf(body);
  const thinking = body.thinking;
  const on = thinking?.type === 'enabled' || thinking?.type === 'adaptive';
  const display = (thinking?.type === 'enabled' || thinking?.type === 'adaptive') && thinking.display === 'omitted' ? 'omitted' : 'summarized';
  const format = body.output_config?.format ?? body.output_format;
  return {
    request: {
      model: body.model,
      messages,
      thinking: on,
      thinkingBudget: thinking?.type === 'enabled' ? thinking.budget_tokens : on ? EFFORT_BUDGET[effort ?? 'high'] : undefined,
      reasoningEffort: effort ? TEMPLATE_EFFORT[effort] : undefined,
      ...(tools.length ? { tools } : {}),
      ...toolChoiceOf(body, tools, declared),
      ...(format ? { responseFormat: { type: 'json_schema' as const, schema: format.schema } } : {}),
    },
    omitted,
    display,
  };
}

/** The request's effort: the last system turn's (a per-turn effort), else output_config's. */
function effortOf(body: MessagesBody | CountTokensBody): Effort | undefined {
  const perTurn = body.messages.findLast((m) => m.role === 'system' && m.output_config?.effort);
  return (perTurn?.role === 'system' ? perTurn.output_config?.effort : undefined) ?? body.output_config?.effort ?? undefined;
}

/** The tools the client declared that the model may be offered, by name; server tools and MCP servers go to `omitted`. */
function declaredTools(body: MessagesBody | CountTokensBody, omitted: OmittedTool[]): Map<string, ChatTool> {
  const declared = new Map<string, ChatTool>();
  const entries = body.tools ?? [];
  entries.forEach((entry, i) => {
    if (entry.kind === 'server') {
      omitted.push({ param: `tools.${i}`, type: entry.type });
      return;
    }
    const tool = entry.kind === 'custom' ? customTool(entry.tool) : { ...clientTool(entry.type), ...(entry.defer_loading ? { deferred: true } : {}) };
    if (declared.has(tool.name)) throw new InvalidRequestError(`tools: the name '${tool.name}' is declared twice.`, { param: `tools.${i}.name` });
    declared.set(tool.name, tool);
  });
  (body.mcp_servers ?? []).forEach((_, i) => omitted.push({ param: `mcp_servers.${i}`, type: 'mcp_servers' }));
  if (entries.length > 0 && entries.every((entry) => (entry.kind === 'server' ? false : declared.get(entry.kind === 'custom' ? entry.tool.name : entry.name)?.deferred))) {
    throw new InvalidRequestError('All tools have defer_loading set. At least one tool must be non-deferred.', { param: 'tools' });
  }
  return declared;
}

function customTool(tool: CustomTool): ChatTool {
  const examples = tool.input_examples?.length ? `\n\nExample inputs:\n${tool.input_examples.map((e) => JSON.stringify(e)).join('\n')}` : '';
  const description = `${tool.description ?? ''}${examples}`.trim();
  return {
    name: tool.name,
    ...(description ? { description } : {}),
    parameters: tool.input_schema,
    ...(tool.defer_loading ? { deferred: true } : {}),
  };
}

function clientTool(type: string): ChatTool {
  const schema = CLIENT_TOOL_SCHEMAS[type]!;
  return { name: schema.name, description: schema.description, parameters: schema.parameters };
}

/** Declared tools in order: every non-deferred one, and the deferred ones a tool_reference brought in. */
function offeredTools(declared: ReadonlyMap<string, ChatTool>, referenced: ReadonlySet<string>): ChatTool[] {
  return [...declared.values()].filter((tool) => !tool.deferred || referenced.has(tool.name));
}

function toolChoiceOf(body: MessagesBody | CountTokensBody, tools: readonly ChatTool[], declared: ReadonlyMap<string, ChatTool>): Pick<ChatRequest, 'toolChoice' | 'parallelToolCalls'> {
  const choice = body.tool_choice;
  if (!choice) return {};
  if (choice.type === 'none') return { toolChoice: 'none' };
  const parallel = choice.disable_parallel_tool_use ? { parallelToolCalls: false } : {};
  if (choice.type === 'auto') return { toolChoice: 'auto', ...parallel };
  if (tools.length === 0) throw new UnsupportedError(`tool_choice '${choice.type}' needs tools the model can call.`, { param: 'tool_choice' });
  if (choice.type === 'any') return { toolChoice: 'required', ...parallel };
  if (!tools.some((tool) => tool.name === choice.name)) {
    const why = declared.has(choice.name) ? 'is deferred and no tool_reference has loaded it' : 'is not one of the tools the model can call';
    throw new InvalidRequestError(`tool_choice names '${choice.name}', which ${why}.`, { param: 'tool_choice.name' });
  }
  return { toolChoice: { name: choice.name } satisfies ChatToolChoice, ...parallel };
}

interface Context {
  seal: ReasoningSeal;
  /** The ids of the tool uses made so far (a tool_result must answer one). */
  calls: Set<string>;
  declared: ReadonlyMap<string, ChatTool>;
  /** Deferred tools named by a tool_reference so far (filled as the messages are read). */
  referenced: Set<string>;
  /** Whether a user message comes after this one (a system turn with clear_at 'next_user_message' is then hidden). */
  laterUser: boolean;
}

function appendMessage(messages: ChatMessage[], message: MessageParam, index: number, context: Context): void {
  const param = `messages.${index}.content`;
  if (message.role === 'system') {
    if (message.clear_at === 'next_user_message' && context.laterUser) return;
    messages.push({ role: 'system', content: blockText(message.content ?? '') });
    return;
  }
  if (message.role === 'assistant') {
    appendAssistant(messages, typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : message.content, index, context);
    return;
  }
  if (typeof message.content === 'string') {
    appendUser(messages, { role: 'user', content: message.content });
    return;
  }
  const rest: Array<{ block: Exclude<UserBlock, { type: 'tool_result' }>; param: string }> = [];
  const toolImages: Array<{ block: Extract<UserBlock, { type: 'image' }>; param: string }> = [];
  message.content.forEach((block, i) => {
    if (block.type !== 'tool_result') {
      rest.push({ block, param: `${param}.${i}` });
      return;
    }
    if (!context.calls.has(block.tool_use_id)) {
      throw new InvalidRequestError(`messages.${index}.content.${i}: tool_use_id '${block.tool_use_id}' answers no tool_use block of an earlier assistant turn.`, { param: `${param}.${i}.tool_use_id` });
    }
    messages.push({ role: 'tool', toolCallId: block.tool_use_id, content: toolResultText(block, `${param}.${i}`, context, toolImages) });
  });
  // Images a tool returned come first, in the user turn after the results; then the turn's own blocks, text a line apart.
  const blocks = [...toolImages, ...rest].map(({ block }) => block);
  const parts = blocks.flatMap((block, i): Array<{ type: string; text?: string }> => {
    if (block.type === 'image') return [block];
    const separate = i > 0 && blocks[i - 1]!.type !== 'image';
    return [...(separate ? [{ type: 'text', text: '\n' }] : []), { type: 'text', text: userBlockText(block) }];
  });
  const turn = partsToContent(parts, param);
  const images = [...toolImages, ...rest].filter(({ block }) => block.type === 'image');
  turn.media.forEach((media, i) => (media.param = images[i]!.param));
  if (turn.content === '' && turn.media.length === 0) return;
  appendUser(messages, { role: 'user', content: turn.content, ...(turn.media.length ? { media: turn.media } : {}) });
}

/** A user turn right after another joins it (Anthropic combines consecutive user turns). */
function appendUser(messages: ChatMessage[], turn: ChatMessage): void {
  const last = messages.at(-1);
  if (last?.role !== 'user') {
    messages.push(turn);
    return;
  }
  last.content = `${last.content}\n\n${turn.content}`;
  if (turn.media?.length) last.media = [...(last.media ?? []), ...turn.media];
}

function appendAssistant(messages: ChatMessage[], blocks: readonly AssistantBlock[], index: number, context: Context): void {
  let turn = messages.at(-1);
  if (turn?.role !== 'assistant') {
    turn = { role: 'assistant', content: '' };
    messages.push(turn);
  }
  blocks.forEach((block, i) => {
    switch (block.type) {
      case 'text':
        turn.content += block.text;
        break;
      case 'thinking': {
        const reasoning = context.seal.open(block.signature) ?? block.thinking;
        if (reasoning) turn.reasoning = `${turn.reasoning ?? ''}${reasoning}`;
        break;
      }
      case 'tool_use':
        (turn.toolCalls ??= []).push({ id: block.id, name: block.name, arguments: JSON.stringify(block.input) });
        context.calls.add(block.id);
        break;
      case 'tool_search_tool_result':
        // A tool search another server ran: the tools it found are offered from here on.
        if (block.content.type === 'tool_search_tool_search_result') {
          for (const reference of block.content.tool_references) referenceTool(reference.tool_name, `messages.${index}.content.${i}`, context);
        }
        break;
      default:
        // Redacted thinking and the blocks of server tools lserve did not run: nothing the model can read.
        break;
    }
  });
}

/** Records a tool_reference, which must name a declared tool. */
function referenceTool(name: string, param: string, context: Context): ChatTool {
  const tool = context.declared.get(name);
  if (!tool) throw new InvalidRequestError(`Tool reference '${name}' has no corresponding tool definition.`, { param });
  context.referenced.add(name);
  return tool;
}

/** A tool result's content as text; its images are set aside for the user turn after it. */
function toolResultText(block: ToolResultBlock, param: string, context: Context, images: Array<{ block: Extract<UserBlock, { type: 'image' }>; param: string }>): string {
  const content = block.content ?? '';
  let text: string;
  if (typeof content === 'string') {
    text = content;
  } else {
    const parts: string[] = [];
    const loaded: ChatTool[] = [];
    content.forEach((part, i) => {
      if (part.type === 'tool_reference') {
        const tool = referenceTool(part.tool_name, `${param}.content.${i}`, context);
        if (tool.deferred) loaded.push(tool);
      } else if (part.type === 'image') {
        images.push({ block: part, param: `${param}.content.${i}` });
      } else {
        parts.push(userBlockText(part));
      }
    });
    if (loaded.length) parts.push(toolDefinitionsText(loaded));
    text = parts.join('\n\n');
  }
  return block.is_error ? JSON.stringify({ error: text }) : text;
}

/** A block the model reads as text: text, a text document, a search result. */
function userBlockText(block: Exclude<UserBlock, { type: 'tool_result' | 'image' }>): string {
  switch (block.type) {
    case 'text':
      return block.text;
    case 'search_result':
      return `Search result: ${block.title} (${block.source})\n${blockText(block.content)}`;
    case 'document': {
      const source = block.source as { type: 'text'; data: string } | { type: 'content'; content: string | Array<{ text: string }> };
      const body = source.type === 'text' ? source.data : blockText(source.content);
      const head = [block.title, block.context].filter(Boolean).join('\n');
      return head ? `${head}\n\n${body}` : body;
    }
    default:
      return '';
  }
}

function blockText(value: string | ReadonlyArray<{ text: string }>): string {
  return typeof value === 'string' ? value : value.map((block) => block.text).join('\n\n');
}
