import type { RealtimeClientEvent as BetaClientEvent } from 'openai/resources/beta/realtime/realtime';
import type { RealtimeClientEvent } from 'openai/resources/realtime/realtime';
import { describe, expect, it } from 'vitest';
import { type ClientEvent, parseClientEvent } from '../../src/api/realtime/client-events.js';
import { RealtimeEventError } from '../../src/api/realtime/errors.js';
import { MAX_AUDIO_BASE64 } from '../../src/api/realtime/fields.js';
import type { Dialect } from '../../src/api/realtime/types.js';

/**
 * Client events of the Realtime API, as the `openai` SDK types them (so that
 * a change in what the SDK sends fails here), read into lserve's shape in
 * both dialects; and every kind of bad event refused with its code, the
 * field at fault and the client's event_id.
 */

const AUDIO = Buffer.from(new Int16Array([0, 1000, -1000, 0]).buffer).toString('base64');
const TOOL = { type: 'function' as const, name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } };
const CHAT_TOOL = { name: 'get_weather', description: 'Weather in a city', parameters: TOOL.parameters };

const parse = (event: object, dialect: Dialect = 'ga') => parseClientEvent(JSON.stringify(event), dialect);

/** The error a bad event throws (fails the test when it parses). */
function refusal(event: object | string, dialect: Dialect = 'ga'): RealtimeEventError {
  try {
    parseClientEvent(typeof event === 'string' ? event : JSON.stringify(event), dialect);
  } catch (error) {
    expect(error).toBeInstanceOf(RealtimeEventError);
    return error as RealtimeEventError;
  }
  throw new Error('the event was accepted');
}

