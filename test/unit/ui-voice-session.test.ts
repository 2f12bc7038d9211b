import { describe, expect, it } from 'vitest';
import { INPUT_RATE as SERVER_INPUT_RATE } from '../../src/api/realtime/audio-format.js';
import { parseClientEvent, type ClientEvent } from '../../src/api/realtime/client-events.js';
import { defaultSessionConfig, mergeSessionPatch } from '../../src/api/realtime/session-config.js';
import { appendEvent, INPUT_RATE, OUTPUT_RATE, sessionUpdate, truncateEvent, type VoiceSettings } from '../../src/ui/voice-session.js';

/**
 * The client events of the playground's Voice panel (src/ui/voice-session.ts),
 * read by the server's own Realtime event parser and session settings.
 */

describe("the Voice panel's client events, as the server reads them", () => {
  const read = (event: Record<string, unknown>): ClientEvent => parseClientEvent(JSON.stringify(event), 'ga');
  const settings: VoiceSettings = { instructions: '  Be brief.  ', transcriptionModel: 'whisper-test', voice: 'amy', maxOutputTokens: 24, silenceMs: 700, bargeIn: false };

  it('session.update: 16 kHz PCM in, the chosen transcription model, voice, token limit and turn detection', () => {
    const event = read(sessionUpdate(settings));
    expect(event.type).toBe('session.update');
    const config = mergeSessionPatch(defaultSessionConfig('chat-model'), (event as Extract<ClientEvent, { type: 'session.update' }>).session);
    expect(config.input.format).toEqual({ type: 'audio/pcm', rate: INPUT_RATE });
    expect(config.input.transcription).toEqual({ model: 'whisper-test' });
    expect(config.input.turnDetection).toMatchObject({ type: 'server_vad', silenceDurationMs: 700, interruptResponse: false, createResponse: true });
    expect(config.output).toMatchObject({ voice: 'amy', format: { type: 'audio/pcm', rate: OUTPUT_RATE } });
    expect(config.maxOutputTokens).toBe(24);
    expect(config.instructions).toBe('Be brief.');
  });

  it("session.update with nothing chosen keeps the server's defaults, barge-in included", () => {
    const event = read(sessionUpdate({ instructions: ' ', transcriptionModel: '', voice: '', bargeIn: true })) as Extract<ClientEvent, { type: 'session.update' }>;
    const defaults = defaultSessionConfig('chat-model');
    const config = mergeSessionPatch(defaults, event.session);
    expect(config).toEqual({ ...defaults, input: { ...defaults.input, format: { type: 'audio/pcm', rate: INPUT_RATE } } });
  });

  it('the rates are the ones the server takes: 16 kHz in is its own rate, 24 kHz out its default', () => {
    expect(INPUT_RATE).toBe(SERVER_INPUT_RATE);
    expect(defaultSessionConfig('m').output.format).toEqual({ type: 'audio/pcm', rate: OUTPUT_RATE });
  });

  it('input_audio_buffer.append carries the samples’ bytes, also of a chunk that is a view into a larger buffer', () => {
    const whole = Int16Array.from({ length: 1700 }, (_, i) => Math.round(Math.sin(i / 9) * 20000));
    const chunk = whole.subarray(100, 1700);
    const event = read(appendEvent(chunk)) as Extract<ClientEvent, { type: 'input_audio_buffer.append' }>;
    expect(event.type).toBe('input_audio_buffer.append');
    const sent = Buffer.from(event.audio, 'base64');
    expect(sent.length).toBe(3200);
    expect([...new Int16Array(sent.buffer, sent.byteOffset, sent.length / 2)]).toEqual([...chunk]);
  });

  it('conversation.item.truncate: the whole milliseconds heard, never more', () => {
    expect(read(truncateEvent('item_abc', 1.2349))).toMatchObject({ type: 'conversation.item.truncate', itemId: 'item_abc', contentIndex: 0, audioEndMs: 1234 });
    expect(read(truncateEvent('item_abc', 0))).toMatchObject({ audioEndMs: 0 });
  });
});
