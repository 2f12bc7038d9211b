import { z } from 'zod';
import type { ChatTool, ChatToolChoice } from '../../core/tasks/chat.js';
import { LserveError } from '../../core/errors.js';
import { assertJsonDepth } from '../validate.js';
import { type EventContext, parseWith, RealtimeEventError } from './errors.js';
import { betaAudioFormat, base64Audio, gaAudioFormat, itemId, maxOutputTokens, metadata, modalities, noPrompt, temperature, text, toolChoice, tools, voice, withoutUndefined } from './fields.js';
import { type ConversationItem, type ItemReference, itemSchemas } from './items.js';
import { parseSessionPatch, type SessionPatch } from './session-patch.js';
import type { AudioFormat, Dialect } from './types.js';

/**
 * The client's side of GET /v1/realtime: each WebSocket text message is one
 * event, read here into lserve's own shape whichever dialect the client
 * speaks (GA names in `type`, items as items.ts holds them). A bad event
 * throws RealtimeEventError; the session answers it with an `error` event
 * and reads the next one.
 */

/** What response.create may set for one response; absent fields take the session's. */
export interface ResponseParams {
  /** 'none': an out-of-band response, whose items are not added to the conversation. */
  conversation: 'auto' | 'none';
  /** The response's whole context instead of the conversation's; references name items already in it. */
  input?: Array<ConversationItem | ItemReference>;
  instructions?: string;
  outputModalities?: Array<'text' | 'audio'>;
  tools?: ChatTool[];
  toolChoice?: ChatToolChoice;
  /** 'inf': no limit. */
  maxOutputTokens?: number | 'inf';
  temperature?: number;
  voice?: string;
  outputFormat?: AudioFormat;
  /** Returned as given in the response's events. */
  metadata?: Record<string, string> | null;
}

export type ClientEvent = (
  | { type: 'session.update'; session: SessionPatch }
  /** Base64 audio in the session's input format. */
  | { type: 'input_audio_buffer.append'; audio: string }
  | { type: 'input_audio_buffer.commit' }
  | { type: 'input_audio_buffer.clear' }
  | { type: 'output_audio_buffer.clear' }
  /** `previousItemId`: insert after that item ('root': at the start); absent: at the end. */
  | { type: 'conversation.item.create'; item: ConversationItem; previousItemId?: string }
  | { type: 'conversation.item.retrieve'; itemId: string }
  | { type: 'conversation.item.truncate'; itemId: string; contentIndex: number; audioEndMs: number }
  | { type: 'conversation.item.delete'; itemId: string }
  | { type: 'response.create'; response: ResponseParams }
  /** Absent `responseId`: the response in progress. */
  | { type: 'response.cancel'; responseId?: string }
) & {
  /** The client's own id for the event, echoed in any error about it. */
  eventId?: string;
};

/** Longest client `event_id` echoed back; a longer one is an error (it would be copied into every error event). */
export const MAX_EVENT_ID_CHARS = 512;

const eventId = { event_id: z.string().max(MAX_EVENT_ID_CHARS).optional() };
const bare = z.strictObject({ type: z.string(), ...eventId });
const withItemId = z.strictObject({ type: z.string(), ...eventId, item_id: itemId });
const idOf = (e: { event_id?: string }) => (e.event_id !== undefined ? { eventId: e.event_id } : {});

// response.create's `response`, per dialect (parallel_tool_calls and reasoning: accepted, no effect, as in session-patch.ts).
const responseCommon = {
  instructions: text.optional(),
  tools: tools.optional(),
  tool_choice: toolChoice.optional(),
  conversation: z.enum(['auto', 'none'], { error: "must be 'auto' or 'none'" }).optional(),
  metadata: metadata.optional(),
};
const gaResponse = z.strictObject({
  ...responseCommon,
  input: itemSchemas.ga.input.optional(),
  output_modalities: modalities.optional(),
  max_output_tokens: maxOutputTokens.optional(),
  audio: z.strictObject({ output: z.strictObject({ format: gaAudioFormat.optional(), voice: voice.optional() }).optional() }).optional(),
  prompt: noPrompt.optional(),
  parallel_tool_calls: z.boolean().optional(),
  reasoning: z.strictObject({ effort: z.enum(['minimal', 'low', 'medium', 'high', 'xhigh']).optional() }).optional(),
});
const betaResponse = z.strictObject({
  ...responseCommon,
  input: itemSchemas.beta.input.optional(),
  modalities: modalities.optional(),
  max_response_output_tokens: maxOutputTokens.optional(),
  temperature: temperature.optional(),
  voice: voice.optional(),
  output_audio_format: betaAudioFormat.optional(),
});

function responseParams(response: unknown, dialect: Dialect, where: EventContext): ResponseParams {
  if (response === undefined) return { conversation: 'auto' };
  const context = { ...where, prefix: ['response'] };
  if (dialect === 'beta') {
    const r = parseWith(betaResponse, response, context);
    return withoutUndefined<ResponseParams>({
      conversation: r.conversation ?? 'auto',
      input: r.input,
      instructions: r.instructions,
      outputModalities: r.modalities,
      tools: r.tools,
      toolChoice: r.tool_choice,
      maxOutputTokens: r.max_response_output_tokens,
      temperature: r.temperature,
      voice: r.voice,
      outputFormat: r.output_audio_format,
      metadata: r.metadata,
    });
  }
  const r = parseWith(gaResponse, response, context);
  return withoutUndefined<ResponseParams>({
    conversation: r.conversation ?? 'auto',
    input: r.input,
    instructions: r.instructions,
    outputModalities: r.output_modalities,
    tools: r.tools,
    toolChoice: r.tool_choice,
    maxOutputTokens: r.max_output_tokens,
    voice: r.audio?.output?.voice,
    outputFormat: r.audio?.output?.format,
    metadata: r.metadata,
  });
}

