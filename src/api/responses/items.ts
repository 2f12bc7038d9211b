import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { InvalidRequestError } from '../../core/errors.js';
import type { ChatMessage } from '../../core/tasks/chat.js';
import { MAX_TOOLS } from '../chat.js';
import { partsToContent, responsesImagePart } from '../chat-media.js';
import { toolDefinitionsText } from '../tool-definitions.js';
import { declaredTool, visibleName, type ToolRegistry } from './tools.js';

/**
 * The Responses API's conversation items, as clients send them in `input`
 * (and as output items are sent back): messages, tool calls and their
 * outputs, reasoning, tool search results, and the items of hosted tools a
 * conversation begun elsewhere may hold. Fields of an output item that a
 * client echoes back (`id`, `status`, `annotations`, `phase`, …) are
 * accepted and ignored.
 */

const loose = z.unknown().optional();

const textPart = z.discriminatedUnion('type', [
  z.object({ type: z.literal('input_text'), text: z.string(), prompt_cache_breakpoint: loose }),
  z.object({ type: z.literal('output_text'), text: z.string(), annotations: loose, logprobs: loose }),
  z.object({ type: z.literal('refusal'), refusal: z.string() }),
  responsesImagePart,
  // Until file input exists, a part that carries one is a 400 naming it, not dropped.
  z.object({ type: z.literal('input_file') }).refine(() => false, { message: 'file input is not supported', params: { code: 'unsupported_parameter' } }),
]);
const content = z.union([z.string(), z.array(textPart)]);
const toolOutput = z.union([z.string(), z.array(textPart)]);
const callId = z.string().min(1);
const echoed = { id: z.string().optional(), status: loose, caller: loose };

/** Items of tools lserve does not run (a conversation begun on OpenAI's servers): accepted, kept out of the prompt. */
export const HOSTED_ITEMS = [
  'web_search_call',
  'file_search_call',
  'computer_call',
  'computer_call_output',
  'code_interpreter_call',
  'image_generation_call',
  'local_shell_call',
  'local_shell_call_output',
  'shell_call',
  'shell_call_output',
  'apply_patch_call',
  'apply_patch_call_output',
  'compaction',
  'program',
  'program_output',
] as const;

const refusedItem = <T extends string>(type: T, message: string) => z.object({ type: z.literal(type) }).refine(() => false, { message, path: ['type'], params: { code: 'unsupported_parameter' } });

