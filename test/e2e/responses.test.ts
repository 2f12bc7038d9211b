import OpenAI from 'openai';
import type { ResponseCreateParamsNonStreaming, ResponseStreamEvent } from 'openai/resources/responses/responses';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { CHAT_MODEL_ID, NEVER_END, startChatServer, TOKENS, tinyQwen3File } from '../helpers/chat-model.js';

/** lserve's extensions of the request body, which the openai SDK passes through untouched. */
type Extended<T> = T & { logit_bias?: Record<number, number>; thinking_tokens?: number; presence_penalty?: number; frequency_penalty?: number };

let server: TestServer;
let client: OpenAI;

beforeAll(async () => {
  ({ server, client } = await startChatServer());
});

afterAll(async () => {
  await server?.stop();
});

const base = { model: CHAT_MODEL_ID, temperature: 0 } as const;
const create = (params: Extended<ResponseCreateParamsNonStreaming>) => client.responses.create(params);
/** '"' in Qwen's vocabulary. */
const QUOTE = 1;
const THINK_BIAS = { [TOKENS.think]: 4.5, [TOKENS.newline]: 3, [TOKENS.endThink]: -100, ...NEVER_END };

const weatherTool = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Current weather of a city',
  parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'London'] } }, required: ['city'] },
  strict: true,
};

/** Each event type's fields, as the openai package's ResponseStreamEvent union declares them (besides type and sequence_number). */
const WHERE = ['item_id', 'output_index'];
const EVENT_FIELDS: Record<string, string[]> = {
  'response.created': ['response'],
  'response.in_progress': ['response'],
  'response.completed': ['response'],
  'response.incomplete': ['response'],
  'response.failed': ['response'],
  error: ['code', 'message', 'param'],
  'response.output_item.added': ['item', 'output_index'],
  'response.output_item.done': ['item', 'output_index'],
  'response.content_part.added': [...WHERE, 'content_index', 'part'],
  'response.content_part.done': [...WHERE, 'content_index', 'part'],
  'response.output_text.delta': [...WHERE, 'content_index', 'delta', 'logprobs'],
  'response.output_text.done': [...WHERE, 'content_index', 'text', 'logprobs'],
  'response.reasoning_text.delta': [...WHERE, 'content_index', 'delta'],
  'response.reasoning_text.done': [...WHERE, 'content_index', 'text'],
  'response.function_call_arguments.delta': [...WHERE, 'delta'],
  'response.function_call_arguments.done': [...WHERE, 'name', 'arguments'],
  'response.custom_tool_call_input.delta': [...WHERE, 'delta'],
  'response.custom_tool_call_input.done': [...WHERE, 'input'],
};
/** The fields the openai package's Response type requires. */
const RESPONSE_FIELDS = ['id', 'created_at', 'error', 'incomplete_details', 'instructions', 'metadata', 'model', 'object', 'output', 'parallel_tool_calls', 'temperature', 'tool_choice', 'tools', 'top_p'];

/** Every event has exactly its type's fields, numbered from 0 in order; every response snapshot has the required fields. */
async function collect(stream: AsyncIterable<ResponseStreamEvent>): Promise<ResponseStreamEvent[]> {
  const events: ResponseStreamEvent[] = [];
  for await (const event of stream) events.push(event);
  events.forEach((event, i) => {
    expect(event.sequence_number).toBe(i);
    const fields = EVENT_FIELDS[event.type];
    expect(fields, event.type).toBeDefined();
    expect(Object.keys(event).sort(), event.type).toEqual([...fields!, 'type', 'sequence_number'].sort());
    if ('response' in event) for (const field of RESPONSE_FIELDS) expect(event.response, field).toHaveProperty(field);
  });
  return events;
}