describe('GA client events', () => {
  const cases: Array<[RealtimeClientEvent, ClientEvent]> = [
    [
      {
        type: 'session.update',
        event_id: 'evt_1',
        session: {
          type: 'realtime',
          instructions: 'Be brief.',
          output_modalities: ['text'],
          audio: {
            input: {
              format: { type: 'audio/pcm', rate: 24000 },
              transcription: { model: 'whisper-1', language: 'en' },
              turn_detection: { type: 'server_vad', threshold: 0.6, silence_duration_ms: 700 },
              noise_reduction: { type: 'near_field' },
            },
            output: { format: { type: 'audio/pcmu' }, voice: 'marin', speed: 1.2 },
          },
          tools: [TOOL],
          tool_choice: { type: 'function', name: 'get_weather' },
          max_output_tokens: 'inf',
          tracing: 'auto',
          truncation: 'auto',
          include: ['item.input_audio_transcription.logprobs'],
        },
      },
      {
        type: 'session.update',
        eventId: 'evt_1',
        session: {
          type: 'realtime',
          instructions: 'Be brief.',
          outputModalities: ['text'],
          inputFormat: { type: 'audio/pcm', rate: 24000 },
          transcription: { model: 'whisper-1', language: 'en' },
          turnDetection: { type: 'server_vad', threshold: 0.6, silenceDurationMs: 700 },
          outputFormat: { type: 'audio/pcmu' },
          voice: 'marin',
          speed: 1.2,
          tools: [CHAT_TOOL],
          toolChoice: { name: 'get_weather' },
          maxOutputTokens: 'inf',
        },
      },
    ],
    [{ type: 'input_audio_buffer.append', audio: AUDIO }, { type: 'input_audio_buffer.append', audio: AUDIO }],
    [{ type: 'input_audio_buffer.commit', event_id: 'c' }, { type: 'input_audio_buffer.commit', eventId: 'c' }],
    [{ type: 'input_audio_buffer.clear' }, { type: 'input_audio_buffer.clear' }],
    [{ type: 'output_audio_buffer.clear' }, { type: 'output_audio_buffer.clear' }],
    [
      { type: 'conversation.item.create', previous_item_id: 'root', item: { type: 'message', role: 'user', id: 'item_u1', content: [{ type: 'input_text', text: 'Hi' }, { type: 'input_audio', audio: AUDIO, transcript: 'hi' }] } },
      { type: 'conversation.item.create', previousItemId: 'root', item: { type: 'message', role: 'user', id: 'item_u1', content: [{ type: 'input_text', text: 'Hi' }, { type: 'input_audio', audio: AUDIO, transcript: 'hi' }] } },
    ],
    [
      { type: 'conversation.item.create', item: { type: 'message', role: 'system', content: [{ type: 'input_text', text: 'Speak French.' }] } },
      { type: 'conversation.item.create', item: { type: 'message', role: 'system', content: [{ type: 'input_text', text: 'Speak French.' }] } },
    ],
    [
      { type: 'conversation.item.create', item: { type: 'message', role: 'assistant', object: 'realtime.item', status: 'completed', content: [{ type: 'output_text', text: 'Sure.' }, { type: 'output_audio', transcript: 'Sure.' }] } },
      { type: 'conversation.item.create', item: { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Sure.' }, { type: 'output_audio', transcript: 'Sure.' }] } },
    ],
    [
      { type: 'conversation.item.create', item: { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' } },
      { type: 'conversation.item.create', item: { type: 'function_call', callId: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' } },
    ],
    [
      { type: 'conversation.item.create', item: { type: 'function_call_output', call_id: 'call_1', output: '{"temp":21}' } },
      { type: 'conversation.item.create', item: { type: 'function_call_output', callId: 'call_1', output: '{"temp":21}' } },
    ],
    [{ type: 'conversation.item.retrieve', item_id: 'item_1' }, { type: 'conversation.item.retrieve', itemId: 'item_1' }],
    [
      { type: 'conversation.item.truncate', item_id: 'item_1', content_index: 0, audio_end_ms: 1500 },
      { type: 'conversation.item.truncate', itemId: 'item_1', contentIndex: 0, audioEndMs: 1500 },
    ],
    [{ type: 'conversation.item.delete', item_id: 'item_1' }, { type: 'conversation.item.delete', itemId: 'item_1' }],
    [{ type: 'response.create' }, { type: 'response.create', response: { conversation: 'auto' } }],
    [
      {
        type: 'response.create',
        response: {
          instructions: 'Summarize.',
          output_modalities: ['audio'],
          tools: [TOOL],
          tool_choice: 'required',
          max_output_tokens: 200,
          conversation: 'none',
          input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Now?' }] }],
          metadata: { topic: 'summary' },
          audio: { output: { voice: { id: 'af_heart' }, format: { type: 'audio/pcm', rate: 24000 } } },
        },
      },
      {
        type: 'response.create',
        response: {
          instructions: 'Summarize.',
          outputModalities: ['audio'],
          tools: [CHAT_TOOL],
          toolChoice: 'required',
          maxOutputTokens: 200,
          conversation: 'none',
          input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Now?' }] }],
          metadata: { topic: 'summary' },
          voice: 'af_heart',
          outputFormat: { type: 'audio/pcm', rate: 24000 },
        },
      },
    ],
    [{ type: 'response.cancel', response_id: 'resp_1' }, { type: 'response.cancel', responseId: 'resp_1' }],
    [{ type: 'response.cancel' }, { type: 'response.cancel' }],
  ];
  it.each(cases.map(([wire, parsed]) => ({ name: wire.type, wire, parsed })))('$name', ({ wire, parsed }) => {
    expect(parse(wire, 'ga')).toEqual(parsed);
  });

  it('gives a function call without a call_id one of its own', () => {
    const event = parse({ type: 'conversation.item.create', item: { type: 'function_call', name: 'f', arguments: '{}' } });
    expect(event.type === 'conversation.item.create' && event.item.type === 'function_call' && event.item.callId).toMatch(/^call_[A-Za-z0-9]{21}$/);
  });

  it('reads an out-of-band response whose input references conversation items', () => {
    const event = parse({ type: 'response.create', response: { conversation: 'none', input: [{ type: 'item_reference', id: 'item_7' }], output_modalities: ['text'] } });
    expect(event).toEqual({ type: 'response.create', response: { conversation: 'none', input: [{ type: 'item_reference', id: 'item_7' }], outputModalities: ['text'] } });
  });
});

describe('beta client events', () => {
  const cases: Array<[BetaClientEvent, ClientEvent]> = [
    [
      {
        type: 'session.update',
        session: {
          modalities: ['text', 'audio'],
          instructions: 'Be brief.',
          voice: 'alloy',
          input_audio_format: 'pcm16',
          output_audio_format: 'g711_alaw',
          input_audio_transcription: { model: 'whisper-1' },
          turn_detection: { type: 'semantic_vad', eagerness: 'high' },
          tools: [TOOL],
          tool_choice: 'auto',
          temperature: 0.7,
          max_response_output_tokens: 512,
          speed: 0.9,
        },
      },
      {
        type: 'session.update',
        session: {
          outputModalities: ['audio'],
          instructions: 'Be brief.',
          voice: 'alloy',
          inputFormat: { type: 'audio/pcm', rate: 24000 },
          outputFormat: { type: 'audio/pcma' },
          transcription: { model: 'whisper-1' },
          turnDetection: { type: 'semantic_vad', eagerness: 'high' },
          tools: [CHAT_TOOL],
          toolChoice: 'auto',
          temperature: 0.7,
          maxOutputTokens: 512,
          speed: 0.9,
        },
      },
    ],
    [
      { type: 'transcription_session.update', session: { input_audio_format: 'g711_ulaw', input_audio_transcription: { model: 'gpt-4o-transcribe', language: 'de' }, turn_detection: { type: 'server_vad', prefix_padding_ms: 200 } } },
      { type: 'session.update', session: { type: 'transcription', inputFormat: { type: 'audio/pcmu' }, transcription: { model: 'gpt-4o-transcribe', language: 'de' }, turnDetection: { type: 'server_vad', prefixPaddingMs: 200 } } },
    ],
    [{ type: 'input_audio_buffer.append', audio: AUDIO, event_id: 'a1' }, { type: 'input_audio_buffer.append', audio: AUDIO, eventId: 'a1' }],
    [{ type: 'input_audio_buffer.commit' }, { type: 'input_audio_buffer.commit' }],
    [{ type: 'input_audio_buffer.clear' }, { type: 'input_audio_buffer.clear' }],
    [{ type: 'output_audio_buffer.clear' }, { type: 'output_audio_buffer.clear' }],
    [
      // The beta's assistant parts are `text` and `audio`; lserve holds them as GA's output_text / output_audio.
      { type: 'conversation.item.create', item: { type: 'message', role: 'assistant', content: [{ type: 'text', text: 'Hello.' }, { type: 'audio', transcript: 'Hello.' }] } },
      { type: 'conversation.item.create', item: { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hello.' }, { type: 'output_audio', transcript: 'Hello.' }] } },
    ],
    [
      { type: 'conversation.item.create', item: { role: 'user', content: [{ type: 'input_audio', audio: AUDIO }] } },
      { type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_audio', audio: AUDIO }] } },
    ],
    [
      { type: 'conversation.item.create', item: { type: 'function_call_output', call_id: 'call_2', output: 'ok' } },
      { type: 'conversation.item.create', item: { type: 'function_call_output', callId: 'call_2', output: 'ok' } },
    ],
    [{ type: 'conversation.item.retrieve', item_id: 'item_2' }, { type: 'conversation.item.retrieve', itemId: 'item_2' }],
    [
      { type: 'conversation.item.truncate', item_id: 'item_2', content_index: 1, audio_end_ms: 0 },
      { type: 'conversation.item.truncate', itemId: 'item_2', contentIndex: 1, audioEndMs: 0 },
    ],
    [{ type: 'conversation.item.delete', item_id: 'item_2' }, { type: 'conversation.item.delete', itemId: 'item_2' }],
    [
      {
        type: 'response.create',
        response: {
          modalities: ['text'],
          max_response_output_tokens: 'inf',
          temperature: 1.1,
          voice: 'verse',
          output_audio_format: 'pcm16',
          conversation: 'none',
          input: [{ type: 'item_reference', id: 'item_2' }],
        },
      },
      {
        type: 'response.create',
        response: { outputModalities: ['text'], maxOutputTokens: 'inf', temperature: 1.1, voice: 'verse', outputFormat: { type: 'audio/pcm', rate: 24000 }, conversation: 'none', input: [{ type: 'item_reference', id: 'item_2' }] },
      },
    ],
    [{ type: 'response.cancel' }, { type: 'response.cancel' }],
  ];
  it.each(cases.map(([wire, parsed]) => ({ name: wire.type, wire, parsed })))('$name', ({ wire, parsed }) => {
    expect(parse(wire, 'beta')).toEqual(parsed);
  });
});

describe('refused events', () => {
  it('are not JSON, or not an object', () => {
    expect(refusal('{"type": "input_audio_buffer.commit"')).toMatchObject({ code: 'invalid_json', param: null, eventId: undefined });
    expect(refusal('[1, 2]')).toMatchObject({ code: 'invalid_json' });
  });

  it('have no type, a type that is not a string, or an unknown one, echoing the event_id', () => {
    expect(refusal({ event_id: 'e1' })).toMatchObject({ code: 'missing_required_parameter', param: 'type', eventId: 'e1' });
    expect(refusal({ type: 7, event_id: 'e2' })).toMatchObject({ code: 'invalid_type', param: 'type', eventId: 'e2' });
    const unknown = refusal({ type: 'session.destroy', event_id: 'e3' });
    expect(unknown).toMatchObject({ code: 'unknown_event', param: 'type', eventId: 'e3' });
    expect(unknown.message).toContain("'session.destroy'");
    // A GA name is not a beta one, and the reverse: each dialect knows its own.
    expect(refusal({ type: 'response.text.delta' }, 'ga').code).toBe('unknown_event');
  });

  it('name the event and the field at fault', () => {
    const error = refusal({ type: 'conversation.item.create', event_id: 'e4', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 5 }] } });
    expect(error).toMatchObject({ code: 'invalid_type', param: 'item.content.0.text', eventId: 'e4', type: 'invalid_request_error' });
    expect(error.message).toMatch(/^conversation\.item\.create: .*'item\.content\.0\.text'/);
  });

  it('miss a required field', () => {
    expect(refusal({ type: 'input_audio_buffer.append' })).toMatchObject({ code: 'missing_required_parameter', param: 'audio' });
    expect(refusal({ type: 'conversation.item.create' })).toMatchObject({ code: 'missing_required_parameter', param: 'item' });
    expect(refusal({ type: 'conversation.item.create', item: { content: [] } })).toMatchObject({ code: 'missing_required_parameter', param: 'item.type' });
    expect(refusal({ type: 'conversation.item.create', item: { type: 'function_call_output', output: 'x' } })).toMatchObject({ code: 'missing_required_parameter', param: 'item.call_id' });
    expect(refusal({ type: 'conversation.item.create', item: { type: 'function_call', call_id: 'c', arguments: '{}' } })).toMatchObject({ code: 'missing_required_parameter', param: 'item.name' });
    expect(refusal({ type: 'conversation.item.create', item: { type: 'message', role: 'user' } })).toMatchObject({ code: 'missing_required_parameter', param: 'item.content' });
    expect(refusal({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_audio' }] } })).toMatchObject({ code: 'missing_required_parameter', param: 'item.content.0.audio' });
    expect(refusal({ type: 'conversation.item.truncate', item_id: 'i', content_index: 0 })).toMatchObject({ code: 'missing_required_parameter', param: 'audio_end_ms' });
    expect(refusal({ type: 'session.update' })).toMatchObject({ code: 'missing_required_parameter', param: 'session' });
  });

  it('have values of the wrong type or out of range', () => {
    expect(refusal({ type: 'input_audio_buffer.append', audio: 12 })).toMatchObject({ code: 'invalid_type', param: 'audio' });
    expect(refusal({ type: 'input_audio_buffer.append', audio: 'not base64!' })).toMatchObject({ code: 'invalid_value', param: 'audio' });
    expect(refusal({ type: 'conversation.item.truncate', item_id: 'i', content_index: -1, audio_end_ms: 0 })).toMatchObject({ code: 'invalid_value', param: 'content_index' });
    expect(refusal({ type: 'conversation.item.create', item: { type: 'message', role: 'robot', content: [] } })).toMatchObject({ code: 'invalid_value', param: 'item.role' });
    expect(refusal({ type: 'response.create', response: { conversation: 'conv_123' } })).toMatchObject({ code: 'invalid_value', param: 'response.conversation' });
    expect(refusal({ type: 'response.create', response: { max_output_tokens: 0 } })).toMatchObject({ code: 'invalid_value', param: 'response.max_output_tokens' });
    expect(refusal({ type: 'response.create', response: { tool_choice: 'sometimes' } })).toMatchObject({ code: 'invalid_value', param: 'response.tool_choice' });
  });

  it('use the other dialect’s names for content and fields', () => {
    // GA's assistant parts are output_text / output_audio; the beta's are text / audio.
    const assistant = (type: string) => ({ type: 'conversation.item.create', item: { type: 'message', role: 'assistant', content: [{ type, text: 'x' }] } });
    expect(refusal(assistant('text'), 'ga')).toMatchObject({ code: 'invalid_value', param: 'item.content.0.type' });
    expect(refusal(assistant('output_text'), 'beta')).toMatchObject({ code: 'invalid_value', param: 'item.content.0.type' });
    expect(refusal({ type: 'response.create', response: { modalities: ['text'] } }, 'ga')).toMatchObject({ code: 'unknown_parameter', param: 'response.modalities' });
    expect(refusal({ type: 'response.create', response: { output_modalities: ['text'] } }, 'beta')).toMatchObject({ code: 'unknown_parameter', param: 'response.output_modalities' });
  });

  it('carry unknown fields', () => {
    expect(refusal({ type: 'input_audio_buffer.commit', flush: true })).toMatchObject({ code: 'unknown_parameter', param: 'flush' });
    expect(refusal({ type: 'conversation.item.create', item: { type: 'function_call_output', call_id: 'c', output: 'x', extra: 1 } })).toMatchObject({ code: 'unknown_parameter', param: 'item.extra' });
  });

  it('ask for what lserve does not do, by name', () => {
    expect(refusal({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_image', image_url: 'data:image/png;base64,AAAA' }] } })).toMatchObject({
      code: 'unsupported_parameter',
      param: 'item.content.0',
    });
    expect(refusal({ type: 'response.create', response: { tools: [{ type: 'mcp', server_label: 'files' }] } })).toMatchObject({ code: 'invalid_value', param: 'response.tools.0.type' });
    expect(refusal({ type: 'response.create', response: { prompt: { id: 'pmpt_1' } } })).toMatchObject({ code: 'unsupported_parameter', param: 'response.prompt' });
  });

  it('exceed a bound', () => {
    const huge = 'A'.repeat(MAX_AUDIO_BASE64 + 4);
    const error = refusal({ type: 'input_audio_buffer.append', event_id: 'big', audio: huge });
    expect(error).toMatchObject({ code: 'string_above_max_length', param: 'audio', eventId: 'big' });
    expect(error.message).toContain('15 MiB');
    expect(parse({ type: 'input_audio_buffer.append', audio: 'A'.repeat(MAX_AUDIO_BASE64) }).type).toBe('input_audio_buffer.append');
    expect(refusal({ type: 'response.create', response: { instructions: 'x'.repeat(100_001) } })).toMatchObject({ code: 'string_above_max_length', param: 'response.instructions' });
    const tools = Array.from({ length: 129 }, (_, i) => ({ type: 'function', name: `tool_${i}` }));
    expect(refusal({ type: 'response.create', response: { tools } })).toMatchObject({ code: 'array_above_max_length', param: 'response.tools' });
    expect(refusal({ type: 'conversation.item.retrieve', item_id: 'x'.repeat(65) })).toMatchObject({ code: 'invalid_value', param: 'item_id' });
    expect(refusal({ type: 'conversation.item.delete', item_id: 'item 1' })).toMatchObject({ code: 'invalid_value', param: 'item_id' });
    expect(refusal({ type: 'conversation.item.create', item: { type: 'function_call_output', id: 'a/b', call_id: 'c', output: '' } })).toMatchObject({ code: 'invalid_value', param: 'item.id' });
  });

  it('nest too deeply', () => {
    let schema: object = { type: 'string' };
    for (let i = 0; i < 200; i++) schema = { type: 'object', properties: { a: schema } };
    expect(refusal({ type: 'response.create', event_id: 'deep', response: { tools: [{ type: 'function', name: 'f', parameters: schema }] } })).toMatchObject({ code: 'too_deeply_nested', eventId: 'deep' });
  });

  it('do not echo an event_id that is not a short string', () => {
    expect(refusal({ type: 'session.destroy', event_id: 12 }).eventId).toBeUndefined();
    const long = refusal({ type: 'input_audio_buffer.commit', event_id: 'e'.repeat(513) });
    expect(long).toMatchObject({ code: 'string_above_max_length', param: 'event_id', eventId: undefined });
  });
});