export const responseItem = z.discriminatedUnion('type', [
  z.object({ type: z.literal('message'), role: z.enum(['user', 'system', 'developer', 'assistant']), content, phase: loose, ...echoed }),
  z.object({ type: z.literal('function_call'), call_id: callId, name: z.string().min(1), arguments: z.string(), namespace: z.string().nullish(), ...echoed }),
  z.object({ type: z.literal('function_call_output'), call_id: callId, output: toolOutput, name: z.string().nullish(), namespace: z.string().nullish(), ...echoed }),
  z.object({ type: z.literal('custom_tool_call'), call_id: callId, name: z.string().min(1), input: z.string(), namespace: z.string().nullish(), ...echoed }),
  z.object({ type: z.literal('custom_tool_call_output'), call_id: callId, output: toolOutput, ...echoed }),
  z.object({
    type: z.literal('reasoning'),
    summary: z.array(z.object({ type: z.string().optional(), text: z.string() })).optional(),
    content: z.array(z.object({ type: z.string().optional(), text: z.string() })).nullish(),
    // What lserve sealed the reasoning into (include: reasoning.encrypted_content): the reasoning comes back from it.
    encrypted_content: z.string().nullish(),
    ...echoed,
  }),
  z.object({ type: z.literal('tool_search_call'), arguments: z.unknown(), call_id: z.string().nullish(), execution: loose, ...echoed }),
  z.object({ type: z.literal('tool_search_output'), tools: z.array(declaredTool).max(MAX_TOOLS), call_id: z.string().nullish(), execution: loose, ...echoed }),
  z.object({ type: z.literal('additional_tools'), role: z.literal('developer'), tools: z.array(declaredTool).max(MAX_TOOLS), ...echoed }),
  // Remote MCP (tools.ts `mcp`): the listing, the calls the server ran, and the approvals a call waits for.
  z.object({
    type: z.literal('mcp_list_tools'),
    server_label: z.string(),
    tools: z.array(z.object({ name: z.string(), input_schema: z.unknown(), description: z.string().nullish(), annotations: z.unknown().optional() })).max(1024),
    error: z.string().nullish(),
    ...echoed,
  }),
  z.object({
    type: z.literal('mcp_call'),
    server_label: z.string(),
    name: z.string(),
    arguments: z.string(),
    output: z.string().nullish(),
    error: z.string().nullish(),
    approval_request_id: z.string().nullish(),
    ...echoed,
  }),
  z.object({ type: z.literal('mcp_approval_request'), id: z.string().min(1), server_label: z.string(), name: z.string(), arguments: z.string(), status: loose, caller: loose }),
  z.object({ type: z.literal('mcp_approval_response'), approval_request_id: z.string().min(1), approve: z.boolean(), reason: z.string().nullish(), id: z.string().nullish(), status: loose, caller: loose }),
  z.looseObject({ type: z.enum(HOSTED_ITEMS) }),
  refusedItem('item_reference', 'item references are not resolved here: send the item itself'),
  refusedItem('compaction_trigger', 'compaction (summarizing the conversation) is not done here'),
]);
// A message item may also come without `type` (the "easy input message" OpenAI accepts).
export const inputItem = z.preprocess(
  (item) => (item !== null && typeof item === 'object' && !('type' in item) && 'role' in item ? { ...item, type: 'message' } : item),
  responseItem,
);
export type ResponseItem = z.output<typeof responseItem>;

function text(value: z.output<typeof content>): string {
  if (typeof value === 'string') return value;
  return value.map((part) => (part.type === 'refusal' ? part.refusal : 'text' in part ? part.text : '')).join('');
}

/** A user or system message's text, with a marker for each input_image (api/chat-media.ts). */
function userText(value: z.output<typeof content>, param: string): Pick<ChatMessage, 'content' | 'media'> {
  if (typeof value === 'string') return partsToContent(value, param);
  const parts = value.map((part) => (part.type === 'refusal' ? { type: 'input_text', text: part.refusal } : part));
  const { content, media } = partsToContent(parts, param);
  return media.length ? { content, media } : { content };
}

export interface ItemContext {
  /** The request's tools, which tool search results add to. */
  tools: ToolRegistry;
  /** Opens the reasoning sealed into encrypted_content (core/sealed.ts). */
  openReasoning: (sealed: string) => string | undefined;
}

/**
 * Items → chat messages. Tool calls join the assistant turn before them (one
 * turn may make several), by the name the model calls them (namespaces
 * joined: tools.ts); a reasoning item is the reasoning of the assistant
 * turn that follows it; a tool search's results bring their tools in where
 * they stand. The first `earlier` items come from earlier responses
 * (previous_response_id): errors about them name that field, the rest name
 * their place in this request's `input`.
 */
