import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Ollama, type ChatResponse, type Message, type Tool } from 'ollama';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinyEmbeddingModel } from '../fixtures/gguf/bert.js';
import { CHAT_MODEL_ID, NEVER_END, THINK_BIAS, TOKENS, tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import type { ChatModel } from '../../src/core/tasks/chat.js';
import { shippedAddonFor } from '../../src/runtimes/llama/shipped-addon.js';
import { addonSources } from '../../src/runtimes/llama/threadpool-addon.js';

/**
 * Ollama's generation routes (/api/chat, /api/generate, /api/embed,
 * /api/embeddings) driven by the official `ollama` JavaScript client,
 * unmodified, on the tiny random-weight Qwen3 (whose real tokenizer declares
 * the fill-in-the-middle tokens) and a tiny BERT embedder. Random weights
 * say nothing sensible: what is checked is the shape of every answer in
 * Ollama's reference, that the sampling, grammar and tool fields reach the
 * model, and that the timings are measured. Where a test needs the model to
 * do something (call a tool, think), lserve's logit_bias extension in
 * `options` steers it, as the Anthropic tests do.
 */

const NO_FIM = 'qwen2-vl-text';
const golden = (file: string) => fileURLToPath(new URL(`../golden/qwen2-vl/${file}`, import.meta.url));

let server: TestServer;
let ollama: Ollama;

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1 } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  // Qwen2-VL's text model, whose trimmed tokenizer has no FIM tokens.
  await server.engine.store.registerLocal(golden('model.gguf'), { kind: 'chat', id: NO_FIM });
  await server.engine.store.registerLocal(tinyEmbeddingModel(), { kind: 'embedding', id: 'bge-test' });
  ollama = new Ollama({ host: server.url });
}, 60_000);

afterAll(async () => {
  await server?.stop();
});

const weather: Tool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', required: ['city'], properties: { city: { type: 'string', description: 'the city', enum: ['Paris', 'Tokyo'] } } },
  },
};

/** The timing fields of a final object: positive, and adding up to the total. */
function expectTimings(final: ChatResponse | { total_duration: number; load_duration: number; prompt_eval_duration: number; eval_duration: number; prompt_eval_count: number; eval_count: number }) {
  for (const field of ['total_duration', 'load_duration', 'prompt_eval_duration', 'eval_duration', 'prompt_eval_count', 'eval_count'] as const) {
    expect(Number.isInteger(final[field]), field).toBe(true);
    expect(final[field], field).toBeGreaterThan(0);
  }
  const parts = final.load_duration + final.prompt_eval_duration + final.eval_duration;
  expect(Math.abs(parts - final.total_duration) / final.total_duration).toBeLessThan(0.1);
}

