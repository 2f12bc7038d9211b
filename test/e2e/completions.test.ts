import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatModel } from '../../src/core/tasks/chat.js';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * POST /v1/completions through the official openai SDK, unmodified, on the
 * tiny random-weight Qwen3 (real tokenizer, which declares FIM tokens): the
 * prompt forms, echo with log-probabilities (what evaluation harnesses
 * score with), max_tokens 0, suffix, n and best_of, streaming with usage.
 * The log-probabilities' own consistency is checked here (greedy picks the
 * top alternative, a token among the alternatives has their number, the
 * offsets follow the text); their agreement with transformers needs the
 * golden model.
 */

const NO_FIM = 'qwen2-vl-text';
const golden = (file: string) => fileURLToPath(new URL(`../golden/qwen2-vl/${file}`, import.meta.url));
let server: TestServer;
let client: OpenAI;

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1 } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  await server.engine.store.registerLocal(golden('model.gguf'), { kind: 'chat', id: NO_FIM });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  await server?.stop();
});

async function tokens(text: string): Promise<number[]> {
  const lease = await server.engine.acquire<ChatModel>(CHAT_MODEL_ID, ['chat']);
  try {
    return await lease.model.tokenize!(text);
  } finally {
    lease.release();
  }
}

describe('POST /v1/completions', () => {
  it('continues a string prompt as it is, with usage', async () => {
    const answer = await client.completions.create({ model: CHAT_MODEL_ID, prompt: 'The capital of France is', max_tokens: 6, temperature: 0, logit_bias: NEVER_END });
    expect(answer.object).toBe('text_completion');
    expect(answer.model).toBe(CHAT_MODEL_ID);
    expect(answer.choices).toHaveLength(1);
    expect(answer.choices[0]).toMatchObject({ index: 0, logprobs: null, finish_reason: 'length' });
    expect(answer.choices[0]!.text.length).toBeGreaterThan(0);
    expect(answer.usage).toEqual({ prompt_tokens: (await tokens('The capital of France is')).length, completion_tokens: 6, total_tokens: (await tokens('The capital of France is')).length + 6 });
  });

  it('takes token ids, and several prompts with n choices each, indexed prompt by prompt', async () => {
    const ids = await tokens('Once upon a time');
    const [byText, byIds] = await Promise.all([
      client.completions.create({ model: CHAT_MODEL_ID, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, logit_bias: NEVER_END }),
      client.completions.create({ model: CHAT_MODEL_ID, prompt: ids, max_tokens: 5, temperature: 0, logit_bias: NEVER_END }),
    ]);
    expect(byIds.choices[0]!.text).toBe(byText.choices[0]!.text);
    const several = await client.completions.create({ model: CHAT_MODEL_ID, prompt: ['one', 'two', 'three'], n: 2, max_tokens: 3, logit_bias: NEVER_END });
    expect(several.choices.map((c) => c.index)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(several.usage!.completion_tokens).toBe(18);
    const arrays = await client.completions.create({ model: CHAT_MODEL_ID, prompt: [ids, await tokens('Hello')], max_tokens: 2 });
    expect(arrays.choices).toHaveLength(2);
  });

  it('scores a prompt with echo, logprobs and max_tokens 0, as evaluation harnesses ask', async () => {
    const prompt = 'The quick brown fox jumps over the lazy dog';
    const answer = await client.completions.create({ model: CHAT_MODEL_ID, prompt, max_tokens: 0, echo: true, logprobs: 5 });
    const choice = answer.choices[0]!;
    expect(choice.text).toBe(prompt);
    const lp = choice.logprobs as Required<OpenAI.Completions.CompletionChoice.Logprobs>;
    const ids = await tokens(prompt);
    expect(lp.tokens).toHaveLength(ids.length);
    expect(lp.tokens.join('')).toBe(prompt);
    expect(lp.token_logprobs[0]).toBeNull();
    expect(lp.top_logprobs![0]).toBeNull();
    expect(lp.text_offset).toEqual(lp.tokens.map((_, i) => lp.tokens.slice(0, i).join('').length));
    for (let i = 1; i < ids.length; i++) {
      const logprob = lp.token_logprobs[i]!;
      const top = Object.entries(lp.top_logprobs![i]!);
      expect(top).toHaveLength(5);
      expect(logprob).toBeLessThanOrEqual(0);
      // The alternatives come likeliest first; a token among them has their number, one outside is below the fifth.
      expect(top.map(([, v]) => v)).toEqual([...top.map(([, v]) => v)].sort((a, b) => b - a));
      const mine = top.find(([t]) => t === lp.tokens[i]);
      if (mine) expect(logprob).toBeCloseTo(mine[1], 6);
      else expect(logprob).toBeLessThanOrEqual(top.at(-1)![1] + 1e-6);
    }
    expect(answer.usage).toMatchObject({ prompt_tokens: ids.length, completion_tokens: 0 });
  });

  it('reports the answer\'s log-probabilities: greedy picks each position\'s likeliest token', async () => {
    const answer = await client.completions.create({ model: CHAT_MODEL_ID, prompt: 'Numbers: one, two,', max_tokens: 8, temperature: 0, logprobs: 2, echo: true, logit_bias: NEVER_END });
    const lp = answer.choices[0]!.logprobs as Required<OpenAI.Completions.CompletionChoice.Logprobs>;
    const promptLength = (await tokens('Numbers: one, two,')).length;
    expect(lp.tokens).toHaveLength(promptLength + 8);
    for (let i = promptLength; i < lp.tokens.length; i++) {
      const [first] = Object.entries(lp.top_logprobs![i]!);
      expect(lp.token_logprobs[i]).toBeCloseTo(first![1], 5);
    }
    expect(answer.choices[0]!.text.startsWith('Numbers: one, two,')).toBe(true);
  });

  it('fills the middle with suffix, and refuses it for a model without FIM tokens', async () => {
    const filled = await client.completions.create({ model: CHAT_MODEL_ID, prompt: 'def add(a, b):\n    return ', suffix: '\n', max_tokens: 4, logit_bias: NEVER_END });
    expect(filled.choices[0]!.finish_reason).toBe('length');
    expect(filled.usage!.prompt_tokens).toBe((await tokens('def add(a, b):\n    return ')).length + (await tokens('\n')).length + 3);
    await expect(client.completions.create({ model: NO_FIM, prompt: 'x', suffix: 'y', max_tokens: 2 })).rejects.toMatchObject({ status: 400, code: 'fim_unsupported' });
  });

  it('keeps the best n of best_of candidates', async () => {
    const answer = await client.completions.create({ model: CHAT_MODEL_ID, prompt: 'Hello', n: 1, best_of: 3, max_tokens: 4, logit_bias: NEVER_END });
    expect(answer.choices).toHaveLength(1);
    expect(answer.usage!.completion_tokens).toBe(12);
  });

  it('streams each choice\'s text, then usage', async () => {
    const stream = await client.completions.create({ model: CHAT_MODEL_ID, prompt: 'Hello there', n: 2, max_tokens: 5, stream: true, stream_options: { include_usage: true }, logit_bias: NEVER_END });
    const texts = ['', ''];
    const finishes: Array<string | null> = [null, null];
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        texts[choice.index] += choice.text;
        if (choice.finish_reason) finishes[choice.index] = choice.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(texts.every((t) => t.length > 0)).toBe(true);
    expect(finishes).toEqual(['length', 'length']);
    expect(usage).toMatchObject({ completion_tokens: 10 });
  });

  it('refuses what it cannot do, naming the field', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ prompt: 'x', n: 3, best_of: 2 }, 'best_of'],
      [{ prompt: 'x', max_tokens: 0 }, 'max_tokens'],
      [{ prompt: 'x', logprobs: 21 }, 'logprobs'],
      [{ prompt: 'x', n: 17 }, 'n'],
      [{ prompt: [] }, 'prompt'],
      [{ prompt: [-1] }, 'prompt'],
      [{ prompt: 'x', echo: true, suffix: 'y' }, 'echo'],
      [{ prompt: 'x', bogus: 1 }, 'bogus'],
      [{ prompt: 'x', stream: true, n: 1, best_of: 2 }, 'best_of'],
    ];
    for (const [fields, param] of cases) {
      const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: CHAT_MODEL_ID, ...fields }) });
      const body = (await res.json()) as { error: { param: string | null } };
      expect({ fields, status: res.status, param: body.error.param?.split('.')[0] }).toEqual({ fields, status: 400, param });
    }
    // A token id outside the vocabulary.
    const res = await fetch(`${server.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: CHAT_MODEL_ID, prompt: [99_999_999] }) });
    expect(res.status).toBe(400);
  });
});

describe('log-probabilities in chat completions', () => {
  const base = { model: CHAT_MODEL_ID, messages: [{ role: 'user' as const, content: 'Count with me.' }], temperature: 0, max_tokens: 6, logit_bias: NEVER_END, thinking_enabled: false } as OpenAI.ChatCompletionCreateParamsNonStreaming;

  it('gives each answer token with its bytes and likeliest alternatives; greedy picks the first', async () => {
    const answer = await client.chat.completions.create({ ...base, logprobs: true, top_logprobs: 3 });
    const content = answer.choices[0]!.logprobs!.content!;
    expect(content).toHaveLength(6);
    expect(content.map((t) => t.token).join('')).toBe(answer.choices[0]!.message.content);
    for (const token of content) {
      expect(token.bytes).toEqual([...Buffer.from(token.token, 'utf8')]);
      expect(token.top_logprobs).toHaveLength(3);
      expect(token.logprob).toBeCloseTo(token.top_logprobs[0]!.logprob, 5);
      expect(token.top_logprobs[0]!.logprob).toBeGreaterThanOrEqual(token.top_logprobs[2]!.logprob);
    }
    const plain = await client.chat.completions.create(base);
    expect(plain.choices[0]!.logprobs).toBeNull();
    expect(plain.choices[0]!.message.content).toBe(answer.choices[0]!.message.content);
  });

  it('streams them in a chunk of their own before the last', async () => {
    const stream = await client.chat.completions.create({ ...base, logprobs: true, top_logprobs: 1, stream: true });
    let text = '';
    const scored: string[] = [];
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      for (const token of chunk.choices[0]?.logprobs?.content ?? []) scored.push(token.token);
    }
    expect(scored.join('')).toBe(text);
  });

  it('refuses logprobs with tools, and top_logprobs without logprobs', async () => {
    const tool = { type: 'function' as const, function: { name: 'f', parameters: { type: 'object', properties: {} } } };
    await expect(client.chat.completions.create({ ...base, logprobs: true, tools: [tool] })).rejects.toMatchObject({ status: 400, param: 'logprobs' });
    await expect(client.chat.completions.create({ ...base, top_logprobs: 2 })).rejects.toMatchObject({ status: 400, param: 'top_logprobs' });
    await expect(client.chat.completions.create({ ...base, logprobs: true, top_logprobs: 21 })).rejects.toMatchObject({ status: 400, param: 'top_logprobs' });
  });
});

describe('log-probabilities in the Responses API', () => {
  it('gives the answer text its tokens with include message.output_text.logprobs, streamed and not', async () => {
    const request = { model: CHAT_MODEL_ID, input: 'Count with me.', max_output_tokens: 5, temperature: 0, include: ['message.output_text.logprobs' as const], top_logprobs: 2, store: false, reasoning: { effort: 'none' } } as OpenAI.Responses.ResponseCreateParamsNonStreaming;
    const response = await client.responses.create({ ...request, logit_bias: NEVER_END } as never as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    const message = response.output.find((item) => item.type === 'message') as OpenAI.Responses.ResponseOutputMessage;
    const text = message.content[0] as OpenAI.Responses.ResponseOutputText;
    expect(text.logprobs!.map((t) => t.token).join('')).toBe(text.text);
    expect(text.logprobs!.every((t) => t.top_logprobs.length === 2 && Math.abs(t.logprob - t.top_logprobs[0]!.logprob) < 1e-5)).toBe(true);
    const stream = await client.responses.create({ ...request, stream: true, logit_bias: NEVER_END } as never as OpenAI.Responses.ResponseCreateParamsStreaming);
    let done: OpenAI.Responses.ResponseTextDoneEvent | undefined;
    for await (const event of stream) if (event.type === 'response.output_text.done') done = event;
    expect(done!.logprobs!.map((t) => t.token).join('')).toBe(done!.text);
  });
});