type Parser = (event: Record<string, unknown>, dialect: Dialect, where: EventContext) => ClientEvent;

/** Each event type the session takes, by its name on the wire. */
const PARSERS: Record<string, Parser> = {
  'session.update': (e, dialect, where) => {
    const { session: _session, ...rest } = e;
    const envelope = parseWith(bare, rest, where);
    return { type: 'session.update', ...idOf(envelope), session: parseSessionPatch(e.session, dialect, where) };
  },
  // The beta's transcription sessions update through their own event; read as a session.update of a transcription session.
  'transcription_session.update': (e, _dialect, where) => {
    const { session: _session, ...rest } = e;
    const envelope = parseWith(bare, rest, where);
    return { type: 'session.update', ...idOf(envelope), session: parseSessionPatch(e.session, 'beta', where, { transcription: true }) };
  },
  'input_audio_buffer.append': (e, _dialect, where) => {
    const event = parseWith(z.strictObject({ type: z.string(), ...eventId, audio: base64Audio }), e, where);
    return { type: 'input_audio_buffer.append', ...idOf(event), audio: event.audio };
  },
  'input_audio_buffer.commit': (e, _dialect, where) => ({ type: 'input_audio_buffer.commit', ...idOf(parseWith(bare, e, where)) }),
  'input_audio_buffer.clear': (e, _dialect, where) => ({ type: 'input_audio_buffer.clear', ...idOf(parseWith(bare, e, where)) }),
  'output_audio_buffer.clear': (e, _dialect, where) => ({ type: 'output_audio_buffer.clear', ...idOf(parseWith(bare, e, where)) }),
  'conversation.item.create': (e, dialect, where) => {
    const event = parseWith(z.strictObject({ type: z.string(), ...eventId, item: itemSchemas[dialect].item, previous_item_id: itemId.nullish() }), e, where);
    return { type: 'conversation.item.create', ...idOf(event), item: event.item, ...(event.previous_item_id ? { previousItemId: event.previous_item_id } : {}) };
  },
  'conversation.item.retrieve': (e, _dialect, where) => {
    const event = parseWith(withItemId, e, where);
    return { type: 'conversation.item.retrieve', ...idOf(event), itemId: event.item_id };
  },
  'conversation.item.delete': (e, _dialect, where) => {
    const event = parseWith(withItemId, e, where);
    return { type: 'conversation.item.delete', ...idOf(event), itemId: event.item_id };
  },
  'conversation.item.truncate': (e, _dialect, where) => {
    const schema = withItemId.extend({ content_index: z.int().min(0), audio_end_ms: z.int().min(0) });
    const event = parseWith(schema, e, where);
    return { type: 'conversation.item.truncate', ...idOf(event), itemId: event.item_id, contentIndex: event.content_index, audioEndMs: event.audio_end_ms };
  },
  'response.create': (e, dialect, where) => {
    const { response: _response, ...rest } = e;
    const envelope = parseWith(bare, rest, where);
    return { type: 'response.create', ...idOf(envelope), response: responseParams(e.response, dialect, where) };
  },
  'response.cancel': (e, _dialect, where) => {
    const event = parseWith(z.strictObject({ type: z.string(), ...eventId, response_id: z.string().min(1).max(64).optional() }), e, where);
    return { type: 'response.cancel', ...idOf(event), ...(event.response_id !== undefined ? { responseId: event.response_id } : {}) };
  },
};

/** The event types a client may send, for the error that names an unknown one. */
export const CLIENT_EVENT_TYPES = Object.keys(PARSERS);

/**
 * One WebSocket text message → one client event. Throws RealtimeEventError
 * (invalid_json, unknown_event, or a field's code and path), carrying the
 * message's `event_id` whenever it had a usable one.
 */
export function parseClientEvent(text: string, dialect: Dialect): ClientEvent {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new RealtimeEventError('invalid_json', 'The event is not valid JSON.');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new RealtimeEventError('invalid_json', 'The event must be a JSON object with a `type`.');
  }
  const event = value as Record<string, unknown>;
  const id = typeof event.event_id === 'string' && event.event_id.length <= MAX_EVENT_ID_CHARS ? event.event_id : undefined;
  try {
    // Tool schemas are walked recursively later (a grammar for the calls): a hostile nesting is refused here.
    assertJsonDepth(event);
  } catch (error) {
    if (error instanceof LserveError) throw new RealtimeEventError('too_deeply_nested', error.message, { eventId: id });
    throw error;
  }
  const type = event.type;
  if (type === undefined) throw new RealtimeEventError('missing_required_parameter', "The event has no 'type'.", { param: 'type', eventId: id });
  if (typeof type !== 'string') throw new RealtimeEventError('invalid_type', "The event's 'type' must be a string.", { param: 'type', eventId: id });
  const parse = Object.hasOwn(PARSERS, type) ? PARSERS[type] : undefined;
  if (!parse) {
    const shown = type.length > 64 ? `${type.slice(0, 64)}…` : type;
    throw new RealtimeEventError('unknown_event', `Unknown event type '${shown}'. Supported: ${CLIENT_EVENT_TYPES.join(', ')}.`, { param: 'type', eventId: id });
  }
  return parse(event, dialect, { event: type, eventId: id });
}