export function itemsToMessages(items: readonly ResponseItem[], context: ItemContext, earlier = 0): ChatMessage[] {
  const messages: ChatMessage[] = [];
  let reasoning: string | undefined;
  let searchCall: string | undefined;
  const calls = new Set<string>();
  const assistantTurn = (): ChatMessage => {
    const last = messages.at(-1);
    if (last?.role === 'assistant') return last;
    const turn: ChatMessage = { role: 'assistant', content: '', ...(reasoning ? { reasoning } : {}) };
    reasoning = undefined;
    messages.push(turn);
    return turn;
  };
  const param = (index: number) => (index < earlier ? 'previous_response_id' : `input.${index - earlier}`);
  items.forEach((item, index) => {
    switch (item.type) {
      case 'message':
        if (item.role === 'assistant') {
          const turn = assistantTurn();
          turn.content += text(item.content);
        } else if (item.role === 'user') {
          messages.push({ role: 'user', ...userText(item.content, `input.${index - earlier}.content`) });
          // An earlier response's image is named by the field that brought it back.
          if (index < earlier) for (const media of messages.at(-1)!.media ?? []) media.param = 'previous_response_id';
        } else {
          messages.push({ role: 'system', content: text(item.content) });
        }
        break;
      case 'function_call':
      case 'custom_tool_call': {
        const turn = assistantTurn();
        const args = item.type === 'function_call' ? item.arguments : JSON.stringify({ input: item.input });
        (turn.toolCalls ??= []).push({ id: item.call_id, name: visibleName(item.name, item.namespace), arguments: args });
        calls.add(item.call_id);
        break;
      }
      case 'function_call_output':
      case 'custom_tool_call_output':
        if (!calls.has(item.call_id)) throw new InvalidRequestError(`No tool call found for the output with call_id '${item.call_id}'.`, { param: `${param(index)}.call_id` });
        messages.push({ role: 'tool', content: text(item.output), toolCallId: item.call_id });
        break;
      case 'tool_search_call': {
        searchCall = item.call_id ?? itemId('call');
        (assistantTurn().toolCalls ??= []).push({ id: searchCall, name: 'tool_search', arguments: JSON.stringify(item.arguments ?? {}) });
        break;
      }
      case 'tool_search_output': {
        const found = context.tools.bringIn(item.tools, `${param(index)}.tools`);
        const toolCallId = item.call_id ?? searchCall;
        const content = found.length ? toolDefinitionsText(found) : 'No new tools were found.';
        if (toolCallId) messages.push({ role: 'tool', toolCallId, content });
        else messages.push({ role: 'system', content });
        break;
      }
      case 'additional_tools': {
        const found = context.tools.bringIn(item.tools, `${param(index)}.tools`);
        if (found.length) messages.push({ role: 'system', content: toolDefinitionsText(found) });
        break;
      }
      case 'mcp_call': {
        // A call the server ran: the model sees it as its own tool call and the tool's answer.
        const callId = item.id ?? itemId('mcp');
        (assistantTurn().toolCalls ??= []).push({ id: callId, name: visibleName(item.name, item.server_label), arguments: item.arguments });
        messages.push({ role: 'tool', toolCallId: callId, content: item.error != null ? `Error: ${item.error}` : (item.output ?? '') });
        break;
      }
      case 'reasoning': {
        const sealed = item.encrypted_content ? context.openReasoning(item.encrypted_content) : undefined;
        reasoning = sealed ?? ((item.content ?? []).map((c) => c.text).join('') || undefined);
        break;
      }
      default:
        // A hosted tool's call or result: nothing lserve ran or the model can be shown.
        break;
    }
  });
  return messages;
}

const ID_PREFIX: Partial<Record<ResponseItem['type'], string>> = {
  message: 'msg',
  function_call: 'fc',
  function_call_output: 'fco',
  custom_tool_call: 'ctc',
  custom_tool_call_output: 'ctco',
  reasoning: 'rs',
  tool_search_call: 'tsc',
  tool_search_output: 'tso',
  additional_tools: 'at',
  mcp_list_tools: 'mcpl',
  mcp_call: 'mcp',
  mcp_approval_request: 'mcpr',
  mcp_approval_response: 'mcpa',
};

/** A new item id of OpenAI's form: `<prefix>_<hex>`. */
export function itemId(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '')}`;
}

/** An input item as stored and listed (input_items): with an id, and message content as parts. */
export function storedInputItem(item: ResponseItem): ResponseItem & { id: string } {
  const id = ('id' in item && typeof item.id === 'string' ? item.id : undefined) ?? itemId(ID_PREFIX[item.type] ?? 'item');
  if (item.type === 'message' && typeof item.content === 'string') {
    const type = item.role === 'assistant' ? 'output_text' : 'input_text';
    return { ...item, id, content: [{ type, text: item.content }] };
  }
  return { ...item, id };
}
