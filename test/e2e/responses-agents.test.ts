import OpenAI from 'openai';
import type { ResponseCreateParamsStreaming, ResponseInputItem } from 'openai/resources/responses/responses';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { THINK_BIAS, TOKENS, tinyQwen3LongFile } from '../helpers/chat-model.js';
import { responsesAgentRequest } from '../helpers/agent-requests.js';

/**
 * The Responses API as current agents send it, through the official openai
 * SDK: namespace tools (calls returned with their namespace), the hosted
 * web search left out and named, client_metadata, encrypted reasoning that
 * comes back with store false, a client's tool search, and a request
 * shaped like an agent's first one, streamed to its terminal event. The
 * model is the tiny random Qwen3 with its 40960-token training context,
 * registered without --ctx-size; logit_bias (lserve's extension) steers it.
 */

const MODEL = 'qwen3-agent';
let server: TestServer;
let strict: TestServer;
let client: OpenAI;

type Extra = { logit_bias?: Record<number, number>; presence_penalty?: number; frequency_penalty?: number };
const END = { [TOKENS.imEnd]: 100 };

beforeAll(async () => {
  [server, strict] = await Promise.all([startTestServer({ engine: { threads: 1 } }), startTestServer({ engine: { threads: 1 }, server: { strictTools: true } })]);
  for (const s of [server, strict]) await s.engine.store.registerLocal(tinyQwen3LongFile(), { kind: 'chat', id: MODEL });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await Promise.all([server?.stop(), strict?.stop()]);
});

const docs = {
  type: 'namespace' as const,
  name: 'mcp__docs__',
  description: 'Tools of the docs server.',
  tools: [{ type: 'function' as const, name: 'page', description: 'A page by id', parameters: { type: 'object', properties: { id: { type: 'string', enum: ['intro', 'setup'] } }, required: ['id'] } }],
};

