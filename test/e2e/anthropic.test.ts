import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';

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
    expect(message.usage.input_tokens).toBeGreaterThan(5);
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

  it('max_tokens → stop_reason max_tokens', async () => {
    const res = await post({ model: CHAT_MODEL_ID, max_tokens: 3, temperature: 0, messages: [{ role: 'user', content: 'x' }], stop_sequences: ['\u0000never'] });
    const body = (await res.json()) as { stop_reason: string; usage: { output_tokens: number } };
    expect(res.status).toBe(200);
    if (body.stop_reason === 'max_tokens') expect(body.usage.output_tokens).toBe(3);
  });

  it.each([
    ['tools', { tools: [{ name: 'x', input_schema: { type: 'object' } }] }],
    ['tool_choice', { tool_choice: { type: 'auto' } }],
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
