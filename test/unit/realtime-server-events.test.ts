import type { ConversationItem as BetaSdkItem, RealtimeResponse as BetaSdkResponse } from 'openai/resources/beta/realtime/realtime';
import type { ConversationItem as SdkItem, RealtimeErrorEvent, RealtimeResponse, RealtimeServerEvent, ResponseContentPartAddedEvent } from 'openai/resources/realtime/realtime';
import { describe, expect, it } from 'vitest';
import { parseClientEvent } from '../../src/api/realtime/client-events.js';
import { RealtimeEventError } from '../../src/api/realtime/errors.js';
import type { ConversationItem } from '../../src/api/realtime/items.js';
import {
  errorEvent,
  type GaResponseObject,
  itemObject,
  newEventId,
  newId,
  partObject,
  type ResponseState,
  responseObject,
  serverEventName,
} from '../../src/api/realtime/server-events.js';
import { ModelNotFoundError } from '../../src/core/errors.js';

/**
 * What the server sends: event names per dialect, error events, ids, items
 * and responses, each checked against the `openai` SDK's types.
 */

/** The SDK types GA PCM as 24 kHz only; 16 kHz is lserve's extension, so the type checks read every rate as 24000. */
type At24k<T> =
  T extends { type: 'audio/pcm'; rate: number } ? { type: 'audio/pcm'; rate: 24000 }
  : T extends Array<infer E> ? Array<At24k<E>>
  : T extends object ? { [K in keyof T]: At24k<T[K]> }
  : T;

describe('serverEventName', () => {
  it('keeps GA names for GA clients', () => {
    for (const name of ['response.output_text.delta', 'conversation.item.added', 'conversation.item.done', 'session.updated']) expect(serverEventName(name, 'ga')).toBe(name);
  });

  it('maps the names the beta spells differently, and drops what it lacks', () => {
    const names: Array<[string, string | undefined]> = [
      ['response.output_text.delta', 'response.text.delta'],
      ['response.output_text.done', 'response.text.done'],
      ['response.output_audio.delta', 'response.audio.delta'],
      ['response.output_audio.done', 'response.audio.done'],
      ['response.output_audio_transcript.delta', 'response.audio_transcript.delta'],
      ['response.output_audio_transcript.done', 'response.audio_transcript.done'],
      ['conversation.item.added', 'conversation.item.created'],
      ['conversation.item.done', undefined],
      ['response.output_item.added', 'response.output_item.added'],
      ['input_audio_buffer.speech_started', 'input_audio_buffer.speech_started'],
      ['conversation.item.input_audio_transcription.completed', 'conversation.item.input_audio_transcription.completed'],
      ['session.updated', 'session.updated'],
      ['error', 'error'],
    ];
    for (const [ga, beta] of names) expect([ga, serverEventName(ga, 'beta')]).toEqual([ga, beta]);
  });

  it("uses the beta's transcription_session names for a transcription session", () => {
    expect(serverEventName('session.created', 'beta', 'transcription')).toBe('transcription_session.created');
    expect(serverEventName('session.updated', 'beta', 'transcription')).toBe('transcription_session.updated');
    expect(serverEventName('session.updated', 'ga', 'transcription')).toBe('session.updated');
  });
});

describe('ids', () => {
  it('carry their kind and 21 random letters and digits', () => {
    const ids = Array.from({ length: 200 }, () => newId('item'));
    for (const id of ids) expect(id).toMatch(/^item_[A-Za-z0-9]{21}$/);
    expect(new Set(ids).size).toBe(ids.length);
    expect(newEventId()).toMatch(/^event_[A-Za-z0-9]{21}$/);
  });

  it('are item ids the session accepts from a client', () => {
    const id = newId('item');
    const event = parseClientEvent(JSON.stringify({ type: 'conversation.item.retrieve', item_id: id }), 'ga');
    expect(event).toEqual({ type: 'conversation.item.retrieve', itemId: id });
  });
});