describe("an agent's first request", () => {
  it('namespace tools, web_search, client_metadata, encrypted reasoning, developer messages (≈ 6k tokens): streamed to response.completed', async () => {
    const body = { ...responsesAgentRequest(MODEL), logit_bias: END } as ResponseCreateParamsStreaming & Extra;
    const { data: stream, response } = await client.responses.create(body).withResponse();
    expect(response.headers.get('lserve-omitted-tools')).toBe('web_search');
    const types: string[] = [];
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.completed') completed = event.response;
    }
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.completed');
    expect(completed!.usage!.input_tokens).toBeGreaterThan(5_000);
    // store: false keeps nothing.
    await expect(client.responses.retrieve(completed!.id)).rejects.toMatchObject({ status: 404 });
  });

  it('--strict-tools refuses the hosted tool instead, naming it', async () => {
    const res = await fetch(`${strict.url}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...responsesAgentRequest(MODEL), stream: false }) });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { param: string } }).error.param).toBe('tools.7');
  });
});

describe('tools as agents declare them', () => {
  it('a namespaced tool is called by its namespace and name, and the call comes back with both', async () => {
    const response = await client.responses.create({ model: MODEL, input: 'Open the intro page.', tools: [docs], tool_choice: 'required', temperature: 0, max_output_tokens: 40 });
    const call = response.output.find((item) => item.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall & { namespace?: string };
    expect(call).toMatchObject({ name: 'page', namespace: 'mcp__docs__' });
    expect(['intro', 'setup']).toContain(JSON.parse(call.arguments).id);
    // Sent back (as Codex does, with store false), the call and its output continue the conversation.
    const next = await client.responses.create({
      model: MODEL,
      store: false,
      max_output_tokens: 2,
      tools: [docs],
      input: [{ role: 'user', content: 'Open the intro page.' }, call as ResponseInputItem, { type: 'function_call_output', call_id: call.call_id, output: 'Welcome.' }],
    });
    expect(next.status).toBeDefined();
    expect(next.usage!.input_tokens).toBeGreaterThan(response.usage!.input_tokens);
  });

  it("a client's tool search: deferred tools wait for it, and its output brings them in", async () => {
    const time = { type: 'function' as const, name: 'get_time', description: 'Local time', parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Oslo'] } }, required: ['city'] }, strict: false, defer_loading: true };
    const search = { type: 'tool_search' as const, execution: 'client' as const };
    const ask = (tools: unknown[], input: unknown = 'Time in Oslo?') =>
      client.responses.create({ model: MODEL, input: input as string, tools: tools as OpenAI.Responses.Tool[], max_output_tokens: 1, logit_bias: END } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    const without = await ask([search]);
    const deferred = await ask([search, time]);
    expect(deferred.usage!.input_tokens).toBe(without.usage!.input_tokens);
    // The model's search is a tool_search_call item.
    const searched = await client.responses.create({ model: MODEL, input: 'Find a clock tool.', tools: [search, time], tool_choice: 'required', temperature: 0, max_output_tokens: 30, logit_bias: { 1: 5 } } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    const call = searched.output.find((item) => item.type === 'tool_search_call') as { call_id: string; execution: string } | undefined;
    expect(call?.execution).toBe('client');
    // Its output brings get_time in: the prompt grows by its definition, and the model may call it.
    const history = [
      { role: 'user', content: 'Time in Oslo?' },
      { type: 'tool_search_call', call_id: 'ts_1', arguments: { query: 'clock' }, execution: 'client', status: 'completed' },
      { type: 'tool_search_output', call_id: 'ts_1', execution: 'client', status: 'completed', tools: [time] },
    ];
    const loaded = await ask([search, time], history);
    expect(loaded.usage!.input_tokens).toBeGreaterThan(without.usage!.input_tokens + 20);
    const forced = await client.responses.create({ model: MODEL, input: history, tools: [search, time], tool_choice: { type: 'function', name: 'get_time' }, temperature: 0, max_output_tokens: 30 } as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect(forced.output.find((item) => item.type === 'function_call')).toMatchObject({ name: 'get_time', arguments: '{"city":"Oslo"}' });
  });
});

describe('encrypted reasoning', () => {
  const thinking = { logit_bias: THINK_BIAS, presence_penalty: 2, frequency_penalty: 2 };

  it('include reasoning.encrypted_content: the reasoning item carries it; sent back with store false it restores the reasoning', async () => {
    const first = await client.responses.create({ model: MODEL, input: 'Think, then check the weather.', include: ['reasoning.encrypted_content'], store: false, temperature: 0, max_output_tokens: 8, ...thinking } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    const reasoning = first.output.find((item) => item.type === 'reasoning') as OpenAI.Responses.ResponseReasoningItem;
    expect(reasoning.encrypted_content).toMatch(/^[A-Za-z0-9_-]{40,}$/);
    // As Codex sends it back: summary and encrypted_content, no content, then the call it made and its output.
    const turn = (encrypted: string) => [
      { role: 'user', content: 'Think, then check the weather.' },
      { type: 'reasoning', summary: [], encrypted_content: encrypted },
      { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{}' },
      { type: 'function_call_output', call_id: 'c1', output: 'sunny' },
    ];
    const weather = { type: 'function' as const, name: 'get_weather', parameters: { type: 'object', properties: {} }, strict: false };
    const tokens = async (encrypted: string) =>
      (await client.responses.create({ model: MODEL, store: false, tools: [weather], max_output_tokens: 1, logit_bias: END, input: turn(encrypted) } as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming)).usage!.input_tokens;
    expect(await tokens(reasoning.encrypted_content!)).toBeGreaterThan(await tokens(`${reasoning.encrypted_content!.slice(0, -4)}AAAA`));
  });

  it('streamed: the reasoning item of output_item.done carries encrypted_content', async () => {
    const stream = await client.responses.create({ model: MODEL, input: 'Think.', include: ['reasoning.encrypted_content'], store: false, stream: true, temperature: 0, max_output_tokens: 6, ...thinking } as ResponseCreateParamsStreaming);
    let sealed: string | undefined;
    for await (const event of stream) {
      if (event.type === 'response.output_item.done' && event.item.type === 'reasoning') sealed = event.item.encrypted_content ?? undefined;
    }
    expect(sealed).toBeTruthy();
  });
});
