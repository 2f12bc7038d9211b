import type OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHAT_MODEL_ID } from '../helpers/chat-model.js';
import { connectSdk, startVoiceServer, pcm24k, pcm24kMs, silence, SPEECH_WAV, streamAudio, type EventOf } from '../helpers/realtime.js';
import type { TestServer } from '../helpers/server.js';

/**
 * Barge-in through the official `openai` Node SDK: the user speaks over a
 * spoken answer, server VAD hears it and cancels the answer, and the client
 * truncates the assistant's item to the audio it played, so the model's
 * memory of its answer is what was heard. Then /metrics counts the session
 * and a spoken turn's latency. Synthetic models (tiny Qwen3, Whisper, Piper):
 * the answers are random text, checked for their flow, not their words.
 */

let server: TestServer;
let client: OpenAI;
let speech: Buffer;

beforeAll(async () => {
  ({ server, client } = await startVoiceServer({ metrics: true }));
  speech = await pcm24k(SPEECH_WAV);
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

describe('barge-in and truncation through the openai SDK', () => {
  it('cancels the spoken answer when the user speaks, and truncates it to what was heard', async () => {
    const { rt, events, next } = await connectSdk(client, CHAT_MODEL_ID);
    // A long answer (a random model rarely ends on its own), and no new answer after the user's turn: the session stays quiet for the truncation.
    rt.send({
      type: 'session.update',
      session: { type: 'realtime', max_output_tokens: 400, audio: { input: { turn_detection: { type: 'server_vad', create_response: false, interrupt_response: true } } } },
    });
    await next('session.updated');
    rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Tell me a long story about the sea.' }] } });
    // The user starts talking as soon as the answer is heard.
    rt.once('response.output_audio.delta', () => streamAudio(rt, Buffer.concat([speech, silence(1)])));
    rt.send({ type: 'response.create' });

    const started = events.indexOf(await next('input_audio_buffer.speech_started'));
    const done = (await next('response.done')) as EventOf<'response.done'>;
    expect(events.indexOf(done)).toBeGreaterThan(started);
    expect(done.response.status).toBe('cancelled');
    expect(done.response.status_details).toMatchObject({ type: 'cancelled', reason: 'turn_detected' });
    const item = (await next('response.output_item.done')) as EventOf<'response.output_item.done'>;
    expect(item.item).toMatchObject({ type: 'message', role: 'assistant', status: 'incomplete' });
    expect(events.indexOf(item)).toBeLessThan(events.indexOf(done));
    const itemId = item.item.id!;
    const full = (await next('response.output_audio_transcript.done')) as EventOf<'response.output_audio_transcript.done'>;
    const received = events.filter((e): e is EventOf<'response.output_audio.delta'> => e.type === 'response.output_audio.delta' && e.item_id === itemId);
    const receivedMs = pcm24kMs(received.reduce((n, e) => n + Buffer.from(e.delta, 'base64').length, 0));
    expect(receivedMs).toBeGreaterThan(50);

    // The client played half of what it received when the user spoke.
    const audioEndMs = Math.floor(receivedMs / 2);
    const before = events.length;
    rt.send({ type: 'conversation.item.truncate', item_id: itemId, content_index: 0, audio_end_ms: audioEndMs });
    const truncated = (await next('conversation.item.truncated', before)) as EventOf<'conversation.item.truncated'>;
    expect(truncated).toMatchObject({ item_id: itemId, content_index: 0, audio_end_ms: audioEndMs });
    rt.send({ type: 'conversation.item.retrieve', item_id: itemId });
    const retrieved = (await next('conversation.item.retrieved', before)) as EventOf<'conversation.item.retrieved'>;
    const heard = (retrieved.item as { content: Array<{ transcript?: string }> }).content[0]?.transcript ?? '';
    // The text ran ahead of the speech when the answer was cut: what was heard is a strict prefix of it, word for word.
    expect(heard.length).toBeLessThan(full.transcript.length);
    const words = (text: string) => text.split(/\s+/).filter(Boolean);
    expect(words(full.transcript).slice(0, words(heard).length)).toEqual(words(heard));

    // Past the end of the audio: an error naming audio_end_ms, and the session goes on.
    const beyond = events.length;
    rt.send({ type: 'conversation.item.truncate', item_id: itemId, content_index: 0, audio_end_ms: Math.ceil(receivedMs) + 5000, event_id: 'evt_beyond' });
    const error = (await next('error', beyond)) as EventOf<'error'>;
    expect(error.error).toMatchObject({ type: 'invalid_request_error', param: 'audio_end_ms', event_id: 'evt_beyond' });
    rt.send({ type: 'session.update', session: { type: 'realtime', instructions: 'Be brief.' } });
    await next('session.updated', beyond);
    expect(events.filter((e) => e.type === 'error')).toEqual([error]);
    rt.close();
  }, 60_000);

  it('counts the session and the spoken turn\'s latency in /metrics', async () => {
    const { rt, next } = await connectSdk(client, CHAT_MODEL_ID);
    rt.send({ type: 'session.update', session: { type: 'realtime', max_output_tokens: 8 } });
    await next('session.updated');
    // "hello world" and the pause after it: one turn, answered when it ends.
    streamAudio(rt, Buffer.concat([speech.subarray(0, 2.2 * 24_000 * 2), silence(1)]));
    await next('response.output_audio.delta');
    await next('response.done');
    rt.close();
    const metrics = async () => (await fetch(`${server.url}/metrics`)).text();
    const text = await metrics();
    expect(Number(/^lserve_realtime_sessions_total\{type="realtime"\} (\S+)$/m.exec(text)?.[1])).toBeGreaterThanOrEqual(1);
    const latencies = Number(new RegExp(`^lserve_realtime_voice_latency_seconds_count\\{model="${CHAT_MODEL_ID}"\\} (\\S+)$`, 'm').exec(text)?.[1]);
    expect(latencies).toBeGreaterThanOrEqual(1);
    const latency = Number(new RegExp(`^lserve_realtime_voice_latency_seconds_sum\\{model="${CHAT_MODEL_ID}"\\} (\\S+)$`, 'm').exec(text)?.[1]);
    expect(latency).toBeGreaterThan(0);
    // Closed sessions leave the gauge of open ones.
    await expect.poll(async () => /^lserve_realtime_sessions\{type="realtime"\} (\S+)$/m.exec(await metrics())?.[1], { timeout: 5000 }).toBe('0');
  }, 60_000);
});
