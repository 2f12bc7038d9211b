import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { NEVER_END, tinyQwen3LongFile } from '../helpers/chat-model.js';
import { TINY_QWEN3, writeQwen3Model } from '../fixtures/gguf/qwen3.js';
import { shippedAddonFor } from '../../src/runtimes/llama/shipped-addon.js';
import { addonSources } from '../../src/runtimes/llama/threadpool-addon.js';
import { fileURLToPath } from 'node:url';

/**
 * Contexts sized for agents, on the tiny random Qwen3 with its 40960-token
 * training context, registered without --ctx-size:
 * - lserve's own llama.cpp binary (the addon shipped for linux-x64; the
 *   other suites run the prebuilt one) gives the sequences one KV cache that
 *   any one conversation may fill while short requests run beside it;
 * - on any binary, a conversation whose sequence another request takes is
 *   kept in host memory and restored, not evaluated again;
 * - a default context grows for a conversation longer than it, up to the
 *   training context; beyond that the 400 says the real limit.
 */

const MODEL = 'qwen3-agent';
const sources = addonSources();
const shipped = sources !== undefined && process.platform === 'linux' && shippedAddonFor(sources) !== undefined;
const savedBuild = process.env.LSERVE_LLAMA_BUILD;

/** Words that are one token each in Qwen's vocabulary (with the space before them). */
const COMMON = ['the', 'of', 'and', 'to', 'in', 'is', 'that', 'it', 'for', 'on', 'with', 'as', 'was', 'at', 'by', 'be', 'this', 'are', 'from', 'or'];

/** A text of about `tokens` tokens, different from the start for each `seed`. */
const words = (tokens: number, seed = 'Note') => `${seed}: ${Array.from({ length: tokens }, (_, i) => COMMON[(i * 7 + i / 13) % COMMON.length | 0]!).join(' ')}`;

async function ask(client: OpenAI, content: string, maxTokens = 2, extra: Record<string, unknown> = {}) {
  return client.chat.completions.create({ model: MODEL, temperature: 0, max_tokens: maxTokens, messages: [{ role: 'user', content }], ...extra } as OpenAI.ChatCompletionCreateParamsNonStreaming);
}

describe.skipIf(!shipped)("one KV cache for every sequence (lserve's llama.cpp binary)", () => {
  let server: TestServer;
  let client: OpenAI;

  beforeAll(async () => {
    process.env.LSERVE_LLAMA_BUILD = 'threadpool'; // read by the runner processes the server starts
    server = await startTestServer({ engine: { threads: 1, parallel: 4 } });
    await server.engine.store.registerLocal(tinyQwen3LongFile(), { kind: 'chat', id: MODEL });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  }, 60_000);

  afterAll(async () => {
    await server?.stop();
    process.env.LSERVE_LLAMA_BUILD = savedBuild;
  });

  it('one conversation uses far more than a quarter of the context while short requests run beside it', async () => {
    const [long, ...short] = await Promise.all([ask(client, words(24_000), 4), ask(client, 'hi'), ask(client, 'hello'), ask(client, 'hey')]);
    expect(long.usage!.prompt_tokens).toBeGreaterThan(24_000);
    for (const answer of short) expect(answer.choices[0]!.finish_reason).toBeDefined();
    expect(server.logs.some((l) => l.includes('context plan: 40960 tokens') && l.includes('one KV cache shared by 4 sequences'))).toBe(true);
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string; context_length?: number }> };
    expect(models.data.find((m) => m.id === MODEL)?.context_length).toBe(40_960);
  }, 120_000);

  it('two conversations that cannot both fit take turns (the idle one kept in host memory), and both are answered', async () => {
    const a = words(22_000, 'alpha');
    const b = words(22_000, 'beta');
    const [first, second] = await Promise.all([ask(client, a, 4), ask(client, b, 4)]);
    expect(first.usage!.prompt_tokens + second.usage!.prompt_tokens).toBeGreaterThan(40_960);
    // The first conversation's next turn: restored from host memory, not evaluated again.
    const again = await client.chat.completions.create({ model: MODEL, temperature: 0, max_tokens: 2, messages: [{ role: 'user', content: a }, first.choices[0]!.message, { role: 'user', content: 'and?' }] });
    expect(again.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(21_000);
  }, 180_000);
});

