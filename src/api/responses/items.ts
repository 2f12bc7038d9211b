import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { ChatMessage } from '../core/tasks/chat.js';
import { partsToContent, responsesImagePart } from './chat-media.js';

/**
 * The Responses API's conversation items, as clients send them in `input`
 * (and as output items are sent back): messages, tool calls and their
 * outputs, and reasoning. Fields of an output item that a client echoes back
 * (`id`, `status`, `annotations`, …) are accepted and ignored.
 */

const textPart = z.discriminatedUnion('type', [
  z.object({ type: z.literal('input_text'), text: z.string() }),
  z.object({ type: z.literal('output_text'), text: z.string() }),
  z.object({ type: z.literal('refusal'), refusal: z.string() }),
  responsesImagePart,
  // Until file input exists, a part that carries one is a 400 naming it, not dropped.
  z.object({ type: z.literal('input_file') }).refine(() => false, { message: 'file input is not supported', params: { code: 'unsupported_parameter' } }),
]);
const content = z.union([z.string(), z.array(textPart)]);
const toolOutput = z.union([z.string(), z.array(textPart)]);
const callId = z.string().min(1);

export const responseItem = z.discriminatedUnion('type', [
  z.object({ type: z.literal('message'), role: z.enum(['user', 'system', 'developer', 'assistant']), content, id: z.string().optional() }),
  z.object({ type: z.literal('function_call'), call_id: callId, name: z.string().min(1), arguments: z.string(), id: z.string().optional() }),
  z.object({ type: z.literal('function_call_output'), call_id: callId, output: toolOutput, id: z.string().optional() }),
  z.object({ type: z.literal('custom_tool_call'), call_id: callId, name: z.string().min(1), input: z.string(), id: z.string().optional() }),
  z.object({ type: z.literal('custom_tool_call_output'), call_id: callId, output: toolOutput, id: z.string().optional() }),
  z.object({
    type: z.literal('reasoning'),
    id: z.string().optional(),
    summary: z.array(z.object({ text: z.string() })).optional(),
    content: z.array(z.object({ text: z.string() })).nullish(),
  }),
]);
// A message item may also come without `type` (the "easy input message" OpenAI accepts).
export const inputItem = z.preprocess(
  (item) => (item !== null && typeof item === 'object' && !('type' in item) && 'role' in item ? { ...item, type: 'message' } : item),
  responseItem,
);
export type ResponseItem = z.output<typeof responseItem>;

/** The one string argument a custom tool (free-text input) takes as an engine function. */
export const CUSTOM_INPUT_PARAMETERS = { type: 'object', properties: { input: { type: 'string' } }, required: ['input'] };

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

/**
 * Items → chat messages. Tool calls join the assistant turn before them (one
 * turn may make several); a reasoning item is the reasoning of the assistant
 * turn that follows it. The first `earlier` items come from earlier
 * responses (previous_response_id): errors about them name that field, the
 * rest name their place in this request's `input`.
 */
export function itemsToMessages(items: readonly ResponseItem[], earlier = 0): ChatMessage[] {
  const messages: ChatMessage[] = [];
  let reasoning: string | undefined;
  const assistantTurn = (): ChatMessage => {
    const last = messages.at(-1);
    if (last?.role === 'assistant') return last;
    const turn: ChatMessage = { role: 'assistant', content: '', ...(reasoning ? { reasoning } : {}) };
    reasoning = undefined;
    messages.push(turn);
    return turn;
  };
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
        (turn.toolCalls ??= []).push({ id: item.call_id, name: item.name, arguments: args });
        break;
      }
      case 'function_call_output':
      case 'custom_tool_call_output':
        messages.push({ role: 'tool', content: text(item.output), toolCallId: item.call_id });
        break;
      case 'reasoning':
        reasoning = (item.content ?? []).map((c) => c.text).join('') || undefined;
        break;
    }
  });
  return messages;
}

const ID_PREFIX: Record<ResponseItem['type'], string> = {
  message: 'msg',
  function_call: 'fc',
  function_call_output: 'fco',
  custom_tool_call: 'ctc',
  custom_tool_call_output: 'ctco',
  reasoning: 'rs',
};

/** A new item id of OpenAI's form: `<prefix>_<hex>`. */
export function itemId(prefix: string): string {
  return `${prefix}_${randomUUID().replaceAll('-', '')}`;
}

/** An input item as stored and listed (input_items): with an id, and message content as parts. */
export function storedInputItem(item: ResponseItem): ResponseItem & { id: string } {
  const id = item.id ?? itemId(ID_PREFIX[item.type]);
  if (item.type === 'message' && typeof item.content === 'string') {
    const type = item.role === 'assistant' ? 'output_text' : 'input_text';
    return { ...item, id, content: [{ type, text: item.content }] };
  }
  return { ...item, id };
}
