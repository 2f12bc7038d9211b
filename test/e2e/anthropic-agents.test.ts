import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { THINK_BIAS, TOKENS, tinyQwen3LongFile } from '../helpers/chat-model.js';
import { ANTHROPIC_AGENT_BETAS, anthropicAgentRequest } from '../helpers/agent-requests.js';
import { CLEARED_TOOL_RESULT } from '../../src/api/anthropic/context-edits.js';

/**
 * The Anthropic Messages API as coding agents use it, through the official
 * TypeScript SDK, unmodified: tools (forced, streamed, several at once,
 * results sent back), system turns mid-conversation, adaptive thinking
 * with its signature given back, count_tokens, context management, and a
 * request shaped like an agent's first one. The model is the tiny random
 * Qwen3 with the real tokenizer and its 40960-token training context,
 * registered without --ctx-size: the default context must hold the agent's
 * ≈ 12k-token prompt. Random weights say nothing useful; grammars and
 * logit_bias (lserve's extension here) steer them where a test needs a
 * particular answer.
 */

const MODEL = 'qwen3-agent';
let server: TestServer;
let client: Anthropic;

/** Plus fields older clients send (temperature: API version 2023-06-01) and lserve's logit_bias. */
type Create = Anthropic.MessageCreateParamsNonStreaming & { temperature?: number; logit_bias?: Record<number, number>; presence_penalty?: number; frequency_penalty?: number };
const create = (body: Create) => client.messages.create(body as Anthropic.MessageCreateParamsNonStreaming);

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1 } });
  await server.engine.store.registerLocal(tinyQwen3LongFile(), { kind: 'chat', id: MODEL });
  client = new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.stop();
});

const weather = {
  name: 'get_weather',
  description: 'Current weather of a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string', enum: ['Paris', 'London'] } }, required: ['city'] },
};
const time = { name: 'get_time', description: 'Local time of a city', input_schema: { type: 'object' as const, properties: { city: { type: 'string', enum: ['Oslo'] } }, required: ['city'] } };
const question: Anthropic.MessageParam = { role: 'user', content: 'Weather in Paris?' };
/** Ends the answer at once: the tests that only read the prompt side need no generation. */
const END = { [TOKENS.imEnd]: 100 };

/** Prompt tokens in all, however they split between evaluated and cached. */
const promptTokens = (usage: Anthropic.Usage) => usage.input_tokens + (usage.cache_read_input_tokens ?? 0);

