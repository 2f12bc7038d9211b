import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_INSTRUCTIONS } from '../../src/api/realtime/session-config.js';
import { chat, collectChat } from '../../src/core/tasks/chat.js';
import { CHAT_MODEL_ID } from '../helpers/chat-model.js';
import { connectSdk, startVoiceServer, pcm24k, silence, SPEECH_WAV, streamAudio, type EventOf, type ServerEvent } from '../helpers/realtime.js';
import type { TestServer } from '../helpers/server.js';

/**
 * The Realtime API through the official `openai` Node SDK's WebSocket client
 * (OpenAIRealtimeWS), unmodified, on the synthetic fixtures: a tiny Qwen3
 * chat model, a tiny Whisper and a synthetic Piper voice. Speech is
 * test/fixtures/audio/speech.wav (espeak-ng), which Silero VAD hears as
 * speech; the models are random, so answers are checked for their shape
 * and flow, not their words. (test/helpers/realtime.ts opens the SDK's
 * socket over plain TCP.)
 */

let server: TestServer;
let client: OpenAI;
let speech: Buffer;

beforeAll(async () => {
  ({ server, client } = await startVoiceServer());
  speech = await pcm24k(SPEECH_WAV);
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

const connect = (model = CHAT_MODEL_ID) => connectSdk(client, model);
const types = (events: ServerEvent[]) => events.map((e) => e.type);

describe('Realtime API through the openai SDK', () => {
  it('hears a spoken turn, transcribes it and answers in text and audio', async () => {
    const { rt, events, next } = await connect();
    // An unknown speech model is refused at its field; the installed one is taken (lserve's `audio.output.model`).
    rt.send({ type: 'session.update', session: { type: 'realtime', audio: { output: { model: 'no-such-voice-model' } } } as never });
    const refused = (await next('error')) as EventOf<'error'>;
    expect(refused.error).toMatchObject({ param: 'session.audio.output.model' });
    rt.send({ type: 'session.update', session: { type: 'realtime', max_output_tokens: 24, audio: { output: { voice: 'marin', model: 'piper-test' } } } as never });
    await next('session.updated');
    streamAudio(rt, Buffer.concat([silence(0.5), speech, silence(1.5)]));
    const started = await next('input_audio_buffer.speech_started');
    const stopped = await next('input_audio_buffer.speech_stopped');
    expect((stopped as { audio_end_ms: number }).audio_end_ms).toBeGreaterThan((started as { audio_start_ms: number }).audio_start_ms);
    const transcript = await next('conversation.item.input_audio_transcription.completed');
    expect(typeof (transcript as { transcript: string }).transcript).toBe('string');
    const done = (await next('response.done')) as EventOf<'response.done'>;
    // A random model rarely ends on its own before max_output_tokens: either end is a whole response.
    expect(done.response.status, JSON.stringify(events.filter((e) => e.type === "error"))).toMatch(/^(completed|incomplete)$/);
    expect(done.response.usage?.output_tokens).toBeGreaterThan(0);
    const seen = types(events);
    const order = ['input_audio_buffer.speech_started', 'input_audio_buffer.speech_stopped', 'input_audio_buffer.committed', 'conversation.item.input_audio_transcription.completed', 'response.created', 'response.output_item.added', 'response.output_audio_transcript.delta', 'response.output_audio.delta', 'response.output_audio.done', 'response.output_item.done', 'response.done'];
    const at = order.map((t) => seen.indexOf(t as never));
    expect(at.every((i) => i >= 0), `events: ${seen.join(', ')}`).toBe(true);
    expect([...at].sort((a, b) => a - b)).toEqual(at);
    const audio = events.filter((e) => e.type === 'response.output_audio.delta').reduce((n, e) => n + Buffer.from((e as { delta: string }).delta, 'base64').length, 0);
    expect(audio).toBeGreaterThan(2400); // more than 50 ms of 24 kHz PCM16
    expect(events.filter((e) => e.type === 'error')).toEqual([refused]);
    rt.close();
  }, 120_000);

  it('answers a turn that ended while the answer before it was still going', async () => {
    const { rt, events, next } = await connectSdk(client, CHAT_MODEL_ID);
    // speech.wav is two utterances 1.5 s apart: two turns. Speech does not interrupt here, so the first answer runs on.
    rt.send({ type: 'session.update', session: { type: 'realtime', max_output_tokens: 24, audio: { input: { turn_detection: { type: 'server_vad', interrupt_response: false } } } } });
    await next('session.updated');
    streamAudio(rt, Buffer.concat([silence(0.5), speech, silence(1.5)]));
    const first = await next('response.done');
    const second = await next('response.done', events.indexOf(first) + 1);
    const stopped = events.filter((e) => e.type === 'input_audio_buffer.speech_stopped');
    expect(stopped).toHaveLength(2);
    // The second answer came after the second turn, and reads it.
    expect(events.indexOf(second)).toBeGreaterThan(events.indexOf(stopped[1]!));
    expect(events.filter((e) => e.type === 'error')).toEqual([]);
    rt.close();
  }, 120_000);

  it('evaluates the conversation while the user speaks: the answer evaluates only the turn', async () => {
    const { rt, events, next } = await connect();
    rt.send({ type: 'session.update', session: { type: 'realtime', output_modalities: ['text'], max_output_tokens: 1 } });
    await next('session.updated');
    // An answer the model never generated (as one cut at what the user heard): without a warm-up the turn evaluates it.
    const said = 'Rivers run to the sea, and the sea is never full; they rise with the rain in spring and fall in the summer heat, and people have told stories about them for as long as there have been people.';
    const text = (role: 'user' | 'assistant', value: string) => ({ type: 'message', role, content: [{ type: role === 'user' ? 'input_text' : 'output_text', text: value }] }) as never;
    rt.send({ type: 'conversation.item.create', item: text('user', 'Tell me about rivers.') });
    rt.send({ type: 'conversation.item.create', item: text('assistant', said) });
    await next('conversation.item.done', events.findIndex((e) => e.type === 'conversation.item.added' && (e as { item: { role?: string } }).item.role === 'assistant'));
    streamAudio(rt, Buffer.concat([silence(0.5), speech.subarray(0, 1.4 * 24_000 * 2), silence(1)]));
    const done = (await next('response.done')) as EventOf<'response.done'>;
    const usage = done.response.usage!;
    // What comes before the turn's text, as the session renders it: the request with the turn empty, through the same template.
    const before = (await collectChat(chat(server.engine, { model: CHAT_MODEL_ID, messages: [{ role: 'system', content: DEFAULT_INSTRUCTIONS }, { role: 'user', content: 'Tell me about rivers.' }, { role: 'assistant', content: said }, { role: 'user', content: '' }], maxTokens: 1, thinking: false }, new AbortController().signal))).usage.promptTokens;
    // All of it cached but the template after the turn's (empty) text: "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n".
    expect(usage.input_token_details?.cached_tokens).toBeGreaterThanOrEqual(before - 12);
    rt.close();
  }, 120_000);

  it('round-trips a function call', async () => {
    const { rt, events, next } = await connect();
    rt.send({
      type: 'session.update',
      session: {
        type: 'realtime',
        output_modalities: ['text'],
        audio: { input: { turn_detection: null } },
        tools: [{ type: 'function', name: 'get_time', description: 'The current time', parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'] } }],
        tool_choice: 'required',
        max_output_tokens: 48,
      },
    });
    await next('session.updated');
    rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'What time is it in Paris?' }] } });
    rt.send({ type: 'response.create' });
    const call = (await next("response.function_call_arguments.done")) as EventOf<'response.function_call_arguments.done'>;
    expect(call.name).toBe('get_time');
    expect(JSON.parse(call.arguments)).toHaveProperty('zone');
    const first = await next('response.done');
    rt.send({ type: 'session.update', session: { type: 'realtime', tool_choice: 'none' } });
    rt.send({ type: 'conversation.item.create', item: { type: 'function_call_output', call_id: call.call_id, output: '{"time":"12:00"}' } });
    rt.send({ type: 'response.create' });
    const second = (await next('response.done', events.indexOf(first) + 1)) as EventOf<'response.done'>;
    expect(second.response.status, JSON.stringify(events.filter((e) => e.type === "error"))).toMatch(/completed|incomplete/);
    expect(events.filter((e) => e.type === 'error')).toEqual([]);
    rt.close();
  }, 120_000);
});
