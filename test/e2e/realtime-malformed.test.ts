import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENTS_PER_SECOND, MAX_FRAME_BYTES } from '../../src/http/routes/realtime.js';
import { MAX_AUDIO_BASE64 } from '../../src/api/realtime/fields.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { busyModels, connectRaw, type RawSession, type WireEvent } from '../helpers/realtime.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * A corpus of malformed client traffic on GET /v1/realtime, over a raw `ws`
 * socket (no SDK sends these): broken and non-object JSON, unknown events,
 * wrongly typed fields, broken audio, oversized appends and frames, binary
 * frames, hostile nesting, events racing a close, many sockets at once and
 * a burst over the rate limit. Each bad event must be answered with an
 * `error` event in OpenAI's shape (its event_id echoed) and never a server
 * fault, the session must go on (a session.update still gets
 * session.updated), and afterwards the server must be healthy with no model
 * lease left behind.
 */

let server: TestServer;
const query = `?model=${CHAT_MODEL_ID}`;

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1, parallel: 2 } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
});

afterAll(async () => {
  await server?.stop();
});

/** An error event exactly in OpenAI's shape. */
function expectErrorShape(event: WireEvent): void {
  expect(Object.keys(event).sort()).toEqual(['error', 'event_id', 'type']);
  expect(event.type).toBe('error');
  expect(typeof event.event_id).toBe('string');
  const error = event.error as Record<string, unknown>;
  expect(Object.keys(error).sort()).toEqual(['code', 'event_id', 'message', 'param', 'type']);
  expect(error.type).toBe('invalid_request_error');
  expect(typeof error.message).toBe('string');
  expect(error.message).not.toMatch(/\n\s+at /); // no stack trace
}

/** The session still works: a session.update is answered with session.updated. */
async function expectUsable(session: RawSession): Promise<void> {
  const from = session.log.events.length;
  session.send({ type: 'session.update', session: { type: 'realtime', instructions: `still here ${from}` } });
  const updated = await session.log.next('session.updated', from, 10_000);
  expect(updated.session).toMatchObject({ instructions: `still here ${from}` });
}

const nested = (depth: number): unknown => (depth === 0 ? { type: 'string' } : { type: 'object', properties: { x: nested(depth - 1) } });
const b64 = (bytes: number) => Buffer.alloc(bytes).toString('base64');