describe('tool use', () => {
  it.each([
    ['tool', { type: 'tool' as const, name: 'get_weather' }],
    ['any', { type: 'any' as const }],
  ])('tool_choice %s forces a tool_use whose input fits the schema; stop_reason tool_use', async (_, toolChoice) => {
    const message = await create({ model: MODEL, max_tokens: 40, temperature: 0, tools: [weather], tool_choice: toolChoice, messages: [question] });
    expect(message.stop_reason).toBe('tool_use');
    const use = message.content.find((block) => block.type === 'tool_use');
    expect(use).toMatchObject({ type: 'tool_use', name: 'get_weather', caller: { type: 'direct' } });
    if (use?.type !== 'tool_use') throw new Error('unreachable');
    expect(use.id).toMatch(/^toolu_/);
    expect(['Paris', 'London']).toContain((use.input as { city: string }).city);
  });

  it('a tool_result round trip: the call and its result become part of the prompt', async () => {
    const first = await create({ model: MODEL, max_tokens: 40, temperature: 0, tools: [weather], tool_choice: { type: 'any' }, messages: [question] });
    const use = first.content.find((block): block is Anthropic.ToolUseBlock => block.type === 'tool_use')!;
    const second = await create({
      model: MODEL,
      max_tokens: 4,
      tools: [weather],
      messages: [question, { role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: '21 °C and sunny' }] }] }],
    });
    expect(second.role).toBe('assistant');
    expect(promptTokens(second.usage)).toBeGreaterThan(promptTokens(first.usage));
    // The whole first turn was in the cache: only the tool result and what follows were evaluated.
    expect(second.usage.cache_read_input_tokens).toBeGreaterThan(0);
    // is_error results are accepted too, and a result for a call nobody made is a 400 naming it.
    const failed = await create({ model: MODEL, max_tokens: 1, tools: [weather], messages: [question, { role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, is_error: true, content: 'timed out' }] }] });
    expect(failed.type).toBe('message');
    await expect(create({ model: MODEL, max_tokens: 1, tools: [weather], messages: [question, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nobody', content: 'x' }] }] })).rejects.toMatchObject({
      status: 400,
      error: { type: 'error', error: { type: 'invalid_request_error' } },
    });
  });

  it('a streamed tool use arrives as content_block_start + input_json_delta, assembled by the SDK stream helper', async () => {
    const stream = client.messages.stream({ model: MODEL, max_tokens: 40, temperature: 0, tools: [weather], tool_choice: { type: 'tool', name: 'get_weather' }, messages: [question] });
    const deltas: string[] = [];
    stream.on('streamEvent', (event) => {
      if (event.type === 'content_block_delta') deltas.push(event.delta.type);
    });
    const final = await stream.finalMessage();
    expect(deltas).toContain('input_json_delta');
    const use = final.content.find((block) => block.type === 'tool_use');
    expect(use).toMatchObject({ type: 'tool_use', name: 'get_weather' });
    expect(['Paris', 'London']).toContain((use as Anthropic.ToolUseBlock).input && ((use as Anthropic.ToolUseBlock).input as { city: string }).city);
    expect(final.stop_reason).toBe('tool_use');
  });

  it('several tool uses in one turn (parallel calls steered with logit_bias)', async () => {
    const message = await create({
      model: MODEL,
      max_tokens: 60,
      temperature: 0,
      tools: [weather, time],
      tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'Weather in Paris and time in Oslo?' }],
      // A new call after each one, never the end of the turn, until max_tokens.
      logit_bias: { [TOKENS.toolCall]: 100, [TOKENS.imEnd]: -100, [TOKENS.endOfText]: -100 },
    });
    const uses = message.content.filter((block) => block.type === 'tool_use');
    expect(uses.length).toBeGreaterThanOrEqual(2);
    expect(new Set(uses.map((use) => (use as Anthropic.ToolUseBlock).id)).size).toBe(uses.length);
    expect(message.stop_reason).toBe('tool_use');
    // disable_parallel_tool_use: exactly one.
    const one = await create({ model: MODEL, max_tokens: 60, temperature: 0, tools: [weather, time], tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: [{ role: 'user', content: 'both?' }], logit_bias: { [TOKENS.toolCall]: 100 } });
    expect(one.content.filter((block) => block.type === 'tool_use')).toHaveLength(1);
  });
});

