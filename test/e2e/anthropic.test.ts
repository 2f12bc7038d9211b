import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { CHAT_MODEL_ID, NEVER_END, TOKENS, tinyQwen3File } from '../helpers/chat-model.js';

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1 } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
});

afterAll(async () => {
  await server?.stop();
});

const clientAt = (path: string) => new Anthropic({ baseURL: `${server.url}${path}`, apiKey: 'unused', maxRetries: 0 });

describe.each([['/v1/anthropic'], ['']])('Anthropic messages through the official SDK at base URL "%s"', (path) => {
  it('messages.create returns the message shape', async () => {
    const message = await clientAt(path).messages.create({
      model: CHAT_MODEL_ID,
      max_tokens: 4,
      system: [{ type: 'text', text: 'Be brief.' }],
      messages: [{ role: 'user', content: 'hello' }],
    });
    expect(message.type).toBe('message');
    expect(message.role).toBe('assistant');
    expect(message.id).toMatch(/^msg_/);
    expect(message.content.at(-1)!.type).toBe('text');
    expect(['end_turn', 'max_tokens']).toContain(message.stop_reason);
    expect(message.stop_sequence).toBeNull();
    // The whole prompt: what was evaluated now and what the cache held (a second client sends the same prompt).
    expect(message.usage.input_tokens + (message.usage.cache_read_input_tokens ?? 0)).toBeGreaterThan(5);
    expect(message.usage.output_tokens).toBeGreaterThan(0);
    expect(message.usage.output_tokens).toBeLessThanOrEqual(4);
  });

  it('streams the Anthropic event sequence', async () => {
    const stream = clientAt(path).messages.stream({ model: CHAT_MODEL_ID, max_tokens: 5, top_k: 20, top_p: 0.9, messages: [{ role: 'user', content: 'hi' }] });
    const types: string[] = [];
    stream.on('streamEvent', (event) => types.push(event.type));
    const final = await stream.finalMessage();
    expect(types[0]).toBe('message_start');
    expect(types).toContain('content_block_start');
    expect(types.at(-3)).toBe('content_block_stop');
    expect(types.at(-2)).toBe('message_delta');
    expect(types.at(-1)).toBe('message_stop');
    expect(final.usage.output_tokens).toBeGreaterThan(0);
    expect(['end_turn', 'max_tokens']).toContain(final.stop_reason);
  });
});

