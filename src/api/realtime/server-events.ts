import type { LserveError } from '../../core/errors.js';
import type { ChatUsage } from '../../core/tasks/chat.js';
import { RealtimeEventError } from './errors.js';
import { newEventId } from './ids.js';
import type { ContentPart, ConversationItem, ItemStatus, OutputAudioPart, OutputTextPart } from './items.js';
import { type BetaAudioFormat, betaFormat } from './session-object.js';
import type { AudioFormat, Dialect, SessionConfig } from './types.js';

export { newEventId, newId, type IdKind } from './ids.js';

/**
 * The server's side of GET /v1/realtime: event names and the objects events
 * carry, in the client's dialect. The shapes follow the `openai` SDK's types
 * (the unit tests assign them to those types), leaving out a field rather
 * than sending null where the SDK types it as optional and not nullable.
 */

/** GA names the beta spells differently; undefined: the beta has no such event (do not send it). */
const BETA_NAMES: Record<string, string | undefined> = {
  'response.output_text.delta': 'response.text.delta',
  'response.output_text.done': 'response.text.done',
  'response.output_audio.delta': 'response.audio.delta',
  'response.output_audio.done': 'response.audio.done',
  'response.output_audio_transcript.delta': 'response.audio_transcript.delta',
  'response.output_audio_transcript.done': 'response.audio_transcript.done',
  // The beta announces an item once, when it is created: GA's `added` is that moment, and its `done` has no counterpart.
  'conversation.item.added': 'conversation.item.created',
  'conversation.item.done': undefined,
};

/**
 * A server event's name in the client's dialect, from its GA name; undefined
 * means the dialect has no such event and it is not sent. The beta's
 * transcription sessions announce their settings as
 * transcription_session.created / .updated.
 */
export function serverEventName(gaName: string, dialect: Dialect, sessionType: SessionConfig['type'] = 'realtime'): string | undefined {
  if (dialect === 'ga') return gaName;
  if (sessionType === 'transcription' && (gaName === 'session.created' || gaName === 'session.updated')) return `transcription_${gaName}`;
  return Object.hasOwn(BETA_NAMES, gaName) ? BETA_NAMES[gaName] : gaName;
}

// ---- errors ----

export interface ErrorEventObject {
  type: 'error';
  event_id: string;
  error: { type: string; code: string | null; message: string; param: string | null; event_id: string | null };
}

/**
 * The `error` event for a failure: a bad client event (RealtimeEventError,
 * whose client event_id it echoes), any other lserve error (a model that is
 * not installed, a full queue), or plain fields. The session stays open.
 */
export function errorEvent(error: LserveError | { type: string; code?: string | null; message: string; param?: string | null }, eventId?: string): ErrorEventObject {
  const echoed = eventId ?? (error instanceof RealtimeEventError ? error.eventId : undefined);
  return {
    type: 'error',
    event_id: newEventId(),
    error: { type: error.type, code: error.code ?? null, message: error.message, param: error.param ?? null, event_id: echoed ?? null },
  };
}

// ---- items ----

type Wire<T> = T & { id: string; object: 'realtime.item'; status: ItemStatus };
type WireText<T extends string> = { type: T; text: string };
type WireAudio<T extends string> = { type: T; audio?: string; transcript?: string };

export type GaItemObject =
  | Wire<{ type: 'message'; role: 'system'; content: Array<WireText<'input_text'>> }>
  | Wire<{ type: 'message'; role: 'user'; content: Array<WireText<'input_text'> | WireAudio<'input_audio'>> }>
  | Wire<{ type: 'message'; role: 'assistant'; content: Array<WireText<'output_text'> | WireAudio<'output_audio'>> }>
  | Wire<{ type: 'function_call'; call_id: string; name: string; arguments: string }>
  | Wire<{ type: 'function_call_output'; call_id: string; output: string }>;