/** [name, frame, the error's code, its param, the event_id it echoes]. */
const CORPUS: Array<[string, string | Buffer, string, string | null, string | null]> = [
  ['text that is not JSON', 'hello', 'invalid_json', null, null],
  ['truncated JSON', '{"type": "session.update", "session": {', 'invalid_json', null, null],
  ['a JSON array', '[{"type":"session.update"}]', 'invalid_json', null, null],
  ['a JSON number', '42', 'invalid_json', null, null],
  ['a JSON string', '"session.update"', 'invalid_json', null, null],
  ['JSON null', 'null', 'invalid_json', null, null],
  ['an object without a type', '{"event_id":"e_notype"}', 'missing_required_parameter', 'type', 'e_notype'],
  ['a type that is not a string', JSON.stringify({ type: 5, event_id: 'e_type5' }), 'invalid_type', 'type', 'e_type5'],
  ['an unknown event type', JSON.stringify({ type: 'session.destroy', event_id: 'e_unknown' }), 'unknown_event', 'type', 'e_unknown'],
  ['a server event sent by the client', JSON.stringify({ type: 'response.output_audio.delta', delta: '', event_id: 'e_server' }), 'unknown_event', 'type', 'e_server'],
  ['a type of 10 kB', JSON.stringify({ type: 'x'.repeat(10_000) }), 'unknown_event', 'type', null],
  ['an event_id that is not a string', JSON.stringify({ type: 'input_audio_buffer.clear', event_id: 7 }), 'invalid_type', 'event_id', null],
  ['an event_id over 512 characters', JSON.stringify({ type: 'input_audio_buffer.clear', event_id: 'e'.repeat(600) }), 'string_above_max_length', 'event_id', null],
  ['an unknown field', JSON.stringify({ type: 'input_audio_buffer.clear', event_id: 'e_field', loud: true }), 'unknown_parameter', 'loud', 'e_field'],
  ['a session that is not an object', JSON.stringify({ type: 'session.update', session: 'fast', event_id: 'e_s1' }), 'invalid_type', 'session', 'e_s1'],
  ['instructions that are a number', JSON.stringify({ type: 'session.update', session: { instructions: 5 }, event_id: 'e_s2' }), 'invalid_type', 'session.instructions', 'e_s2'],
  ['an unknown session field', JSON.stringify({ type: 'session.update', session: { type: 'realtime', volume: 11 }, event_id: 'e_s3' }), 'unknown_parameter', 'session.volume', 'e_s3'],
  ['an unsupported sample rate', JSON.stringify({ type: 'session.update', session: { audio: { input: { format: { type: 'audio/pcm', rate: 44100 } } } }, event_id: 'e_s4' }), 'invalid_value', 'session.audio.input.format.rate', 'e_s4'],
  ['a threshold that is a string', JSON.stringify({ type: 'session.update', session: { audio: { input: { turn_detection: { type: 'server_vad', threshold: 'high' } } } }, event_id: 'e_s5' }), 'invalid_type', 'session.audio.input.turn_detection.threshold', 'e_s5'],
  ['tool parameters nested 1000 deep', JSON.stringify({ type: 'session.update', session: { tools: [{ type: 'function', name: 'f', parameters: nested(1000) }] }, event_id: 'e_deep' }), 'too_deeply_nested', null, 'e_deep'],
  ['a voice description that is a number', JSON.stringify({ type: 'session.update', session: { type: 'realtime', audio: { output: { voice_description: 5 } } }, event_id: 'e_v1' }), 'invalid_type', 'session.audio.output.voice_description', 'e_v1'],
  ['a reference that is no audio', JSON.stringify({ type: 'session.update', session: { type: 'realtime', audio: { output: { ref_audio: Buffer.from('hello, not audio').toString('base64') } } }, event_id: 'e_v2' }), 'invalid_audio', 'session.audio.output.ref_audio', 'e_v2'],
  ['audio that is a number', JSON.stringify({ type: 'input_audio_buffer.append', audio: 5, event_id: 'e_a1' }), 'invalid_type', 'audio', 'e_a1'],
  ['an append without audio', JSON.stringify({ type: 'input_audio_buffer.append', event_id: 'e_a2' }), 'missing_required_parameter', 'audio', 'e_a2'],
  ['audio that is not base64', JSON.stringify({ type: 'input_audio_buffer.append', audio: 'not base64!', event_id: 'e_a3' }), 'invalid_value', 'audio', 'e_a3'],
  ['PCM16 with an odd number of bytes', JSON.stringify({ type: 'input_audio_buffer.append', audio: b64(3), event_id: 'e_a4' }), 'invalid_audio', 'audio', 'e_a4'],
  ['a commit of an empty buffer', JSON.stringify({ type: 'input_audio_buffer.commit', event_id: 'e_c1' }), 'input_audio_buffer_commit_empty', null, 'e_c1'],
  ['an item of an unknown role', JSON.stringify({ type: 'conversation.item.create', item: { type: 'message', role: 'robot', content: [] }, event_id: 'e_i1' }), 'invalid_value', 'item.role', 'e_i1'],
  ['an item id with a path in it', JSON.stringify({ type: 'conversation.item.delete', item_id: '../../etc', event_id: 'e_i2' }), 'invalid_value', 'item_id', 'e_i2'],
  ['an item that does not exist', JSON.stringify({ type: 'conversation.item.retrieve', item_id: 'item_nope', event_id: 'e_i3' }), 'invalid_value', 'item_id', 'e_i3'],
  ['a truncation at a time that is a string', JSON.stringify({ type: 'conversation.item.truncate', item_id: 'item_nope', content_index: 0, audio_end_ms: 'soon', event_id: 'e_i4' }), 'invalid_type', 'audio_end_ms', 'e_i4'],
  ['a negative content index', JSON.stringify({ type: 'conversation.item.truncate', item_id: 'item_nope', content_index: -1, audio_end_ms: 0, event_id: 'e_i5' }), 'invalid_value', 'content_index', 'e_i5'],
  ['a negative token limit', JSON.stringify({ type: 'response.create', response: { max_output_tokens: -1 }, event_id: 'e_r1' }), 'invalid_value', 'response.max_output_tokens', 'e_r1'],
  ['a cancel with no response', JSON.stringify({ type: 'response.cancel', event_id: 'e_r2' }), 'response_cancel_not_active', 'response_id', 'e_r2'],
  ['a binary frame', Buffer.from([0, 1, 2, 3]), 'invalid_event', null, null],
];