describe('Anthropic request checking', () => {
  const post = (body: unknown, path = '/v1/messages') =>
    fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  // The random model would almost never pick an end token on its own: logit_bias (lserve's extension on this
  // route) bans both end tokens to make a generation run to its limit, or forces <|im_end|> to end it at once.
  const FORCE_END = { [TOKENS.imEnd]: 100 };
  const ask = (patch: Record<string, unknown>) => ({ model: CHAT_MODEL_ID, max_tokens: 5, temperature: 0, messages: [{ role: 'user', content: 'x' }], ...patch });

  interface Message {
    content: Array<{ type: string; text: string }>;
    stop_reason: string;
    stop_sequence: string | null;
    usage: { output_tokens: number };
  }

  /** The same request streamed: its text, and the message_delta event that ends it. */
  async function streamed(body: Record<string, unknown>): Promise<{ text: string; delta: { stop_reason: string; stop_sequence: string | null }; outputTokens: number }> {
    const res = await post({ ...body, stream: true });
    expect(res.status).toBe(200);
    const events = (await res.text())
      .split('\n')
      .filter((line) => line.startsWith('data: '))
      .map((line) => JSON.parse(line.slice(6)) as { type: string; delta?: { text?: string; stop_reason?: string; stop_sequence?: string | null }; usage?: { output_tokens: number } });
    const end = events.filter((e) => e.type === 'message_delta');
    expect(end).toHaveLength(1);
    const text = events.map((e) => (e.type === 'content_block_delta' ? (e.delta?.text ?? '') : '')).join('');
    return { text, delta: end[0]!.delta as { stop_reason: string; stop_sequence: string | null }, outputTokens: end[0]!.usage!.output_tokens };
  }

  it('max_tokens reached → stop_reason max_tokens, with exactly that many tokens (streamed too)', async () => {
    const body = ask({ max_tokens: 3, logit_bias: NEVER_END });
    const res = await post(body);
    expect(res.status).toBe(200);
    const message = (await res.json()) as Message;
    expect(message.stop_reason).toBe('max_tokens');
    expect(message.stop_sequence).toBeNull();
    expect(message.usage.output_tokens).toBe(3);
    const stream = await streamed(body);
    expect(stream.delta).toMatchObject({ stop_reason: 'max_tokens', stop_sequence: null });
    expect(stream.outputTokens).toBe(3);
  });

  it('a stop sequence hit → stop_reason stop_sequence naming it, the text cut before it (streamed too)', async () => {
    // Greedy decoding: the same prompt gives the same tokens, so a piece of the unstopped answer is met again.
    const free = (await (await post(ask({ max_tokens: 8, logit_bias: NEVER_END }))).json()) as Message;
    const full = free.content.at(-1)!.text;
    const stop = full.slice(2, 4);
    expect(stop.length).toBe(2);
    const body = ask({ max_tokens: 8, logit_bias: NEVER_END, stop_sequences: ['\u0000never', stop] });
    const message = (await (await post(body)).json()) as Message;
    expect(message.stop_reason).toBe('stop_sequence');
    expect(message.stop_sequence).toBe(stop);
    expect(message.content.at(-1)!.text).toBe(full.slice(0, full.indexOf(stop)));
    const stream = await streamed(body);
    expect(stream.delta).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: stop });
    expect(stream.text).toBe(full.slice(0, full.indexOf(stop)));
  });

  it('the model ending its turn → stop_reason end_turn (streamed too)', async () => {
    const body = ask({ logit_bias: FORCE_END, stop_sequences: ['\u0000never'] });
    const message = (await (await post(body)).json()) as Message;
    expect(message.stop_reason).toBe('end_turn');
    expect(message.stop_sequence).toBeNull();
    // The first token is the end: nothing to say, and at most that token counted.
    expect(message.content.at(-1)!.text).toBe('');
    expect(message.usage.output_tokens).toBeLessThanOrEqual(1);
    const stream = await streamed(body);
    expect(stream.delta).toMatchObject({ stop_reason: 'end_turn', stop_sequence: null });
    expect(stream.text).toBe('');
    expect(stream.outputTokens).toBeLessThanOrEqual(1);
  });

  it('checks logit_bias as chat completions do', async () => {
    const res = await post(ask({ logit_bias: { '99999999': 1 } }));
    expect(res.status).toBe(400);
    const body = (await res.json()) as { type: string; error: { type: string; message: string } };
    expect(body).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
    expect(body.error.message).toContain('logit_bias');
  });

  it.each([
    ['tools', { tools: [{ name: 'x', input_schema: { type: 'string' } }] }],
    ['tool_choice', { tool_choice: { type: 'any' } }],
    ['compaction', { compaction: { type: 'summarize' } }],
    ['messages.0.content.0.type', { messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }],
    ['max_tokens', { max_tokens: undefined }],
  ])('rejects %s with an Anthropic-shaped 400', async (field, patch) => {
    const res = await post({ model: CHAT_MODEL_ID, max_tokens: 3, messages: [{ role: 'user', content: 'x' }], ...patch }, '/v1/anthropic/messages');
    expect(res.status).toBe(400);
    const body = (await res.json()) as { type: string; error: { type: string; message: string } };
    expect(body.type).toBe('error');
    expect(body.error.type).toBe('invalid_request_error');
    expect(body.error.message).toContain(field.split('.')[0]);
  });

  it('unknown model → Anthropic not_found_error', async () => {
    const res = await post({ model: 'nope', max_tokens: 3, messages: [{ role: 'user', content: 'x' }] });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe('not_found_error');
  });
});