describe('errorEvent', () => {
  it("echoes a bad event's event_id and names its field", () => {
    const event = errorEvent(new RealtimeEventError('invalid_value', 'session.update: bad rate', { param: 'session.audio.input.format.rate', eventId: 'evt_9' }));
    const typed: RealtimeErrorEvent = event;
    expect(typed).toEqual({
      type: 'error',
      event_id: expect.stringMatching(/^event_/),
      error: { type: 'invalid_request_error', code: 'invalid_value', message: 'session.update: bad rate', param: 'session.audio.input.format.rate', event_id: 'evt_9' },
    });
  });

  it('renders any lserve error and plain fields, with the event_id given', () => {
    expect(errorEvent(new ModelNotFoundError("Model 'x' is not installed."), 'e1').error).toEqual({
      type: 'not_found_error',
      code: 'model_not_found',
      message: "Model 'x' is not installed.",
      param: 'model',
      event_id: 'e1',
    });
    expect(errorEvent({ type: 'server_error', message: 'The speech model stopped.' }).error).toEqual({ type: 'server_error', code: null, message: 'The speech model stopped.', param: null, event_id: null });
  });
});

const items: Array<ConversationItem & { id: string }> = [
  { id: 'item_s', type: 'message', role: 'system', content: [{ type: 'input_text', text: 'Be brief.' }] },
  { id: 'item_u', type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi' }, { type: 'input_audio', audio: 'AAAA', transcript: 'hello' }] },
  { id: 'item_a', type: 'message', role: 'assistant', status: 'in_progress', content: [{ type: 'output_text', text: 'Yes.' }, { type: 'output_audio', audio: 'AAAA', transcript: 'Yes.' }] },
  { id: 'item_c', type: 'function_call', callId: 'call_1', name: 'lookup', arguments: '{"q":1}' },
  { id: 'item_o', type: 'function_call_output', callId: 'call_1', output: 'found' },
];

describe('itemObject', () => {
  it('renders GA items that the SDK types accept, without audio bytes unless asked', () => {
    const rendered = items.map((item) => itemObject(item, 'ga'));
    const typed: SdkItem[] = rendered;
    expect(typed).toEqual([
      { id: 'item_s', object: 'realtime.item', status: 'completed', type: 'message', role: 'system', content: [{ type: 'input_text', text: 'Be brief.' }] },
      { id: 'item_u', object: 'realtime.item', status: 'completed', type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Hi' }, { type: 'input_audio', transcript: 'hello' }] },
      { id: 'item_a', object: 'realtime.item', status: 'in_progress', type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Yes.' }, { type: 'output_audio', transcript: 'Yes.' }] },
      { id: 'item_c', object: 'realtime.item', status: 'completed', type: 'function_call', call_id: 'call_1', name: 'lookup', arguments: '{"q":1}' },
      { id: 'item_o', object: 'realtime.item', status: 'completed', type: 'function_call_output', call_id: 'call_1', output: 'found' },
    ]);
    expect(itemObject(items[1]!, 'ga', { audio: true })).toMatchObject({ content: [{ type: 'input_text' }, { type: 'input_audio', audio: 'AAAA', transcript: 'hello' }] });
  });

  it("renders the beta's part names", () => {
    const typed: BetaSdkItem = itemObject(items[2]!, 'beta');
    expect(typed.content).toEqual([{ type: 'text', text: 'Yes.' }, { type: 'audio', transcript: 'Yes.' }]);
    expect(itemObject(items[1]!, 'beta').content).toEqual([{ type: 'input_text', text: 'Hi' }, { type: 'input_audio', transcript: 'hello' }]);
  });

  it('round-trips: an item the server rendered, sent back by the client, is the same item', () => {
    for (const dialect of ['ga', 'beta'] as const) {
      for (const item of items) {
        const event = parseClientEvent(JSON.stringify({ type: 'conversation.item.create', item: itemObject(item, dialect, { audio: true }) }), dialect);
        const { status: _status, ...held } = item;
        expect({ dialect, item: event.type === 'conversation.item.create' && event.item }).toEqual({ dialect, item: held });
      }
    }
  });
});

describe('partObject', () => {
  it('renders output parts as the SDK types response.content_part events', () => {
    const text: ResponseContentPartAddedEvent.Part = partObject({ type: 'output_text', text: '' });
    const audio: ResponseContentPartAddedEvent.Part = partObject({ type: 'output_audio' });
    expect([text, audio]).toEqual([{ type: 'text', text: '' }, { type: 'audio', transcript: '' }]);
  });
});

describe('responseObject', () => {
  const state: ResponseState = {
    id: 'resp_1',
    outcome: { status: 'in_progress' },
    output: [],
    conversationId: 'conv_1',
    outputModalities: ['audio'],
    outputFormat: { type: 'audio/pcm', rate: 24000 },
    voice: 'af_heart',
  };
  const usage = { promptTokens: 120, completionTokens: 30, cachedPromptTokens: 100, reasoningTokens: 0 };

  it('renders a GA response in progress, without usage or status details', () => {
    const typed: RealtimeResponse = responseObject(state, 'ga') as At24k<GaResponseObject>;
    expect(typed).toEqual({
      id: 'resp_1',
      object: 'realtime.response',
      status: 'in_progress',
      output: [],
      conversation_id: 'conv_1',
      output_modalities: ['audio'],
      max_output_tokens: 'inf',
      metadata: null,
      audio: { output: { format: { type: 'audio/pcm', rate: 24000 }, voice: 'af_heart' } },
    });
  });

  it('renders a finished GA response with its output and usage', () => {
    const done = responseObject({ ...state, outcome: { status: 'completed' }, output: [items[2]!], usage, maxOutputTokens: 64, metadata: { k: 'v' } }, 'ga');
    expect(done).toMatchObject({ status: 'completed', max_output_tokens: 64, metadata: { k: 'v' }, output: [{ id: 'item_a', type: 'message', role: 'assistant' }] });
    expect(done.status_details).toBeUndefined();
    expect(done.usage).toEqual({
      total_tokens: 150,
      input_tokens: 120,
      output_tokens: 30,
      input_token_details: { text_tokens: 120, audio_tokens: 0, cached_tokens: 100, cached_tokens_details: { text_tokens: 100, audio_tokens: 0 } },
      output_token_details: { text_tokens: 30, audio_tokens: 0 },
    });
  });

  it('says why a response stopped short', () => {
    expect(responseObject({ ...state, outcome: { status: 'cancelled', reason: 'turn_detected' } }, 'ga').status_details).toEqual({ type: 'cancelled', reason: 'turn_detected' });
    expect(responseObject({ ...state, outcome: { status: 'incomplete', reason: 'max_output_tokens' } }, 'ga').status_details).toEqual({ type: 'incomplete', reason: 'max_output_tokens' });
    expect(responseObject({ ...state, outcome: { status: 'failed', error: { type: 'server_error', code: 'model_crashed' } } }, 'ga').status_details).toEqual({
      type: 'failed',
      error: { type: 'server_error', code: 'model_crashed' },
    });
    expect(responseObject({ ...state, conversationId: undefined }, 'ga')).not.toHaveProperty('conversation_id');
  });

  it("renders the beta's flat response that the SDK types accept", () => {
    const typed: BetaSdkResponse = responseObject({ ...state, outcome: { status: 'completed' }, output: [items[2]!], usage, temperature: 0.8, outputFormat: { type: 'audio/pcmu' } }, 'beta');
    expect(typed).toMatchObject({ modalities: ['text', 'audio'], output_audio_format: 'g711_ulaw', voice: 'af_heart', temperature: 0.8, output: [{ content: [{ type: 'text' }, { type: 'audio' }] }] });
    expect(typed).not.toHaveProperty('output_modalities');
  });

  it('fits the SDK’s response.done event', () => {
    const event: RealtimeServerEvent = { type: 'response.done', event_id: newEventId(), response: responseObject(state, 'ga') as At24k<GaResponseObject> };
    expect(event.type).toBe('response.done');
  });
});