describe('conversations kept in host memory (any binary)', () => {
  let server: TestServer;
  let client: OpenAI;

  beforeAll(async () => {
    // One sequence: every side request takes the conversation's sequence.
    server = await startTestServer({ engine: { threads: 1, parallel: 1 } });
    await server.engine.store.registerLocal(tinyQwen3LongFile(), { kind: 'chat', id: MODEL });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  afterAll(async () => {
    await server?.stop();
  });

  it("an agent's turn after a side request restores its conversation instead of evaluating it again", async () => {
    const system = { role: 'system' as const, content: words(6000, 'rule') };
    const turn1 = [system, { role: 'user' as const, content: 'Fix the bug.' }];
    const first = await client.chat.completions.create({ model: MODEL, temperature: 0, max_tokens: 2, messages: turn1 });
    const turn2 = [...turn1, first.choices[0]!.message, { role: 'user' as const, content: 'Go on.' }];
    const second = await client.chat.completions.create({ model: MODEL, temperature: 0, max_tokens: 2, messages: turn2 });
    expect(second.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(6000);
    // A side request (a title for the session) takes the only sequence.
    await ask(client, 'Write a five-word title for this session.');
    const turn3 = [...turn2, second.choices[0]!.message, { role: 'user' as const, content: 'And the tests?' }];
    const third = await client.chat.completions.create({ model: MODEL, temperature: 0, max_tokens: 2, messages: turn3 });
    expect(third.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(6000);
    expect(third.usage!.prompt_tokens - (third.usage!.prompt_tokens_details!.cached_tokens ?? 0)).toBeLessThan(40);
  }, 120_000);

  it('a tool loop (call, result, call, result, … with no user turn between) evaluates only what each turn adds', async () => {
    const tools: OpenAI.ChatCompletionTool[] = [{ type: 'function', function: { name: 'read', parameters: { type: 'object', properties: { path: { type: 'string' } } } } }];
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'system', content: words(2000, 'rule') }, { role: 'user', content: 'Read the files.' }];
    let previous = 0;
    for (let turn = 1; turn <= 4; turn++) {
      const answer = await client.chat.completions.create({ model: MODEL, temperature: 0, max_tokens: 1, tools, messages });
      const usage = answer.usage!;
      // Everything the previous turn's prompt held is reused; only the call and result added since are evaluated.
      if (turn > 1) expect(usage.prompt_tokens_details!.cached_tokens).toBeGreaterThanOrEqual(previous - 1);
      previous = usage.prompt_tokens;
      messages.push({ role: 'assistant', content: null, tool_calls: [{ id: `c${turn}`, type: 'function', function: { name: 'read', arguments: `{"path":"f${turn}"}` } }] });
      messages.push({ role: 'tool', tool_call_id: `c${turn}`, content: words(200, `file${turn}`) });
    }
  }, 120_000);

  it('--cache-ram 0 keeps nothing: the same turn is evaluated again', async () => {
    const off = await startTestServer({ engine: { threads: 1, parallel: 1, cacheRamBytes: 0 } });
    try {
      await off.engine.store.registerLocal(tinyQwen3LongFile(), { kind: 'chat', id: MODEL });
      const offClient = new OpenAI({ baseURL: `${off.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      const conversation = [{ role: 'system' as const, content: words(3000, 'rule') }, { role: 'user' as const, content: 'Fix it.' }];
      await offClient.chat.completions.create({ model: MODEL, temperature: 0, max_tokens: 2, messages: conversation });
      await ask(offClient, 'title?');
      const again = await offClient.chat.completions.create({ model: MODEL, temperature: 0, max_tokens: 2, messages: conversation });
      expect(again.usage!.prompt_tokens_details!.cached_tokens).toBeLessThan(100);
    } finally {
      await off.stop();
    }
  }, 120_000);
});

describe('context size and growth', () => {
  let server: TestServer | undefined;

  afterEach(async () => {
    await server?.stop();
    server = undefined;
  });

  it('a conversation longer than the training context is a 400 that says so', async () => {
    server = await startTestServer({ engine: { threads: 1 } });
    await server.engine.store.registerLocal(tinyQwen3LongFile(), { kind: 'chat', id: MODEL });
    const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: words(42_000) }] }) });
    expect(res.status).toBe(400);
    const error = ((await res.json()) as { error: { code: string; message: string } }).error;
    expect(error.code).toBe('context_length_exceeded');
    expect(error.message).toMatch(/holds 40960 per conversation, the most it was trained for/);
  }, 120_000);

  it('a size asked for with --ctx-size is kept, and the 400 says how to raise it', async () => {
    server = await startTestServer({ engine: { threads: 1, contextSizes: { models: { [MODEL]: 2048 } } } });
    await server.engine.store.registerLocal(tinyQwen3LongFile(), { kind: 'chat', id: MODEL });
    const res = await fetch(`${server.url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: words(3000) }] }) });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(/--ctx-size qwen3-agent=2048.*lserve serve --ctx-size <model>=<tokens>.*trained for 40960/);
  }, 60_000);

  it('a default context grows for a longer conversation, up to the training context; one asked for with --ctx-size does not', async () => {
    // A 128k-trained model: its default context is the 65536-token cap.
    const file = writeQwen3Model(fileURLToPath(new URL('../.cache/qwen3-tiny-128k.gguf', import.meta.url)), { ...TINY_QWEN3, contextLength: 131_072 });
    server = await startTestServer({ engine: { threads: 1, parallel: 2 } });
    await server.engine.store.registerLocal(file, { kind: 'chat', id: MODEL });
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const short = await ask(client, 'hi');
    expect(short.usage!.prompt_tokens).toBeLessThan(20);
    const long = await ask(client, words(68_000), 2, { logit_bias: NEVER_END });
    expect(long.usage!.prompt_tokens).toBeGreaterThan(68_000);
    expect(server.logs.some((l) => /context grown from 65536 to 131072 tokens/.test(l))).toBe(true);
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string; context_length?: number }> };
    expect(models.data.find((m) => m.id === MODEL)?.context_length).toBe(131_072);
  }, 300_000);
});
