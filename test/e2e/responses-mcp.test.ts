import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import type { ResponseCreateParamsNonStreaming, ResponseStreamEvent, Tool } from 'openai/resources/responses/responses';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { startMcpToolServer, type McpToolServer } from '../helpers/mcp-tool-server.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Remote MCP servers as tools of /v1/responses (OpenAI's `mcp` tool),
 * through the official openai client: an SDK-built MCP server over
 * Streamable HTTP on a loopback port (a request's server_url, allowed by
 * --mcp-allow-host 127.0.0.1 and --allow-private-urls), and a stdio server
 * declared in an --mcp-config file. The chat model has random weights: a
 * forced tool_choice makes it call the tool.
 */

const ECHO_SERVER = fileURLToPath(new URL('../fixtures/mcp/echo-server.mjs', import.meta.url));

let server: TestServer;
let client: OpenAI;
let weather: McpToolServer;
let dir: string;
let pidFile: string;

beforeAll(async () => {
  weather = await startMcpToolServer();
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-mcp-'));
  pidFile = path.join(dir, 'echo.pid');
  server = await startTestServer({
    engine: { threads: 1, parallel: 2 },
    server: {
      allowPrivateUrls: ['127.0.0.1'],
      mcpAllowHosts: ['127.0.0.1'],
      mcpServers: { echo: { command: process.execPath, args: [ECHO_SERVER], env: { PID_FILE: pidFile } } },
    },
  });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.stop();
  await weather?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const base = { model: CHAT_MODEL_ID, temperature: 0 } as const;
const weatherTool = (extra: Partial<Tool.Mcp> = {}): Tool.Mcp => ({ type: 'mcp', server_label: 'weather', server_url: weather.url, ...extra });
const forced = (name: string, label = 'weather') => ({ type: 'mcp', server_label: label, name }) as unknown as ResponseCreateParamsNonStreaming['tool_choice'];
const create = (params: ResponseCreateParamsNonStreaming) => client.responses.create(params);

describe('/v1/responses with remote MCP servers', () => {
  it('lists the tools and runs a call itself when require_approval is never', async () => {
    const response = await create({ ...base, input: 'Weather in Paris?', tools: [weatherTool({ require_approval: 'never', headers: { 'x-test': 'one' }, authorization: 'sekret' })], tool_choice: forced('get_weather'), max_output_tokens: 80 });
    const list = response.output[0]!;
    if (list.type !== 'mcp_list_tools') throw new Error(`first item is ${list.type}`);
    expect(list.server_label).toBe('weather');
    expect(list.tools.map((t) => t.name).sort()).toEqual(['explode', 'get_weather']);
    expect(list.tools.find((t) => t.name === 'get_weather')).toMatchObject({ description: 'Current weather of a city', input_schema: { type: 'object' }, annotations: { readOnlyHint: true } });
    const call = response.output.find((item) => item.type === 'mcp_call');
    if (call?.type !== 'mcp_call') throw new Error('no mcp_call');
    expect(call).toMatchObject({ server_label: 'weather', name: 'get_weather', error: null, status: 'completed' });
    const { city } = JSON.parse(call.arguments) as { city: string };
    expect(call.output).toBe(`Sunny in ${city}`);
    // The model went on after the call, until the end or the token limit (then the response is incomplete).
    expect(response.status).toBe(response.usage!.output_tokens >= 80 && response.output.at(-1)!.type === 'message' ? 'incomplete' : 'completed');
    // headers and authorization went to that server.
    expect(weather.headers.some((h) => h['x-test'] === 'one' && h.authorization === 'Bearer sekret')).toBe(true);
    expect(server.logs.join('\n')).not.toContain('sekret');
    // Nor echoed or stored.
    expect(JSON.stringify(response)).not.toContain('sekret');
    expect(JSON.stringify(await client.responses.retrieve(response.id))).not.toContain('sekret');
  });

  it('asks for approval, then runs the approved call on the next turn without listing again', async () => {
    const tools = [weatherTool()];
    const first = await create({ ...base, input: 'Weather in London?', tools, tool_choice: forced('get_weather'), max_output_tokens: 80 });
    const asked = first.output.find((item) => item.type === 'mcp_approval_request');
    if (asked?.type !== 'mcp_approval_request') throw new Error('no mcp_approval_request');
    expect(asked).toMatchObject({ server_label: 'weather', name: 'get_weather' });
    expect(first.output.some((item) => item.type === 'mcp_call')).toBe(false);
    const before = weather.calls.length;

    const second = await create({ ...base, previous_response_id: first.id, tools, tool_choice: 'none', max_output_tokens: 3, input: [{ type: 'mcp_approval_response', approval_request_id: asked.id, approve: true }] });
    expect(second.output.some((item) => item.type === 'mcp_list_tools')).toBe(false);
    const call = second.output[0]!;
    if (call.type !== 'mcp_call') throw new Error(`first item is ${call.type}`);
    expect(call).toMatchObject({ approval_request_id: asked.id, name: 'get_weather', arguments: asked.arguments, error: null });
    expect(call.output).toMatch(/^Sunny in /);
    expect(weather.calls.length).toBe(before + 1);
    expect(second.output.at(-1)!.type).toBe('message');
  });

  it('reports a declined call to the model without running it', async () => {
    const tools = [weatherTool({ require_approval: { always: { tool_names: ['get_weather'] } } })];
    const first = await create({ ...base, input: 'Weather?', tools, tool_choice: forced('get_weather'), max_output_tokens: 80 });
    const asked = first.output.find((item) => item.type === 'mcp_approval_request')!;
    const before = weather.calls.length;
    const input = [...first.output, { type: 'mcp_approval_response', approval_request_id: asked.id, approve: false }] as ResponseCreateParamsNonStreaming['input'];
    const second = await create({ ...base, store: false, tools, tool_choice: 'none', max_output_tokens: 3, input });
    const call = second.output[0]!;
    if (call.type !== 'mcp_call') throw new Error(`first item is ${call.type}`);
    expect(call.error).toMatch(/declined/);
    expect(call.output).toBeNull();
    expect(weather.calls.length).toBe(before);
  });

  it('shows the model a failing tool as the mcp_call error, not a 500', async () => {
    const response = await create({ ...base, input: 'Explode', tools: [weatherTool({ require_approval: 'never' })], tool_choice: forced('explode'), max_output_tokens: 80 });
    const call = response.output.find((item) => item.type === 'mcp_call');
    if (call?.type !== 'mcp_call') throw new Error('no mcp_call');
    expect(call.error).toContain('the weather station is on fire');
    expect(call.status).toBe('failed');
    expect(['completed', 'incomplete']).toContain(response.status);
  });

  it('runs no call past max_tool_calls: the call is reported with the limit as its error, and the loop ends', async () => {
    const before = weather.calls.length;
    const response = await create({ ...base, input: 'Weather in Oslo?', tools: [weatherTool({ require_approval: 'never' })], tool_choice: forced('get_weather'), max_output_tokens: 80, ...({ max_tool_calls: 0 } as object) });
    const calls = response.output.filter((item) => item.type === 'mcp_call');
    // The model may call more than once in its turn: none of them runs.
    expect(calls.length).toBeGreaterThan(0);
    for (const call of calls) {
      expect(call).toMatchObject({ name: 'get_weather', status: 'failed', output: null });
      expect((call as { error: string }).error).toMatch(/limit of 0 MCP tool calls/);
    }
    expect(weather.calls.length).toBe(before);
  });

  it('offers only allowed_tools', async () => {
    const response = await create({ ...base, input: 'Weather?', tools: [weatherTool({ allowed_tools: ['get_weather'], require_approval: 'never' })], tool_choice: 'required', max_output_tokens: 80 });
    const call = response.output.find((item) => item.type === 'mcp_call');
    expect(call).toMatchObject({ name: 'get_weather' });
    await expect(create({ ...base, input: 'x', tools: [weatherTool({ allowed_tools: { tool_names: ['get_weather'] } })], tool_choice: forced('explode'), max_output_tokens: 3 })).rejects.toMatchObject({ status: 400, param: 'tool_choice' });
  });

  it('streams the documented MCP events in order', async () => {
    const stream = await client.responses.create({ ...base, input: 'Weather?', tools: [weatherTool({ require_approval: 'never' })], tool_choice: forced('get_weather'), max_output_tokens: 80, stream: true });
    const events: ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((e) => e.type);
    expect(types.slice(0, 6)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.mcp_list_tools.in_progress', 'response.mcp_list_tools.completed', 'response.output_item.done']);
    // Each call's own events, in order (a generation may make several calls before the server runs them).
    const callIds = events.flatMap((e) => (e.type === 'response.output_item.added' && e.item.type === 'mcp_call' ? [e.item.id] : []));
    expect(callIds.length).toBeGreaterThan(0);
    for (const id of callIds) {
      const own = events.filter((e) => ('item_id' in e && e.item_id === id) || ('item' in e && (e.item as { id?: string }).id === id)).map((e) => e.type);
      expect(own).toEqual([
        'response.output_item.added',
        'response.mcp_call_arguments.delta',
        'response.mcp_call_arguments.done',
        'response.mcp_call.in_progress',
        'response.mcp_call.completed',
        'response.output_item.done',
      ]);
      const done = events.find((e) => e.type === 'response.output_item.done' && e.item.id === id);
      if (done?.type !== 'response.output_item.done' || done.item.type !== 'mcp_call') throw new Error('no mcp_call done');
      expect(done.item.output).toMatch(/^Sunny in /);
    }
    const last = events.at(-1)!;
    if (last.type !== 'response.completed') throw new Error(`last event is ${last.type}`);
    expect(last.response.output.map((item) => item.type).slice(0, 2)).toEqual(['mcp_list_tools', 'mcp_call']);
  });

  it('refuses servers the operator did not allow, naming the rule', async () => {
    await expect(create({ ...base, input: 'x', tools: [{ type: 'mcp', server_label: 'nowhere' }] })).rejects.toMatchObject({ status: 400, param: 'tools.0.server_label', code: 'mcp_server_not_declared' });
    await expect(create({ ...base, input: 'x', tools: [{ type: 'mcp', server_label: 'other', server_url: 'https://mcp.example.com/mcp' }] })).rejects.toMatchObject({ status: 400, param: 'tools.0.server_url', code: 'mcp_server_not_allowed' });
    // Allowed host, but a private address on a server without --allow-private-urls.
    const strict = await startTestServer({ server: { mcpAllowHosts: ['127.0.0.1', 'localhost'] } });
    try {
      const strictClient = new OpenAI({ baseURL: `${strict.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      await expect(strictClient.responses.create({ ...base, input: 'x', tools: [weatherTool()] })).rejects.toMatchObject({ status: 400, param: 'tools.0.server_url', code: 'private_url_forbidden' });
    } finally {
      await strict.stop();
    }
  });

  it('calls a stdio server declared in --mcp-config, and ends its process with the server', async () => {
    const response = await create({ ...base, input: 'Say hello', tools: [{ type: 'mcp', server_label: 'echo', require_approval: 'never' }], tool_choice: forced('echo', 'echo'), max_output_tokens: 80 });
    const list = response.output[0]!;
    expect(list).toMatchObject({ type: 'mcp_list_tools', server_label: 'echo', tools: [{ name: 'echo' }] });
    const call = response.output.find((item) => item.type === 'mcp_call');
    if (call?.type !== 'mcp_call') throw new Error('no mcp_call');
    expect(call.output).toBe(`echo: ${(JSON.parse(call.arguments) as { word: string }).word}`);
    expect(existsSync(pidFile)).toBe(true);
    const pid = Number(readFileSync(pidFile, 'utf8'));
    expect(() => process.kill(pid, 0)).not.toThrow();
    await server.close();
    await expect.poll(() => { try { process.kill(pid, 0); return true; } catch { return false; } }, { timeout: 10_000 }).toBe(false);
  });
});