/** The beta's one flat item shape. */
export type BetaItemObject = Wire<{
  type: 'message' | 'function_call' | 'function_call_output';
  role?: 'user' | 'assistant' | 'system';
  content?: Array<{ type: 'input_text' | 'input_audio' | 'text' | 'audio'; text?: string; audio?: string; transcript?: string }>;
  call_id?: string;
  name?: string;
  arguments?: string;
  output?: string;
}>;

/**
 * An item as conversation.item.added / .done / .retrieved and
 * response.output_item.* carry it. Audio bytes are left out unless `audio`
 * is set (conversation.item.retrieved, which a client uses to fetch them),
 * as OpenAI does: the client already has them, and they are large.
 */
export function itemObject(item: ConversationItem & { id: string }, dialect: 'ga', options?: { audio?: boolean }): GaItemObject;
export function itemObject(item: ConversationItem & { id: string }, dialect: 'beta', options?: { audio?: boolean }): BetaItemObject;
export function itemObject(item: ConversationItem & { id: string }, dialect: Dialect, options?: { audio?: boolean }): GaItemObject | BetaItemObject;
export function itemObject(item: ConversationItem & { id: string }, dialect: Dialect, options: { audio?: boolean } = {}): GaItemObject | BetaItemObject {
  const base = { id: item.id, object: 'realtime.item' as const, status: item.status ?? 'completed' };
  switch (item.type) {
    case 'function_call':
      return { ...base, type: 'function_call', call_id: item.callId, name: item.name, arguments: item.arguments };
    case 'function_call_output':
      return { ...base, type: 'function_call_output', call_id: item.callId, output: item.output };
    case 'message': {
      const content = item.content.map((part) => {
        if (part.type === 'input_text' || part.type === 'output_text') return { type: partName(part.type, dialect), text: part.text };
        return {
          type: partName(part.type, dialect),
          ...(options.audio && part.audio !== undefined ? { audio: part.audio } : {}),
          ...(part.transcript !== undefined ? { transcript: part.transcript } : {}),
        };
      });
      return { ...base, type: 'message', role: item.role, content } as GaItemObject | BetaItemObject;
    }
  }
}

function partName(type: ContentPart['type'], dialect: Dialect): string {
  if (dialect === 'ga') return type;
  return type === 'output_text' ? 'text' : type === 'output_audio' ? 'audio' : type;
}

/**
 * A part of a response's output as response.content_part.added / .done carry
 * it: 'text' or 'audio' in both dialects, as the SDK types it (GA kept the
 * beta's names here).
 */
export function partObject(part: OutputTextPart | OutputAudioPart): { type: 'text'; text: string } | { type: 'audio'; transcript: string } {
  return part.type === 'output_text' ? { type: 'text', text: part.text } : { type: 'audio', transcript: part.transcript ?? '' };
}

// ---- responses ----

/** How a response ended (or that it has not yet), with OpenAI's reasons. */
export type ResponseOutcome =
  | { status: 'in_progress' }
  | { status: 'completed' }
  /** turn_detected: the user spoke over it; client_cancelled: response.cancel. */
  | { status: 'cancelled'; reason: 'turn_detected' | 'client_cancelled' }
  | { status: 'incomplete'; reason: 'max_output_tokens' | 'content_filter' }
  | { status: 'failed'; error: { type: string; code?: string } };

export interface ResponseState {
  id: string;
  outcome: ResponseOutcome;
  output: Array<ConversationItem & { id: string }>;
  /** The conversation it adds to; undefined for an out-of-band response (conversation: 'none'). */
  conversationId?: string;
  outputModalities: Array<'text' | 'audio'>;
  /** undefined: no limit. */
  maxOutputTokens?: number;
  outputFormat: AudioFormat;
  voice?: string;
  temperature?: number;
  metadata?: Record<string, string> | null;
  /** Known once the response has ended. */
  usage?: ChatUsage;
}

export interface UsageObject {
  total_tokens: number;
  input_tokens: number;
  output_tokens: number;
  input_token_details: { text_tokens: number; audio_tokens: number; cached_tokens: number; cached_tokens_details: { text_tokens: number; audio_tokens: number } };
  output_token_details: { text_tokens: number; audio_tokens: number };
}