describe('conversation features', () => {
  it('a system turn mid-conversation is rendered where it stands', async () => {
    const base = [question, { role: 'assistant' as const, content: 'Let me check.' }, { role: 'user' as const, content: 'Go on.' }];
    const plain = await client.messages.countTokens({ model: MODEL, messages: base });
    const withTurn = await client.messages.countTokens({ model: MODEL, messages: [...base, { role: 'system', content: 'Answer in French from now on.' }] });
    // '<|im_start|>system\nAnswer in French from now on.<|im_end|>\n' after the last user turn.
    expect(withTurn.input_tokens - plain.input_tokens).toBeGreaterThanOrEqual(10);
    const message = await create({ model: MODEL, max_tokens: 2, messages: [...base, { role: 'system', content: 'Answer in French from now on.' }] });
    expect(promptTokens(message.usage)).toBe(withTurn.input_tokens);
  });

  it('adaptive thinking with an effort: a thinking block with a signature, its text omitted when asked', async () => {
    // Into a thought at once (`<think>` then a line break, which the penalties make follow), and never out of it.
    const think = { logit_bias: THINK_BIAS, presence_penalty: 2, frequency_penalty: 2 };
    const shown = await create({ model: MODEL, max_tokens: 6, temperature: 0, thinking: { type: 'adaptive' }, output_config: { effort: 'low' }, messages: [question], ...think });
    const block = shown.content.find((b) => b.type === 'thinking') as Anthropic.ThinkingBlock;
    expect(block.thinking.length).toBeGreaterThan(0);
    expect(block.signature.length).toBeGreaterThan(20);
    expect(shown.usage.output_tokens_details?.thinking_tokens).toBeGreaterThan(0);
    const omitted = await create({ model: MODEL, max_tokens: 6, temperature: 0, thinking: { type: 'adaptive', display: 'omitted' }, output_config: { effort: 'low' }, messages: [question], ...think });
    const hidden = omitted.content.find((b) => b.type === 'thinking') as Anthropic.ThinkingBlock;
    expect(hidden.thinking).toBe('');
    expect(hidden.signature.length).toBeGreaterThan(20);
  });

  it("a thinking block given back restores the reasoning from its signature (a tool loop's prompt keeps it); an altered signature does not", async () => {
    const first = await create({ model: MODEL, max_tokens: 40, temperature: 0, thinking: { type: 'adaptive', display: 'omitted' }, tools: [weather], tool_choice: { type: 'auto' }, messages: [question], logit_bias: THINK_BIAS, presence_penalty: 2, frequency_penalty: 2 });
    const thinking = first.content.find((b) => b.type === 'thinking') as Anthropic.ThinkingBlock;
    const call: Anthropic.ToolUseBlockParam = { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } };
    const loop = (signature: string): Anthropic.MessageCountTokensParams => ({
      model: MODEL,
      tools: [weather],
      thinking: { type: 'adaptive' },
      messages: [question, { role: 'assistant', content: [{ type: 'thinking', thinking: '', signature }, call] }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] }],
    });
    const restored = await client.messages.countTokens(loop(thinking.signature));
    const altered = await client.messages.countTokens(loop(`${thinking.signature.slice(0, -4)}AAAA`));
    expect(restored.input_tokens).toBeGreaterThan(altered.input_tokens);
  });

  it('count_tokens counts what a message evaluates (tools included)', async () => {
    const body = { model: MODEL, tools: [weather, time], system: 'Be brief.', messages: [question] };
    const counted = await client.messages.countTokens(body);
    const message = await create({ ...body, max_tokens: 1, logit_bias: END });
    expect(counted.input_tokens).toBe(promptTokens(message.usage));
    const without = await client.messages.countTokens({ model: MODEL, system: 'Be brief.', messages: [question] });
    expect(counted.input_tokens).toBeGreaterThan(without.input_tokens + 40);
  });

  it('deferred tools stay out of the prompt until a tool_reference in a tool result brings them in', async () => {
    const deferred = { ...time, defer_loading: true };
    const searchTool = { name: 'search_tools', description: 'Finds tools', input_schema: { type: 'object' as const, properties: { query: { type: 'string' } } } };
    const listed = await client.messages.countTokens({ model: MODEL, tools: [searchTool], messages: [question] });
    const withDeferred = await client.messages.countTokens({ model: MODEL, tools: [searchTool, deferred], messages: [question] });
    expect(withDeferred.input_tokens).toBe(listed.input_tokens);
    const found: Anthropic.MessageParam[] = [
      question,
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_s', name: 'search_tools', input: { query: 'time' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_s', content: [{ type: 'tool_reference', tool_name: 'get_time' }] }] },
    ];
    const loaded = await client.messages.countTokens({ model: MODEL, tools: [searchTool, deferred], messages: found });
    const notLoaded = await client.messages.countTokens({ model: MODEL, tools: [searchTool, deferred], messages: [...found.slice(0, 2), { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_s', content: 'nothing found' }] }] });
    expect(loaded.input_tokens).toBeGreaterThan(notLoaded.input_tokens + 20);
    // Once referenced, the model may call it (forced here).
    const call = await create({ model: MODEL, max_tokens: 40, temperature: 0, tools: [searchTool, deferred], tool_choice: { type: 'tool', name: 'get_time' }, messages: found });
    expect(call.content.find((b) => b.type === 'tool_use')).toMatchObject({ name: 'get_time', input: { city: 'Oslo' } });
    // Not yet referenced, it cannot be forced; a reference to a tool nobody declared is a 400.
    await expect(create({ model: MODEL, max_tokens: 4, tools: [searchTool, deferred], tool_choice: { type: 'tool', name: 'get_time' }, messages: [question] })).rejects.toMatchObject({ status: 400 });
    await expect(client.messages.countTokens({ model: MODEL, tools: [searchTool], messages: found })).rejects.toMatchObject({ status: 400 });
  });

  it('context_management clears old tool results and reports what it saved', async () => {
    const turns: Anthropic.MessageParam[] = [question];
    for (let i = 0; i < 3; i++) {
      turns.push({ role: 'assistant', content: [{ type: 'tool_use', id: `toolu_${i}`, name: 'get_weather', input: { city: 'Paris' } }] });
      turns.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: `toolu_${i}`, content: `A long weather report number ${i}: `.repeat(20) }] });
    }
    const edits = { edits: [{ type: 'clear_tool_uses_20250919' as const, trigger: { type: 'tool_uses' as const, value: 2 }, keep: { type: 'tool_uses' as const, value: 1 } }] };
    const message = await client.beta.messages.create({ model: MODEL, max_tokens: 1, tools: [weather], messages: turns, context_management: edits, betas: ['context-management-2025-06-27'] }, {});
    const applied = message.context_management?.applied_edits[0];
    expect(applied).toMatchObject({ type: 'clear_tool_uses_20250919', cleared_tool_uses: 2 });
    expect((applied as { cleared_input_tokens: number }).cleared_input_tokens).toBeGreaterThan(100);
    const counted = await client.beta.messages.countTokens({ model: MODEL, tools: [weather], messages: turns, context_management: edits, betas: ['context-management-2025-06-27'] });
    expect(counted.context_management?.original_input_tokens).toBeGreaterThan(counted.input_tokens + 100);
    expect(CLEARED_TOOL_RESULT.length).toBeGreaterThan(0);
  });

  it('max_tokens 0 warms the cache and generates nothing', async () => {
    const message = await create({ model: MODEL, max_tokens: 0, messages: [{ role: 'user', content: 'warm this prompt up' }] });
    expect(message.content).toEqual([]);
    expect(message.usage.output_tokens).toBe(0);
  });
});