describe('malformed traffic on GET /v1/realtime', () => {
  it('answers each bad event with an error event in OpenAI\'s shape, and the session goes on', async () => {
    const session = await connectRaw(server.url, query);
    const mismatches: string[] = [];
    for (const [name, frame, code, param, eventId] of CORPUS) {
      const from = session.log.events.length;
      session.send(frame);
      const error = await session.log.next('error', from, 10_000);
      expectErrorShape(error);
      const got = error.error as { code: string; param: string | null; event_id: string | null };
      if (got.code !== code || got.param !== param || got.event_id !== eventId) mismatches.push(`${name}: ${JSON.stringify(got)}`);
      await expectUsable(session);
      // One error per bad event.
      expect(session.log.events.slice(from).filter((e) => e.type === 'error'), name).toHaveLength(1);
    }
    expect(mismatches).toEqual([]);
    session.socket.close();
  });

  it('refuses an append over 15 MiB of base64 with an error event, and a frame over 16 MiB with close 1009', async () => {
    const session = await connectRaw(server.url, query);
    const from = session.log.events.length;
    session.send({ type: 'input_audio_buffer.append', audio: 'AAAA'.repeat(MAX_AUDIO_BASE64 / 4 + 1), event_id: 'e_huge' });
    const error = await session.log.next('error', from, 30_000);
    expectErrorShape(error);
    expect(error.error).toMatchObject({ code: 'string_above_max_length', param: 'audio', event_id: 'e_huge' });
    await expectUsable(session);

    session.send('x'.repeat(MAX_FRAME_BYTES + 1));
    expect((await session.closed).code).toBe(1009);
  });

  it('tells a client without a usable model why, with an error event and a close', async () => {
    for (const [query, close, code] of [
      ['', 4400, 'missing_required_parameter'],
      ['?model=no-such-model', 4404, 'model_not_found'],
    ] as const) {
      const session = await connectRaw(server.url, query, { waitFor: 'error' });
      expect(session.log.events[0]!.error).toMatchObject({ code });
      expect((await session.closed).code).toBe(close);
    }
  });

  it('drops events beyond the rate limit with rate_limit_exceeded, and the session goes on', async () => {
    const session = await connectRaw(server.url, query);
    const burst = EVENTS_PER_SECOND * 2 + 100;
    for (let i = 0; i < burst; i++) session.send({ type: 'input_audio_buffer.clear', event_id: `e_${i}` });
    // Every event is answered: cleared, or refused.
    await expect.poll(() => session.log.events.filter((e) => e.type === 'input_audio_buffer.cleared' || e.type === 'error').length, { timeout: 10_000 }).toBe(burst);
    const refused = session.log.errors();
    expect(refused.length).toBeGreaterThan(0);
    for (const error of refused) {
      expectErrorShape(error);
      expect(error.error).toMatchObject({ code: 'rate_limit_exceeded' });
    }
    await new Promise((r) => setTimeout(r, 200));
    await expectUsable(session);
    session.socket.close();
  });

  it('serves 32 sockets at once', async () => {
    const sessions = await Promise.all(Array.from({ length: 32 }, () => connectRaw(server.url, query)));
    await Promise.all(
      sessions.map(async (session, i) => {
        session.send({ type: 'conversation.item.create', item: { id: `item_${i}`, type: 'message', role: 'user', content: [{ type: 'input_text', text: `hello ${i}` }] } });
        session.send({ type: 'conversation.item.retrieve', item_id: `item_${i}` });
        const retrieved = await session.log.next('conversation.item.retrieved');
        expect(retrieved.item).toMatchObject({ id: `item_${i}`, content: [{ type: 'input_text', text: `hello ${i}` }] });
        await expectUsable(session);
        expect(session.log.errors()).toEqual([]);
        session.socket.close();
      }),
    );
  });

  it('stops work that was asked for just before the client left, and releases its models', async () => {
    for (let i = 0; i < 3; i++) {
      const session = await connectRaw(server.url, query);
      session.send({ type: 'conversation.item.create', item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Tell me a story.' }] } });
      session.send({ type: 'response.create', response: { output_modalities: ['text'], max_output_tokens: 200 } });
      session.send({ type: 'input_audio_buffer.append', audio: b64(4800) });
      if (i > 0) await session.log.next('response.created');
      session.socket.close();
      // Events after the close go nowhere.
      session.send({ type: 'response.create' });
      await session.closed;
    }
  });

  it('leaves the server healthy, with no error logged and no model lease held', async () => {
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    await expect.poll(() => busyModels(server.engine), { timeout: 10_000 }).toEqual([]);
    expect(server.logs.filter((line) => /^realtime |error on \/v1\/realtime/.test(line))).toEqual([]);
  });
});