/**
 * Usage in OpenAI's Realtime shape. lserve's chat models read and write text
 * only (speech reaches them transcribed and leaves them synthesized), so
 * every token is a text token and the audio counts are 0.
 */
export function usageObject(usage: ChatUsage): UsageObject {
  return {
    total_tokens: usage.promptTokens + usage.completionTokens,
    input_tokens: usage.promptTokens,
    output_tokens: usage.completionTokens,
    input_token_details: {
      text_tokens: usage.promptTokens,
      audio_tokens: 0,
      cached_tokens: usage.cachedPromptTokens,
      cached_tokens_details: { text_tokens: usage.cachedPromptTokens, audio_tokens: 0 },
    },
    output_token_details: { text_tokens: usage.completionTokens, audio_tokens: 0 },
  };
}

type StatusDetails =
  | { type: 'cancelled'; reason: Extract<ResponseOutcome, { status: 'cancelled' }>['reason'] }
  | { type: 'incomplete'; reason: Extract<ResponseOutcome, { status: 'incomplete' }>['reason'] }
  | { type: 'failed'; error: { type: string; code?: string } };

interface ResponseCommon<Item> {
  id: string;
  object: 'realtime.response';
  status: ResponseOutcome['status'];
  status_details?: StatusDetails;
  output: Item[];
  conversation_id?: string;
  max_output_tokens: number | 'inf';
  metadata: Record<string, string> | null;
  usage?: UsageObject;
}
export interface GaResponseObject extends ResponseCommon<GaItemObject> {
  output_modalities: Array<'text' | 'audio'>;
  audio: { output: { format: AudioFormat; voice?: string } };
}
export interface BetaResponseObject extends ResponseCommon<BetaItemObject> {
  modalities: Array<'text' | 'audio'>;
  output_audio_format: BetaAudioFormat;
  voice?: string;
  temperature?: number;
}

/** A response as response.created (in progress, no usage yet) and response.done carry it. */
export function responseObject(state: ResponseState, dialect: 'ga'): GaResponseObject;
export function responseObject(state: ResponseState, dialect: 'beta'): BetaResponseObject;
export function responseObject(state: ResponseState, dialect: Dialect): GaResponseObject | BetaResponseObject;
export function responseObject(state: ResponseState, dialect: Dialect): GaResponseObject | BetaResponseObject {
  const { outcome } = state;
  // OpenAI sends null details while in progress or after a plain completion; the SDK types them as optional, so they are left out.
  const details: StatusDetails | undefined =
    outcome.status === 'cancelled' ? { type: 'cancelled', reason: outcome.reason }
    : outcome.status === 'incomplete' ? { type: 'incomplete', reason: outcome.reason }
    : outcome.status === 'failed' ? { type: 'failed', error: outcome.error }
    : undefined;
  const common = {
    id: state.id,
    object: 'realtime.response' as const,
    status: outcome.status,
    ...(details ? { status_details: details } : {}),
    ...(state.conversationId !== undefined ? { conversation_id: state.conversationId } : {}),
    max_output_tokens: state.maxOutputTokens ?? ('inf' as const),
    metadata: state.metadata ?? null,
    ...(state.usage ? { usage: usageObject(state.usage) } : {}),
  };
  const voice = state.voice !== undefined ? { voice: state.voice } : {};
  if (dialect === 'beta') {
    return {
      ...common,
      output: state.output.map((item) => itemObject(item, 'beta')),
      modalities: state.outputModalities.includes('audio') ? ['text', 'audio'] : ['text'],
      output_audio_format: betaFormat(state.outputFormat),
      ...voice,
      ...(state.temperature !== undefined ? { temperature: state.temperature } : {}),
    };
  }
  return {
    ...common,
    output: state.output.map((item) => itemObject(item, 'ga')),
    output_modalities: state.outputModalities,
    audio: { output: { format: state.outputFormat, ...voice } },
  };
}
