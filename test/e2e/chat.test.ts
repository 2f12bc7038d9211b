import OpenAI from 'openai';
import type { ChatCompletionCreateParamsNonStreaming, ChatCompletionCreateParamsStreaming } from 'openai/resources/chat/completions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TestServer } from '../helpers/server.js';
import { CHAT_MODEL_ID, NEVER_END, startChatServer, THINK_BIAS, TOKENS, tinyQwen3File } from '../helpers/chat-model.js';

/** Extensions of the request body that the openai SDK passes through untouched. */
type Extended<T> = T & { thinking_enabled?: boolean; thinking_tokens?: number; top_k?: number };

let server: TestServer;
let client: OpenAI;

beforeAll(async () => {
  ({ server, client } = await startChatServer());
});

afterAll(async () => {
  await server?.stop();
});

const base = { model: CHAT_MODEL_ID, temperature: 0 } as const;

describe('POST /v1/chat/completions through the openai client', () => {
  it('lists the chat model', async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toContain(CHAT_MODEL_ID);
  });

  it('answers non-streamed with the chat.completion shape and real usage', async () => {
    const res = await client.chat.completions.create({
      ...base,
      messages: [
        { role: 'system', content: 'You are terse.' },
        { role: 'user', content: [{ type: 'text', text: 'Say' }, { type: 'text', text: ' hello' }] },
      ],
      max_tokens: 5,
    });
    expect(res.object).toBe('chat.completion');
    expect(res.id).toMatch(/^chatcmpl-/);
    expect(res.model).toBe(CHAT_MODEL_ID);
    expect(res.choices).toHaveLength(1);
    expect(res.choices[0]!.message.role).toBe('assistant');
    expect(['stop', 'length']).toContain(res.choices[0]!.finish_reason);
    expect(res.usage!.prompt_tokens).toBeGreaterThan(10);
    expect(res.usage!.completion_tokens).toBeGreaterThan(0);
    expect(res.usage!.completion_tokens).toBeLessThanOrEqual(5);
    expect(res.usage!.total_tokens).toBe(res.usage!.prompt_tokens + res.usage!.completion_tokens);
  });

  it('stops at max_tokens with finish_reason length and exactly that many tokens', async () => {
    // Banning the end-of-turn token keeps the random model talking.
    const res = await client.chat.completions.create({
      ...base,
      messages: [{ role: 'user', content: 'count' }],
      max_completion_tokens: 7,
      logit_bias: NEVER_END,
    });
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.usage!.completion_tokens).toBe(7);
  });

  it('streams chunks: role first, content deltas, finish_reason, usage, [DONE]', async () => {
    const stream = await client.chat.completions.create({
      ...base,
      messages: [{ role: 'user', content: 'stream please' }],
      max_tokens: 6,
      stream: true,
      stream_options: { include_usage: true },
      logit_bias: NEVER_END,
    } satisfies ChatCompletionCreateParamsStreaming);
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    const withFinish = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(withFinish).toHaveLength(1);
    expect(withFinish[0]!.choices[0]!.finish_reason).toBe('length');
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage!.completion_tokens).toBe(6);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(text.length).toBeGreaterThan(0);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
  });

  it('puts thinking in reasoning_content, never in content, and honours the budget', async () => {
    // Steer the random model into opening a thought with `<think>\n` (bias both; the penalties stop
    // them repeating) and ban `</think>` so that only the budget can end the thought.
    const body: Extended<ChatCompletionCreateParamsNonStreaming> = {
      ...base,
      messages: [{ role: 'user', content: 'think first' }],
      max_tokens: 12,
      logit_bias: THINK_BIAS,
      presence_penalty: 2,
      frequency_penalty: 2,
      thinking_enabled: true,
      thinking_tokens: 3,
    };
    const res = await client.chat.completions.create(body);
    const message = res.choices[0]!.message as { content: string | null; reasoning_content?: string };
    expect(message.reasoning_content).toBeTruthy();
    expect(message.content).not.toContain('<think>');
    expect(message.content).not.toContain(message.reasoning_content!);
    const reasoningTokens = await countTokens(message.reasoning_content!);
    expect(reasoningTokens).toBeLessThanOrEqual(4);
    expect(message.content!.length).toBeGreaterThan(0);
  });

  it('thinking_enabled false renders the template without a thought and returns none', async () => {
    const on = await client.chat.completions.create({ ...base, messages: [{ role: 'user', content: 'q' }], max_tokens: 1 });
    const body: Extended<ChatCompletionCreateParamsNonStreaming> = { ...base, messages: [{ role: 'user', content: 'q' }], max_tokens: 3, thinking_enabled: false };
    const off = await client.chat.completions.create(body);
    // Qwen3's template pre-fills an empty <think>\n\n</think>\n\n when thinking is off.
    expect(off.usage!.prompt_tokens).toBeGreaterThan(on.usage!.prompt_tokens);
    expect((off.choices[0]!.message as { reasoning_content?: string }).reasoning_content).toBeUndefined();
  });

  it('streams reasoning in delta.reasoning_content', async () => {
    const body: Extended<ChatCompletionCreateParamsStreaming> = {
      ...base,
      messages: [{ role: 'user', content: 'think first' }],
      max_tokens: 10,
      stream: true,
      logit_bias: THINK_BIAS,
      presence_penalty: 2,
      frequency_penalty: 2,
      thinking_tokens: 2,
    };
    const stream = await client.chat.completions.create(body);
    let reasoning = '';
    let content = '';
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as { content?: string; reasoning_content?: string } | undefined;
      reasoning += delta?.reasoning_content ?? '';
      content += delta?.content ?? '';
    }
    expect(reasoning.length).toBeGreaterThan(0);
    expect(content).not.toContain('<think>');
  });

  it('round-trips a tool call: tool_calls out, tool result back in, then an answer', async () => {
    const tools = [
      {
        type: 'function' as const,
        function: {
          name: 'get_weather',
          description: 'Current weather of a city',
          parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'London'] } }, required: ['city'] },
        },
      },
    ];
    const question = { role: 'user' as const, content: 'Weather in Paris?' };
    const first = await client.chat.completions.create({ ...base, messages: [question], tools, tool_choice: 'required', max_tokens: 40 });
    const choice = first.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    const call = choice.message.tool_calls![0]!;
    expect(call.type).toBe('function');
    if (call.type !== 'function') throw new Error('unreachable');
    expect(call.function.name).toBe('get_weather');
    expect(['Paris', 'London']).toContain(JSON.parse(call.function.arguments).city);
    expect(call.id).toMatch(/^call_/);

    const second = await client.chat.completions.create({
      ...base,
      tools,
      max_tokens: 4,
      messages: [question, choice.message, { role: 'tool', tool_call_id: call.id, content: '{"temperature_c": 21}' }],
    });
    expect(second.choices[0]!.message.role).toBe('assistant');
    // The tool call and its result are part of the prompt now.
    expect(second.usage!.prompt_tokens).toBeGreaterThan(first.usage!.prompt_tokens);
  });

  it('streams a tool call as a tool_calls delta', async () => {
    const stream = await client.chat.completions.create({
      ...base,
      messages: [{ role: 'user', content: 'Weather?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { enum: ['Paris'] } } } } }],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
      max_tokens: 40,
      stream: true,
    });
    const calls = [];
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      calls.push(...(chunk.choices[0]?.delta.tool_calls ?? []));
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(calls[0]!.function!.name).toBe('get_weather');
    expect(JSON.parse(calls[0]!.function!.arguments!)).toEqual({ city: 'Paris' });
    expect(finish).toBe('tool_calls');
  });

  it('enforces response_format json_schema with a grammar', async () => {
    const res = await client.chat.completions.create({
      ...base,
      messages: [{ role: 'user', content: 'json please' }],
      max_tokens: 30,
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'answer', schema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } },
      },
    });
    expect(typeof JSON.parse(res.choices[0]!.message.content!).ok).toBe('boolean');
  });

  it('stops at a stop sequence', async () => {
    const probe = await client.chat.completions.create({ ...base, messages: [{ role: 'user', content: 'go' }], max_tokens: 6, logit_bias: NEVER_END });
    const text = probe.choices[0]!.message.content!;
    const stop = text.slice(2, 3) || text.slice(0, 1);
    const res = await client.chat.completions.create({ ...base, messages: [{ role: 'user', content: 'go' }], max_tokens: 6, stop: [stop], logit_bias: NEVER_END });
    expect(res.choices[0]!.finish_reason).toBe('stop');
    expect(res.choices[0]!.message.content).not.toContain(stop);
  });
});

/** Tokens of `text` under the model's own tokenizer (vocabulary-only load: fast). */
async function countTokens(text: string): Promise<number> {
  const { getRuntime } = await import('../../src/runtimes/llama/runtime.js');
  const llama = await getRuntime();
  const model = await llama.loadModel({ modelPath: tinyQwen3File(), vocabOnly: true });
  try {
    return model.tokenize(text).length;
  } finally {
    await model.dispose();
  }
}