describe("an agent's first request", () => {
  it('≈ 48 KB of system prompt, twelve tools (two deferred) and a hosted one, betas, ?beta=true: answered 200, streamed to message_stop', async () => {
    const body = { ...anthropicAgentRequest(MODEL), logit_bias: END };
    expect(JSON.stringify(body).length).toBeGreaterThan(50_000);
    const stream = client.beta.messages.stream({ ...(body as Parameters<typeof client.beta.messages.stream>[0]), betas: ANTHROPIC_AGENT_BETAS });
    const types: string[] = [];
    stream.on('streamEvent', (event) => types.push(event.type));
    const final = await stream.finalMessage();
    expect(types[0]).toBe('message_start');
    expect(types.at(-1)).toBe('message_stop');
    // The prompt is the agent's ≈ 12k tokens, held whole by the default context.
    expect(promptTokens(final.usage as Anthropic.Usage)).toBeGreaterThan(10_000);
    const response = await stream.withResponse().then(({ response }) => response);
    expect(response.headers.get('lserve-omitted-tools')).toBe('web_search_20250305');
    // The context chosen without --ctx-size is the model's training context.
    const models = await (await fetch(`${server.url}/v1/models`)).json() as { data: Array<{ id: string; context_length?: number }> };
    expect(models.data.find((m) => m.id === MODEL)?.context_length).toBe(40_960);
  });

  it('the models list in Anthropic shape for the SDK', async () => {
    const page = await client.models.list();
    expect(page.data.map((m) => m.id)).toContain(MODEL);
    expect(page.data[0]).toMatchObject({ type: 'model', max_input_tokens: 40_960 });
    const one = await client.models.retrieve(MODEL);
    expect(one.id).toBe(MODEL);
  });
});