describe('POST /api/chat through the ollama client', () => {
  it('answers in one object with the fields of Ollama\'s reference', async () => {
    const answer = await ollama.chat({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'Hello?' }], think: false, stream: false, options: { num_predict: 8, temperature: 0, seed: 3 } });
    expect(answer).toMatchObject({ model: CHAT_MODEL_ID, done: true, message: { role: 'assistant' } });
    expect(typeof answer.message.content).toBe('string');
    expect(['stop', 'length']).toContain(answer.done_reason);
    expect(answer.message.thinking).toBeUndefined();
    expect(new Date(answer.created_at).getTime()).toBeGreaterThan(Date.now() - 60_000);
    expect(answer.eval_count).toBeLessThanOrEqual(8);
    expectTimings(answer);
  });

  it('streams one object per token, the last done with timings that add up to the wall time (the client\'s, within 10 %)', async () => {
    const wallStart = performance.now();
    const chunks: ChatResponse[] = [];
    const stream = await ollama.chat({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'Tell me more.' }], think: false, stream: true, options: { num_predict: 160, temperature: 0, logit_bias: NEVER_END } as never });
    for await (const chunk of stream) chunks.push(chunk);
    const wall = (performance.now() - wallStart) * 1e6;
    const final = chunks.at(-1)!;
    expect(final.done).toBe(true);
    expect(final.done_reason).toBe('length');
    expect(chunks.slice(0, -1).every((c) => !c.done && c.message.role === 'assistant')).toBe(true);
    const pieces = chunks.slice(0, -1).filter((c) => c.message.content !== '');
    expect(final.eval_count).toBe(160);
    // A token that ends inside a character waits for the next one: at most as many pieces as tokens, nearly all of them.
    expect(pieces.length).toBeLessThanOrEqual(final.eval_count);
    expect(pieces.length).toBeGreaterThanOrEqual(final.eval_count * 0.9);
    expectTimings(final);
    expect(final.total_duration).toBeLessThanOrEqual(wall);
    expect(final.total_duration / wall).toBeGreaterThan(0.9);
  });

  it('makes a tool call with arguments of the schema, and answers once given its result', async () => {
    const question: Message = { role: 'user', content: 'Weather in Paris?' };
    // Random weights never call a tool of their own accord: lserve's tool_choice extension makes the answer one.
    const forced = { model: CHAT_MODEL_ID, messages: [question], tools: [weather], think: false, stream: false as const, options: { temperature: 0, num_predict: 60 }, tool_choice: 'required' };
    const first = await ollama.chat(forced);
    const calls = first.message.tool_calls ?? [];
    expect(calls.length).toBeGreaterThanOrEqual(1);
    expect(calls[0]!.function.name).toBe('get_weather');
    expect(['Paris', 'Tokyo']).toContain(calls[0]!.function.arguments.city);
    expect(first.done_reason).toBe('stop');

    const second = await ollama.chat({
      model: CHAT_MODEL_ID,
      // Every call answered, in order, by the name Ollama's tool results carry.
      messages: [question, first.message, ...calls.map((call): Message => ({ role: 'tool', tool_name: call.function.name, content: `{"city": "${call.function.arguments.city}", "temperature": 21}` }) as Message)],
      tools: [weather],
      think: false,
      options: { temperature: 0, num_predict: 6, logit_bias: { [TOKENS.toolCall]: -100 } } as never,
    });
    expect(second.done).toBe(true);
    expect(second.message.tool_calls).toBeUndefined();
    // The call and its result are in the prompt now.
    expect(second.prompt_eval_count).toBeGreaterThan(first.prompt_eval_count + 10);
  });

  it('holds the answer to a JSON schema given as format, and to "json"', async () => {
    const schema = { type: 'object', properties: { answer: { type: 'string', maxLength: 12 } }, required: ['answer'] };
    const shaped = await ollama.chat({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'JSON please' }], format: schema, think: false, options: { temperature: 0, num_predict: 80 } });
    expect(typeof (JSON.parse(shaped.message.content) as { answer: unknown }).answer).toBe('string');
    // Any JSON value under "json": one that ended is whole; one cut by num_predict is at least begun as JSON.
    const json = await ollama.chat({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'JSON please' }], format: 'json', think: false, options: { temperature: 0, num_predict: 80 } });
    if (json.done_reason === 'stop') expect(() => JSON.parse(json.message.content)).not.toThrow();
    else expect(json.message.content).toMatch(/^\s*[[{"\d tfn-]/);
  });

  it('thinks when think is true, and says what it thought apart from the answer', async () => {
    // Steered into a thought as the chat tests steer it: <think> and a newline favoured, the penalties stop them repeating, </think> banned.
    const options = { temperature: 0, num_predict: 12, logit_bias: THINK_BIAS, presence_penalty: 2, frequency_penalty: 2 } as never;
    const answer = await ollama.chat({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'Think first.' }], think: true, options });
    expect(answer.message.thinking?.length).toBeGreaterThan(0);
    const streamed = await ollama.chat({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'Think first.' }], think: 'high', stream: true, options });
    let thinking = '';
    for await (const chunk of streamed) thinking += chunk.message.thinking ?? '';
    expect(thinking.length).toBeGreaterThan(0);
  });

  it('loads a model for an empty messages list, and unloads it with keep_alive 0', async () => {
    const loaded = await ollama.chat({ model: `${CHAT_MODEL_ID}:latest`, messages: [], keep_alive: '10m' });
    expect(loaded).toMatchObject({ done: true, done_reason: 'load', message: { role: 'assistant', content: '' } });
    expect(server.engine.manager.loaded().map((m) => m.id)).toContain(CHAT_MODEL_ID);
    const unloaded = await ollama.chat({ model: CHAT_MODEL_ID, messages: [], keep_alive: 0 });
    expect(unloaded.done_reason).toBe('unload');
    expect(server.engine.manager.loaded().map((m) => m.id)).not.toContain(CHAT_MODEL_ID);
  });

  it('sizes the context with options.num_ctx as --ctx-size does, loading the model again at a new size', async () => {
    const ask = (numCtx: number) => ollama.chat({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], think: false, options: { num_predict: 2, num_ctx: numCtx } });
    const plans = () => server.logs.filter((line) => line.startsWith(`${CHAT_MODEL_ID}: context plan:`));
    const before = plans().length;
    await ask(512);
    expect(plans().at(-1)).toContain(`(--ctx-size ${CHAT_MODEL_ID}=512`);
    await ask(512);
    // The same size again: the loaded model serves it as it is.
    expect(plans().length).toBe(before + 1);
    await ask(2048);
    expect(plans().length).toBe(before + 2);
    expect(plans().at(-1)).toContain(`(--ctx-size ${CHAT_MODEL_ID}=2048`);
    // A prompt beyond it is the context error, not a silent cut.
    await expect(ollama.chat({ model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'word '.repeat(600) }], options: { num_predict: 2, num_ctx: 256 } })).rejects.toMatchObject({ status_code: 400 });
    await server.engine.setContextSize(CHAT_MODEL_ID, 4096);
  });

  it('answers a name nowhere with Ollama\'s 404, and a malformed body with a 400, in its {"error"} shape', async () => {
    await expect(ollama.chat({ model: 'llama3.2:latest', messages: [{ role: 'user', content: 'hi' }] })).rejects.toMatchObject({
      status_code: 404,
      error: 'model "llama3.2:latest" not found, try pulling it first',
    });
    const bodies: unknown[] = [
      { model: CHAT_MODEL_ID, messages: 'hi' },
      { model: CHAT_MODEL_ID, messages: [{ role: 'wizard', content: 'hi' }] },
      { model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], options: { temperature: 'hot' } },
      { model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], think: 'maybe' },
      { model: CHAT_MODEL_ID, messages: [{ role: 'user', content: 'hi' }], keep_alive: 'forever-ish' },
      { model: 7 },
      { model: CHAT_MODEL_ID, prompt: 5 },
      { model: CHAT_MODEL_ID, prompt: 'x', context: [-1] },
      { model: 'bge-test', input: [1, 2] },
    ];
    for (const [i, body] of bodies.entries()) {
      const route = i >= 6 ? (i === 8 ? 'embed' : 'generate') : 'chat';
      const res = await fetch(`${server.url}/api/${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      expect({ i, status: res.status }).toEqual({ i, status: 400 });
      const error = (await res.json()) as { error: unknown };
      expect(typeof error.error, JSON.stringify(error)).toBe('string');
    }
    const broken = await fetch(`${server.url}/api/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model": ' });
    expect(broken.status).toBe(400);
    expect(Object.keys((await broken.json()) as object)).toEqual(['error']);
    // A model of another kind is lserve's 400 that says what it is.
    const wrongKind = await fetch(`${server.url}/api/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'bge-test', messages: [{ role: 'user', content: 'hi' }] }) });
    expect(wrongKind.status).toBe(400);
    expect(((await wrongKind.json()) as { error: string }).error).toMatch(/is an embedding model, not a chat model/);
  });
});

describe('POST /api/generate through the ollama client', () => {
  it('answers a prompt in the chat template, with context tokens that continue it', async () => {
    const first = await ollama.generate({ model: CHAT_MODEL_ID, prompt: 'Once upon a time', system: 'You tell stories.', think: false, stream: false, options: { num_predict: 6, temperature: 0 } });
    expect(first).toMatchObject({ model: CHAT_MODEL_ID, done: true });
    expect(typeof first.response).toBe('string');
    expect(first.context.length).toBeGreaterThan(3);
    expect(first.context.every((t) => Number.isInteger(t) && t >= 0)).toBe(true);
    expectTimings(first);
    const next = await ollama.generate({ model: CHAT_MODEL_ID, prompt: ' and then', system: 'You tell stories.', context: first.context, think: false, stream: false, options: { num_predict: 4, temperature: 0 } });
    // The earlier exchange's text is in this prompt.
    expect(next.prompt_eval_count).toBeGreaterThan(first.prompt_eval_count + first.eval_count - 2);
  });

  it('streams a raw prompt as it is, special tokens read as such', async () => {
    const raw = '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n';
    const stream = await ollama.generate({ model: CHAT_MODEL_ID, prompt: raw, raw: true, stream: true, options: { num_predict: 10, temperature: 0, logit_bias: NEVER_END } as never });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const final = chunks.at(-1)!;
    expect(final).toMatchObject({ done: true, done_reason: 'length', eval_count: 10 });
    // <|im_start|> and <|im_end|> are one token each: 9 in all, not the ~30 of their letters.
    expect(final.prompt_eval_count).toBe(9);
    expect(chunks.slice(0, -1).map((c) => c.response).join('').length).toBeGreaterThan(0);
  });

  it('fills the middle between prompt and suffix with the model\'s FIM tokens', async () => {
    const filled = await ollama.generate({ model: CHAT_MODEL_ID, prompt: 'def add(a, b):\n    return ', suffix: '\n\nprint(add(1, 2))\n', stream: false, options: { num_predict: 8, temperature: 0, logit_bias: NEVER_END } as never });
    expect(filled).toMatchObject({ done: true, done_reason: 'length', eval_count: 8 });
    // <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|>: both texts and the three FIM tokens (Qwen adds no BOS).
    const lease = await server.engine.acquire<ChatModel>(CHAT_MODEL_ID, ['chat']);
    try {
      const [prefix, suffix] = await Promise.all([lease.model.tokenize!('def add(a, b):\n    return '), lease.model.tokenize!('\n\nprint(add(1, 2))\n')]);
      expect(filled.prompt_eval_count).toBe(prefix.length + suffix.length + 3);
    } finally {
      lease.release();
    }
  });

  it('refuses a suffix for a model without FIM tokens, naming the model', async () => {
    await expect(ollama.generate({ model: NO_FIM, prompt: 'def f():', suffix: 'return 1', options: { num_predict: 4 } })).rejects.toMatchObject({
      status_code: 400,
      error: expect.stringMatching(new RegExp(`^Model '${NO_FIM}' declares no fill-in-the-middle tokens`)),
    });
  });

  it('loads the model for an empty prompt, and unloads it with keep_alive 0', async () => {
    expect(await ollama.generate({ model: CHAT_MODEL_ID, prompt: '' })).toMatchObject({ done: true, done_reason: 'load', response: '' });
    expect(await ollama.generate({ model: CHAT_MODEL_ID, prompt: '', keep_alive: 0 })).toMatchObject({ done: true, done_reason: 'unload' });
    expect(server.engine.manager.loaded().map((m) => m.id)).not.toContain(CHAT_MODEL_ID);
  });
});

describe('POST /api/embed and /api/embeddings through the ollama client', () => {
  it('embeds several inputs, one normalised vector each, with its counts and timings', async () => {
    const result = await ollama.embed({ model: 'bge-test', input: ['the cat sat', 'on the mat', 'a third one'] });
    expect(result.model).toBe('bge-test');
    expect(result.embeddings).toHaveLength(3);
    const width = result.embeddings[0]!.length;
    expect(width).toBeGreaterThan(0);
    for (const vector of result.embeddings) {
      expect(vector).toHaveLength(width);
      expect(Math.hypot(...vector)).toBeCloseTo(1, 4);
    }
    expect(result.embeddings[0]).not.toEqual(result.embeddings[1]);
    expect(result.prompt_eval_count).toBeGreaterThan(6);
    expect(result.total_duration).toBeGreaterThan(0);
    const one = await ollama.embeddings({ model: 'bge-test', prompt: 'the cat sat' });
    expect(one.embedding).toHaveLength(width);
    expect(one.embedding[0]).toBeCloseTo(result.embeddings[0]![0]!, 5);
  });
});

interface GoldenCase {
  image: string;
  prompt: string;
  tokens: number[];
  text: string;
}

const sources = addonSources();
const shipped = sources !== undefined && process.platform === 'linux' && shippedAddonFor(sources) !== undefined;

describe.skipIf(!shipped)('an image in /api/chat (the Qwen2-VL golden model; needs the linux-x64 addon)', () => {
  const savedBuild = process.env.LSERVE_LLAMA_BUILD;
  let vision: TestServer;
  beforeAll(async () => {
    process.env.LSERVE_LLAMA_BUILD = 'threadpool'; // llama.cpp's multimodal library comes with lserve's own binary
    vision = await startTestServer({ engine: { threads: 1, contextSizes: { models: { 'qwen2-vl-tiny': 8192 } } } });
    await vision.engine.store.registerLocal(golden('model.gguf'), { kind: 'chat', id: 'qwen2-vl-tiny', mmproj: golden('mmproj.gguf') });
  }, 60_000);
  afterAll(async () => {
    await vision?.stop();
    process.env.LSERVE_LLAMA_BUILD = savedBuild;
  });

  it("answers with transformers' greedy tokens for a base64 image in images", async () => {
    const reference = JSON.parse(readFileSync(golden('reference.json'), 'utf8')) as { cases: GoldenCase[] };
    const c = reference.cases[0]!;
    const client = new Ollama({ host: vision.url });
    const answer = await client.chat({
      model: 'qwen2-vl-tiny',
      messages: [
        { role: 'system', content: 'You are a helpful assistant.' },
        { role: 'user', content: c.prompt, images: [readFileSync(golden(c.image)).toString('base64')] },
      ],
      options: { temperature: 0, num_predict: c.tokens.length },
    });
    expect(answer.message.content).toBe(c.text);
    expect(answer.eval_count).toBe(c.tokens.length);
  }, 60_000);
});
