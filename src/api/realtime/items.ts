import { z } from 'zod';
import { MAX_CHAT_MESSAGES, toolName } from '../chat.js';
import { base64Audio, itemId, text } from './fields.js';
import { newId } from './ids.js';
import type { Dialect } from './types.js';

/**
 * A Realtime conversation's items as lserve holds them, whichever dialect
 * created them: messages (system / user / assistant, each with its kinds of
 * content), function calls and their outputs. GA names the parts; the beta's
 * assistant `text` / `audio` are read as `output_text` / `output_audio`, and
 * rendered back in the client's dialect (server-events.ts).
 */

export interface InputTextPart {
  type: 'input_text';
  text: string;
}
/** The user's audio: base64 in the session's input format. A turn the server committed also has its transcript once transcribed. */
export interface InputAudioPart {
  type: 'input_audio';
  audio?: string;
  transcript?: string;
}
export interface OutputTextPart {
  type: 'output_text';
  text: string;
}
/** Spoken output: base64 in the session's output format (when kept), and what was said. */
export interface OutputAudioPart {
  type: 'output_audio';
  audio?: string;
  transcript?: string;
}
export type ContentPart = InputTextPart | InputAudioPart | OutputTextPart | OutputAudioPart;

export type ItemStatus = 'completed' | 'incomplete' | 'in_progress';

interface ItemBase {
  /** The client's id when it picked one; the session assigns one otherwise. */
  id?: string;
  /** The server's: an item the client creates is complete; a response's items are in progress until it ends. */
  status?: ItemStatus;
}
export interface SystemMessageItem extends ItemBase {
  type: 'message';
  role: 'system';
  content: InputTextPart[];
}
export interface UserMessageItem extends ItemBase {
  type: 'message';
  role: 'user';
  content: Array<InputTextPart | InputAudioPart>;
}
export interface AssistantMessageItem extends ItemBase {
  type: 'message';
  role: 'assistant';
  content: Array<OutputTextPart | OutputAudioPart>;
}
export interface FunctionCallItem extends ItemBase {
  type: 'function_call';
  callId: string;
  name: string;
  /** JSON text of the arguments, as OpenAI carries it. */
  arguments: string;
}
export interface FunctionCallOutputItem extends ItemBase {
  type: 'function_call_output';
  callId: string;
  output: string;
}
export type ConversationItem = SystemMessageItem | UserMessageItem | AssistantMessageItem | FunctionCallItem | FunctionCallOutputItem;

/** In response.create's `input`: an item already in the conversation, by id. */
export interface ItemReference {
  type: 'item_reference';
  id: string;
}

/** Most content parts in one message. */
export const MAX_CONTENT_PARTS = 64;

// ---- schemas ----

const audioFields = { audio: base64Audio.optional(), transcript: text.optional() };
/** Audio content needs its bytes or at least what was said (a retrieved item, echoed back, has only the transcript). */
const audioPart = <T extends string>(type: T) =>
  z.strictObject({ type: z.literal(type), ...audioFields }).refine((part) => part.audio !== undefined || part.transcript !== undefined, {
    message: 'audio content needs `audio` (base64) or a `transcript`',
    path: ['audio'],
    params: { code: 'missing_required_parameter' },
  });
const inputText = z.strictObject({ type: z.literal('input_text'), text });
// Images reach lserve's chat models through the chat endpoints; a realtime turn carries text and audio only. Named, not dropped.
const inputImage = z.looseObject({ type: z.literal('input_image') }).refine((): boolean => false, {
  message: 'image input is not supported in realtime sessions',
  params: { code: 'unsupported_parameter' },
});
const outputText = z.strictObject({ type: z.literal('output_text'), text });
const outputAudio = audioPart('output_audio');
/** The beta's names for an assistant's parts, read as GA's. */
const betaText = z.strictObject({ type: z.literal('text'), text }).transform(({ text }): OutputTextPart => ({ type: 'output_text', text }));
const betaAudio = audioPart('audio').transform(({ type: _beta, ...fields }): OutputAudioPart => ({ type: 'output_audio', ...fields }));
const assistantPart = {
  ga: z.discriminatedUnion('type', [outputText, outputAudio], { error: "must be 'output_text' or 'output_audio'" }),
  beta: z.discriminatedUnion('type', [betaText, betaAudio], { error: "must be 'text' or 'audio'" }),
};