describe('POST /v1/responses through the openai client', () => {
  it('answers a string input with the response object and real usage', async () => {
    const res = await create({ ...base, input: 'Say hello', max_output_tokens: 5, metadata: { run: 'a' }, store: false });
    expect(res.id).toMatch(/^resp_/);
    expect(res.object).toBe('response');
    expect(res.model).toBe(CHAT_MODEL_ID);
    expect(['completed', 'incomplete']).toContain(res.status);
    expect(res.metadata).toEqual({ run: 'a' });
    // The SDK's type leaves `store` out; OpenAI's API returns it.
    expect((res as unknown as { store: boolean }).store).toBe(false);
    const message = res.output.find((item) => item.type === 'message')!;
    expect(message.id).toMatch(/^msg_/);
    expect(message.content[0]).toMatchObject({ type: 'output_text', annotations: [] });
    expect(res.output_text).toBe(message.content.map((p) => (p.type === 'output_text' ? p.text : '')).join(''));
    expect(res.usage!.input_tokens).toBeGreaterThan(5);
    expect(res.usage!.output_tokens).toBeGreaterThan(0);
    expect(res.usage!.output_tokens).toBeLessThanOrEqual(5);
    expect(res.usage!.total_tokens).toBe(res.usage!.input_tokens + res.usage!.output_tokens);
    // Not stored: nothing to retrieve.
    await expect(client.responses.retrieve(res.id)).rejects.toMatchObject({ status: 404 });
  });

  it('stops at max_output_tokens as incomplete with exactly that many tokens', async () => {
    const res = await create({ ...base, input: 'count', max_output_tokens: 7, logit_bias: NEVER_END });
    expect(res.status).toBe('incomplete');
    expect(res.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    expect(res.usage!.output_tokens).toBe(7);
  });

  it('takes items and instructions into the prompt', async () => {
    const short = await create({ ...base, input: 'hi', max_output_tokens: 1 });
    const long = await create({
      ...base,
      instructions: 'You are terse.',
      input: [
        { type: 'message', role: 'developer', content: 'Answer in English.' },
        { role: 'user', content: [{ type: 'input_text', text: 'hi' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hello!', annotations: [] }], id: 'msg_1', status: 'completed' },
        { type: 'message', role: 'user', content: 'again' },
      ],
      max_output_tokens: 1,
    });
    expect(long.instructions).toBe('You are terse.');
    expect(long.usage!.input_tokens).toBeGreaterThan(short.usage!.input_tokens + 10);
  });

  it('streams every event in the documented order, numbered from 0', async () => {
    const stream = await client.responses.create({
      ...base,
      input: 'think, then answer',
      max_output_tokens: 30,
      stream: true,
      logit_bias: THINK_BIAS,
      presence_penalty: 2,
      frequency_penalty: 2,
    } as Extended<OpenAI.Responses.ResponseCreateParamsStreaming>);
    const events = await collect(stream);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((e) => e.type);
    expect(types.slice(0, 2)).toEqual(['response.created', 'response.in_progress']);
    const deltasOf = (type: string) => types.filter((t) => t === type).length;
    // Thinking is forced on and never closed: one reasoning item, cut off at the limit.
    expect(types.slice(2, 5)).toEqual(['response.output_item.added', 'response.content_part.added', 'response.reasoning_text.delta']);
    expect(deltasOf('response.reasoning_text.delta')).toBeGreaterThan(1);
    expect(types.slice(-4)).toEqual(['response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
    const final = events.at(-1)!;
    if (final.type !== 'response.incomplete') throw new Error('unreachable');
    const reasoning = final.response.output[0]!;
    expect(reasoning.type).toBe('reasoning');
    if (reasoning.type !== 'reasoning') throw new Error('unreachable');
    expect(reasoning.id).toMatch(/^rs_/);
    const text = events.filter((e) => e.type === 'response.reasoning_text.delta').map((e) => (e as { delta: string }).delta).join('');
    expect(reasoning.content![0]).toEqual({ type: 'reasoning_text', text });
    expect(final.response.usage!.output_tokens).toBe(30);
    // Every token is inside the thinking but the few that open it (`<think>`, a line break).
    const { reasoning_tokens } = final.response.usage!.output_tokens_details;
    expect(reasoning_tokens).toBeGreaterThanOrEqual(26);
    expect(reasoning_tokens).toBeLessThanOrEqual(30);
  });

  it('streams an answer as output_text events whose deltas make the final text', async () => {
    const stream = await client.responses.create({ ...base, input: 'stream please', max_output_tokens: 6, stream: true, logit_bias: NEVER_END, reasoning: { effort: 'none' } } as Extended<OpenAI.Responses.ResponseCreateParamsStreaming>);
    const events = await collect(stream);
    const types = events.map((e) => e.type);
    expect(types.filter((t) => !t.endsWith('.delta'))).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.incomplete',
    ]);
    const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => (e as { delta: string }).delta).join('');
    const done = events.find((e) => e.type === 'response.output_text.done') as { text: string; item_id: string };
    expect(done.text).toBe(text);
    const item = (events.find((e) => e.type === 'response.output_item.done') as { item: OpenAI.Responses.ResponseOutputMessage }).item;
    expect(item.id).toBe(done.item_id);
    expect(item.status).toBe('incomplete');
    const final = events.at(-1) as OpenAI.Responses.ResponseIncompleteEvent;
    expect(final.response.usage!.output_tokens_details.reasoning_tokens).toBe(0);
  });

  it('stops generating when the client hangs up, and stores nothing', async () => {
    const body = { ...base, input: 'go on', max_output_tokens: 1500, logit_bias: NEVER_END, reasoning: { effort: 'none' }, stream: true } as Extended<OpenAI.Responses.ResponseCreateParamsStreaming>;
    const generated: number[] = [];
    const off = server.engine.events.on((event) => {
      if (event.type === 'chat') generated.push(event.completionTokens);
    });
    try {
      // Uninterrupted, the generation makes all its tokens.
      for await (const event of await client.responses.create({ ...body, store: false })) void event;
      const controller = new AbortController();
      const stream = await client.responses.create(body, { signal: controller.signal });
      let id = '';
      for await (const event of stream) {
        if (event.type === 'response.created') id = event.response.id;
        if (event.type === 'response.output_text.delta') {
          controller.abort();
          break;
        }
      }
      for (let i = 0; generated.length < 2; i++) {
        if (i > 500) throw new Error('the generation did not end after the client left');
        await new Promise((r) => setTimeout(r, 20));
      }
      expect(generated[0]).toBe(1500);
      expect(generated[1]).toBeLessThan(750);
      await expect(client.responses.retrieve(id)).rejects.toMatchObject({ status: 404 });
    } finally {
      off();
    }
  });

  it('round-trips a function call: function_call out, function_call_output in, then an answer', async () => {
    const first = await create({ ...base, input: 'Weather in Paris?', tools: [weatherTool], tool_choice: 'required', max_output_tokens: 40 });
    expect(first.status).toBe('completed');
    const call = first.output.find((item) => item.type === 'function_call')!;
    expect(call.id).toMatch(/^fc_/);
    expect(call.name).toBe('get_weather');
    expect(['Paris', 'London']).toContain(JSON.parse(call.arguments).city);
    expect(first.tools[0]).toMatchObject({ type: 'function', name: 'get_weather', strict: true });

    const second = await create({
      ...base,
      tools: [weatherTool],
      max_output_tokens: 4,
      input: [{ role: 'user', content: 'Weather in Paris?' }, ...first.output, { type: 'function_call_output', call_id: call.call_id, output: '{"temperature_c": 21}' }],
    } as ResponseCreateParamsNonStreaming);
    expect(second.output.some((item) => item.type === 'message')).toBe(true);
    expect(second.usage!.input_tokens).toBeGreaterThan(first.usage!.input_tokens);
  });

  it('streams a named function call as function_call_arguments events', async () => {
    const stream = await client.responses.create({ ...base, input: 'Weather?', tools: [weatherTool], tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 40, stream: true });
    const events = await collect(stream);
    const done = events.find((e) => e.type === 'response.function_call_arguments.done');
    if (done?.type !== 'response.function_call_arguments.done') throw new Error('no function_call_arguments.done');
    expect(done.name).toBe('get_weather');
    const deltas = events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => (e as { delta: string }).delta).join('');
    expect(deltas).toBe(done.arguments);
    expect(events.at(-1)!.type).toBe('response.completed');
  });

  it('calls a custom tool with free-text input, streamed as custom_tool_call_input events', async () => {
    const stream = await client.responses.create({
      ...base,
      input: 'Run a command',
      tools: [{ type: 'custom', name: 'shell', description: 'Runs a shell command' }],
      tool_choice: 'required',
      max_output_tokens: 40,
      stream: true,
      // A random model never ends a free string by itself: favouring '"' closes it.
      logit_bias: { [QUOTE]: 10 },
    } as Extended<OpenAI.Responses.ResponseCreateParamsStreaming>);
    const events = await collect(stream);
    const done = events.find((e) => e.type === 'response.custom_tool_call_input.done');
    if (done?.type !== 'response.custom_tool_call_input.done') throw new Error('no custom_tool_call_input.done');
    const final = events.at(-1)!;
    if (final.type !== 'response.completed') throw new Error(`ended with ${final.type}`);
    const call = final.response.output.find((item) => item.type === 'custom_tool_call')!;
    expect(call).toMatchObject({ name: 'shell', input: done.input });
    expect(call.call_id).toMatch(/^call_/);
  });

  it('enforces text.format json_schema with a grammar', async () => {
    const res = await create({
      ...base,
      input: 'json please',
      max_output_tokens: 30,
      text: { format: { type: 'json_schema', name: 'answer', strict: true, schema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false } } },
    });
    expect(typeof JSON.parse(res.output_text).ok).toBe('boolean');
    expect(res.text!.format).toMatchObject({ type: 'json_schema', name: 'answer' });
  });

  it('continues a stored conversation over three turns, and retrieves, lists and deletes it', async () => {
    const one = await create({ ...base, input: 'My name is Ada.', max_output_tokens: 3 });
    const two = await create({ ...base, input: 'What is my name?', previous_response_id: one.id, max_output_tokens: 3 });
    const three = await create({ ...base, input: [{ role: 'user', content: 'Again?' }, { role: 'user', content: 'Please.' }], previous_response_id: two.id, max_output_tokens: 3 });
    expect(three.previous_response_id).toBe(two.id);
    // Each turn's prompt holds the turns before it.
    expect(two.usage!.input_tokens).toBeGreaterThan(one.usage!.input_tokens + one.usage!.output_tokens);
    expect(three.usage!.input_tokens).toBeGreaterThan(two.usage!.input_tokens + two.usage!.output_tokens);
    // The prompt cache: a new conversation shares at most the template's role header with what a slot held;
    // each later turn continues on the sequence that generated the one before, whose whole prompt it reuses.
    // The prompt's last token is always evaluated again (its logits start the answer).
    const cached = (res: typeof one) => res.usage!.input_tokens_details.cached_tokens;
    expect(cached(one)).toBeLessThan(one.usage!.input_tokens / 2);
    expect(cached(two)).toBeGreaterThanOrEqual(one.usage!.input_tokens);
    expect(cached(two)).toBeLessThan(two.usage!.input_tokens);
    expect(cached(three)).toBeGreaterThanOrEqual(two.usage!.input_tokens);
    expect(cached(three)).toBeLessThan(three.usage!.input_tokens);

    const again = await client.responses.retrieve(three.id);
    expect(again.id).toBe(three.id);
    expect(again.output).toEqual(three.output);

    const page1 = await client.responses.inputItems.list(three.id, { limit: 1, order: 'asc' });
    expect(page1.data).toHaveLength(1);
    expect(page1.has_more).toBe(true);
    expect(page1.data[0]).toMatchObject({ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Again?' }] });
    const page2 = await client.responses.inputItems.list(three.id, { limit: 1, order: 'asc', after: page1.data[0]!.id });
    expect(page2.data[0]).toMatchObject({ content: [{ type: 'input_text', text: 'Please.' }] });
    expect(page2.has_more).toBe(false);
    const all = [];
    for await (const item of client.responses.inputItems.list(three.id, { limit: 1 })) all.push(item);
    expect(all.map((item) => item.id)).toEqual([page2.data[0]!.id, page1.data[0]!.id]);

    const deleted = await fetch(`${server.url}/v1/responses/${two.id}`, { method: 'DELETE' });
    expect(await deleted.json()).toEqual({ id: two.id, object: 'response', deleted: true });
    await expect(client.responses.retrieve(two.id)).rejects.toMatchObject({ status: 404 });
    await expect(client.responses.delete(two.id)).rejects.toMatchObject({ status: 404 });
  });

  it('drops the oldest turns with truncation auto when the conversation overflows the context', async () => {
    const input = [
      { role: 'user' as const, content: 'word '.repeat(40_000) },
      { role: 'assistant' as const, content: 'ok' },
      { role: 'user' as const, content: 'hi' },
    ];
    const refused = await fetch(`${server.url}/v1/responses`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: CHAT_MODEL_ID, input, max_output_tokens: 1 }),
    });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: unknown }).error).toMatchObject({ code: 'context_length_exceeded', param: 'input' });
    const res = await create({ ...base, input, max_output_tokens: 1, truncation: 'auto' });
    expect(res.truncation).toBe('auto');
    expect(res.usage!.input_tokens).toBeLessThan(100);
  });

  it('reports a failure after the stream began as an error event, then response.failed', async () => {
    // A store that takes no response this size: saving, the last step, fails.
    const small = await startTestServer({ engine: { threads: 1 }, server: { responses: { maxBytesPerResponse: 1000 } } });
    try {
      await small.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
      const smallClient = new OpenAI({ baseURL: `${small.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      await expect(smallClient.responses.create({ ...base, input: 'hi', max_output_tokens: 2 })).rejects.toMatchObject({ status: 400, param: 'store' });
      const events = await collect(await smallClient.responses.create({ ...base, input: 'hi', max_output_tokens: 2, stream: true }));
      expect(events.slice(-2).map((e) => e.type)).toEqual(['error', 'response.failed']);
      expect(events.at(-2)).toMatchObject({ param: 'store' });
      const failed = events.at(-1)!;
      if (failed.type !== 'response.failed') throw new Error('unreachable');
      expect(failed.response.status).toBe('failed');
      expect(failed.response.error).toMatchObject({ code: 'server_error', message: expect.stringContaining('bytes') });
      // Not stored (store: false), the same request completes.
      expect((await smallClient.responses.create({ ...base, input: 'hi', max_output_tokens: 2, store: false })).status).not.toBe('failed');
    } finally {
      await small.stop();
    }
  });

  it('answers an unknown previous_response_id with a 404 naming it', async () => {
    const res = await fetch(`${server.url}/v1/responses`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: CHAT_MODEL_ID, input: 'hi', previous_response_id: 'resp_nope' }),
    });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({ type: 'not_found_error', param: 'previous_response_id' });
  });

  it('answers unknown ids and bad input_items queries in the error shape', async () => {
    const stored = await create({ ...base, input: 'hi', max_output_tokens: 1 });
    const get = async (path: string, method = 'GET') => {
      const res = await fetch(`${server.url}/v1/responses/${path}`, { method });
      return { status: res.status, error: ((await res.json()) as { error: { type: string; param: string | null } }).error };
    };
    for (const [path, method] of [['resp_nope', 'GET'], ['resp_nope', 'DELETE'], ['resp_nope/input_items', 'GET']]) {
      expect(await get(path!, method), `${method} ${path}`).toEqual({ status: 404, error: expect.objectContaining({ type: 'not_found_error', param: 'response_id' }) });
    }
    for (const [query, param] of [['limit=0', 'limit'], ['limit=101', 'limit'], ['limit=x', 'limit'], ['order=sideways', 'order']]) {
      expect(await get(`${stored.id}/input_items?${query}`), query).toEqual({ status: 400, error: expect.objectContaining({ type: 'invalid_request_error', param }) });
    }
  });

  it('refuses what it cannot honour with a 400 naming the field', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ tools: [{ type: 'teleport' }] }, 'tools.0.type'],
      [{ prompt: { id: 'pmpt_1' } }, 'prompt'],
      [{ input: [{ type: 'compaction_trigger' }] }, 'input.0.type'],
      [{ tools: [{ type: 'custom', name: 'patch', format: { type: 'grammar', syntax: 'lark', definition: 'start: "x"' } }] }, 'tools.0.format'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://example.com/a.png' }] }] }, 'input.0.content.0'],
      [{ input: [{ type: 'item_reference', id: 'x' }] }, 'input.0.type'],
      [{ background: true }, 'background'],
      [{ conversation: 'conv_1' }, 'conversation'],
      [{ metadata: Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata'],
    ];
    for (const [fields, param] of cases) {
      const res = await fetch(`${server.url}/v1/responses`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: CHAT_MODEL_ID, input: 'hi', ...fields }),
      });
      expect(res.status, param).toBe(400);
      expect(((await res.json()) as { error: { param: string } }).error.param, JSON.stringify(fields)).toBe(param);
    }
  });
});