/** What a server-rendered item carries besides its fields: accepted so that a client can send an item back as it received it. */
const echoed = {
  id: itemId.optional(),
  object: z.literal('realtime.item').optional(),
  status: z.enum(['completed', 'incomplete', 'in_progress']).optional(),
};
/** The item as lserve keeps it: the client's id, not what it echoed of the server's (`object`, `status`). */
const own = <T extends { id?: string; object?: unknown; status?: unknown }>({ object: _object, status: _status, id, ...fields }: T) => ({ ...fields, ...(id !== undefined ? { id } : {}) });
const parts = <T extends z.ZodType>(part: T) => z.array(part).min(1, 'must have at least one content part').max(MAX_CONTENT_PARTS, `must have at most ${MAX_CONTENT_PARTS} content parts`);
const callId = z.string().min(1).max(64);

const systemMessage = z
  .strictObject({ type: z.literal('message'), role: z.literal('system'), content: parts(z.discriminatedUnion('type', [inputText], { error: "must be 'input_text'" })), ...echoed })
  .transform((m): SystemMessageItem => own(m));
const userMessage = z
  .strictObject({
    type: z.literal('message'),
    role: z.literal('user'),
    content: parts(z.discriminatedUnion('type', [inputText, audioPart('input_audio'), inputImage], { error: "must be 'input_text' or 'input_audio'" })),
    ...echoed,
  })
  // inputImage never passes its check, so every part here is text or audio.
  .transform((m): UserMessageItem => own(m) as UserMessageItem);
const assistantMessage = (dialect: Dialect) =>
  z.strictObject({ type: z.literal('message'), role: z.literal('assistant'), content: parts(assistantPart[dialect]), ...echoed }).transform((m): AssistantMessageItem => own(m));
const functionCall = z
  .strictObject({ type: z.literal('function_call'), name: toolName, call_id: callId.optional(), arguments: text, ...echoed })
  // A call the client records without a call_id still needs one for its output to answer.
  .transform(({ call_id, ...m }): FunctionCallItem => ({ ...own(m), callId: call_id ?? newId('call') }));
const functionCallOutput = z
  .strictObject({ type: z.literal('function_call_output'), call_id: callId, output: text, ...echoed })
  .transform(({ call_id, ...m }): FunctionCallOutputItem => ({ ...own(m), callId: call_id }));
const reference = z.strictObject({ type: z.literal('item_reference'), id: itemId });

/** An item with a role and no type is a message (the beta SDK types `type` as optional). */
const typed = (value: unknown) => (value !== null && typeof value === 'object' && !('type' in value) && 'role' in value ? { ...value, type: 'message' } : value);

function itemSchema(dialect: Dialect) {
  const message = z.discriminatedUnion('role', [systemMessage, userMessage, assistantMessage(dialect)], { error: "must be 'user', 'assistant' or 'system'" });
  const item = z.preprocess(typed, z.discriminatedUnion('type', [message, functionCall, functionCallOutput], { error: "must be 'message', 'function_call' or 'function_call_output'" }));
  const inputItem = z.preprocess(
    typed,
    z.discriminatedUnion('type', [message, functionCall, functionCallOutput, reference], { error: "must be 'message', 'function_call', 'function_call_output' or 'item_reference'" }),
  );
  return { item, input: z.array(inputItem).max(MAX_CHAT_MESSAGES, `must contain at most ${MAX_CHAT_MESSAGES} items`) };
}

/** Per dialect: one conversation item, and response.create's `input` (items and references). */
export const itemSchemas = { ga: itemSchema('ga'), beta: itemSchema('beta') } as const;
