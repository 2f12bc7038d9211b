import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NO_CHOICES } from '../../src/core/model-choice.js';
import { CHAT_MODEL_ID, NEVER_END, TOKENS, tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * llama.cpp's server utility routes (/tokenize, /detokenize,
 * /apply-template, /infill) on the tiny random-weight Qwen3, whose real
 * Qwen tokenizer has the fill-in-the-middle, repository and file-separator
 * tokens, and Qwen2-VL's text model, whose trimmed tokenizer has none.
 * Request and answer shapes are llama.cpp's server README's; the infill
 * prompt is checked token by token against the layout llama.cpp's server
 * builds (each piece tokenized on its own, in order).
 */

const NO_FIM = 'qwen2-vl-text';
const golden = (file: string) => fileURLToPath(new URL(`../golden/qwen2-vl/${file}`, import.meta.url));
/** Qwen's FIM tokens. */
const FIM = { pre: 151659, mid: 151660, suf: 151661, repo: 151663, sep: 151664 } as const;
const IM_START = 151644;

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1, models: { ...NO_CHOICES, defaults: { chat: CHAT_MODEL_ID } } } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  await server.engine.store.registerLocal(golden('model.gguf'), { kind: 'chat', id: NO_FIM });
}, 60_000);

afterAll(async () => {
  await server?.stop();
});

async function post(path: string, body: unknown): Promise<{ status: number; json: any; text: string; type: string | null }> {
  const res = await fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text, type: res.headers.get('content-type') };
}

async function tokens(content: string, extra: Record<string, unknown> = {}): Promise<number[]> {
  const answer = await post('/tokenize', { content, ...extra });
  expect(answer.status, answer.text).toBe(200);
  return answer.json.tokens as number[];
}

function expectError(answer: { status: number; json: any; text: string }, status: number, param: string | null, code?: string) {
  expect(answer.status, answer.text).toBe(status);
  expect(answer.json.error).toMatchObject({ param, ...(code ? { code } : {}) });
  expect(typeof answer.json.error.message).toBe('string');
  expect(answer.json.error.message).not.toMatch(/\n\s+at /);
}

describe('POST /tokenize and /detokenize', () => {
  const text = 'Hello world!\n<|im_start|>user naïve café 日本語 🦙 — ok';

  it('tokenizes on the default chat model when the body names none, and round-trips through /detokenize', async () => {
    const ids = await tokens(text);
    expect(await tokens(text, { model: CHAT_MODEL_ID })).toEqual(ids);
    expect(ids).toContain(IM_START);
    const back = await post('/detokenize', { tokens: ids });
    expect(back.status, back.text).toBe(200);
    expect(back.json).toEqual({ content: text });
    expect((await post('/detokenize', { tokens: [] })).json).toEqual({ content: '' });
  });

  it('with_pieces: each id with its text, or its bytes where they are part of a character; the pieces make up the text', async () => {
    const ids = await tokens(text);
    const answer = await post('/tokenize', { content: text, with_pieces: true });
    expect(answer.status, answer.text).toBe(200);
    const pieces = answer.json.tokens as Array<{ id: number; piece: string | number[] }>;
    expect(pieces.map((p) => p.id)).toEqual(ids);
    expect(pieces.find((p) => p.id === IM_START)?.piece).toBe('<|im_start|>');
    // The llama is more than one token in Qwen's vocabulary: its pieces are bytes, no valid UTF-8 alone.
    expect(pieces.some((p) => Array.isArray(p.piece))).toBe(true);
    const bytes = pieces.flatMap((p) => (Array.isArray(p.piece) ? p.piece : [...Buffer.from(p.piece)]));
    expect(Buffer.from(bytes).toString('utf8')).toBe(text);
  });

  it('parse_special: false reads control tokens\' text as plain text, as llama.cpp does', async () => {
    const plain = 'def add(a, b):\n    return a + b  # naïve 🦙';
    expect(await tokens(plain, { parse_special: false })).toEqual(await tokens(plain));
    // llama.cpp's llama-server (the bundled commit) on this model file answers these ids: <|im_start|> and
    // <|im_end|> (control tokens) as their characters, <think> (a user-defined token) still one token.
    expect(await tokens(text, { parse_special: false })).toEqual([9707, 1879, 4894, 27, 91, 318, 4906, 91, 29, 872, 94880, 586, 51950, 75402, 21894, 102819, 11162, 99, 247, 1959, 5394]);
    expect(await tokens('x = "<|im_end|>" <think> <|fim_prefix|>', { parse_special: false })).toEqual([87, 284, 4055, 91, 318, 6213, 91, 9877, 220, 151667, 82639, 69, 318, 13974, 91, 29]);
  });

  it('add_special adds no BOS on a tokenizer that adds none (Qwen), and another model tokenizes with its own vocabulary', async () => {
    expect(await tokens('hello', { add_special: true })).toEqual(await tokens('hello'));
    const other = await tokens('<|fim_prefix|>', { model: NO_FIM });
    expect(other.length).toBeGreaterThan(1);
    expect(await tokens('<|fim_prefix|>')).toEqual([FIM.pre]);
  });

  it('refuses ids outside the vocabulary, wrong types and unknown models', async () => {
    expectError(await post('/detokenize', { tokens: [1, 10_000_000] }), 400, 'tokens');
    expectError(await post('/detokenize', { tokens: [-1] }), 400, 'tokens.0');
    expectError(await post('/detokenize', { tokens: 'x' }), 400, 'tokens');
    expectError(await post('/tokenize', {}), 400, 'content', 'missing_required_parameter');
    expectError(await post('/tokenize', { content: 5 }), 400, 'content');
    expectError(await post('/tokenize', { content: 'x', with_pieces: 'yes' }), 400, 'with_pieces');
    expectError(await post('/tokenize', { content: 'x', model: 'no-such-model' }), 404, 'model', 'model_not_found');
  });
});

describe('POST /apply-template', () => {
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'What is 2 + 2?' },
  ];

  it('answers the prompt the chat model evaluates for the same messages (its token count is the chat answer\'s prompt_tokens)', async () => {
    const answer = await post('/apply-template', { messages });
    expect(answer.status, answer.text).toBe(200);
    const prompt = answer.json.prompt as string;
    expect(Object.keys(answer.json)).toEqual(['prompt']);
    expect(prompt).toContain('<|im_start|>user\nWhat is 2 + 2?<|im_end|>');
    expect(prompt).toMatch(/<\|im_start\|>assistant\n(<think>\n\n<\/think>\n\n)?$/);
    const chat = await post('/v1/chat/completions', { model: CHAT_MODEL_ID, messages, max_tokens: 1 });
    expect(chat.status, chat.text).toBe(200);
    expect((await tokens(prompt)).length).toBe(chat.json.usage.prompt_tokens);
  });

  it('renders tools and the thinking switch as chat completions takes them', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'The weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }];
    const withTools = (await post('/apply-template', { messages, tools })).json.prompt as string;
    expect(withTools).toContain('<tools>\n{"type": "function", "function": {"name": "get_weather"');
    expect(withTools).toMatch(/<\|im_start\|>assistant\n$/);
    const off = (await post('/apply-template', { messages, chat_template_kwargs: { enable_thinking: false } })).json.prompt as string;
    expect(off.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
  });

  it('refuses malformed messages', async () => {
    expectError(await post('/apply-template', { messages: 'x' }), 400, 'messages');
    expectError(await post('/apply-template', { messages, add_generation_prompt: false }), 400, 'add_generation_prompt');
  });
});

describe('POST /infill', () => {
  const extra = [
    { filename: 'src/math.py', text: 'def mul(a, b):\n    return a * b\n' },
    { filename: 'README.md', text: '# Tools\nSmall helpers.\n' },
  ];
  const body = { input_prefix: 'from math import mul\n\ndef square(x):\n', prompt: '    return ', input_suffix: '\n\nprint(square(3))\n', input_extra: extra, n_predict: 4, temperature: 0, seed: 1 };

  /**
   * The tokens llama.cpp's server puts before the middle: each piece tokenized on its own, in the
   * repository-level layout; special tokens' text read as plain text except in `prompt`.
   */
  async function llamaCppLayout(request: typeof body): Promise<number[]> {
    const plain = (text: string) => tokens(text, { parse_special: false });
    const ids = [FIM.repo, ...(await plain('myproject\n'))];
    for (const chunk of request.input_extra) ids.push(FIM.sep, ...(await plain(`${chunk.filename}\n`)), ...(await plain(chunk.text)));
    ids.push(FIM.sep, ...(await plain('filename\n')));
    ids.push(FIM.pre, ...(await plain(request.input_prefix)), ...(await tokens(request.prompt)), FIM.suf, ...(await plain(request.input_suffix)), FIM.mid);
    return ids;
  }

  it('lays the prompt out as llama.cpp does, token for token, and answers as its /completion does', async () => {
    const answer = await post('/infill', body);
    expect(answer.status, answer.text).toBe(200);
    const result = answer.json;
    const expected = await llamaCppLayout(body);
    expect(await tokens(result.prompt)).toEqual(expected);
    expect(result.tokens_evaluated).toBe(expected.length);
    expect(result).toMatchObject({ index: 0, stop: true, model: CHAT_MODEL_ID, truncated: false, tokens: [] });
    expect(typeof result.content).toBe('string');
    expect(result.tokens_predicted).toBeGreaterThan(0);
    expect(result.tokens_predicted).toBeLessThanOrEqual(4);
    expect(['eos', 'limit']).toContain(result.stop_type);
    expect(result.has_new_line).toBe(result.content.includes('\n'));
    expect(result.timings).toMatchObject({ predicted_n: result.tokens_predicted, prompt_n: result.tokens_evaluated - result.tokens_cached, cache_n: result.tokens_cached });
    for (const key of ['prompt_ms', 'predicted_ms', 'predicted_per_second']) expect(result.timings[key], key).toBeGreaterThanOrEqual(0);
    // Greedy: the same request, the same middle.
    expect((await post('/infill', body)).json.content).toBe(result.content);
  });

  it('without input_extra: the current file only, after the repository name', async () => {
    const plain = { ...body, input_extra: [] };
    const answer = await post('/infill', { ...plain, input_extra: undefined, n_predict: 1 });
    expect(answer.status, answer.text).toBe(200);
    expect(await tokens(answer.json.prompt)).toEqual(await llamaCppLayout(plain));
    expect(answer.json.prompt.startsWith('<|repo_name|>myproject\n<|file_sep|>filename\n<|fim_prefix|>from math')).toBe(true);
  });

  it('streams data: lines, one per piece, then the last with stop, counts and timings, and no [DONE]', async () => {
    const answer = await post('/infill', { ...body, stream: true, n_predict: 6, logit_bias: { ...NEVER_END, [TOKENS.newline]: 10 } });
    expect(answer.status).toBe(200);
    expect(answer.type).toMatch(/^text\/event-stream/);
    expect(answer.text).not.toContain('[DONE]');
    const events = answer.text.split('\n\n').filter((e) => e.startsWith('data: ')).map((e) => JSON.parse(e.slice(6)));
    const last = events.at(-1);
    const pieces = events.slice(0, -1);
    expect(pieces.length).toBeGreaterThan(0);
    for (const piece of pieces) expect(piece).toMatchObject({ index: 0, stop: false, tokens_evaluated: last.tokens_evaluated });
    expect(last).toMatchObject({ stop: true, content: '', tokens_evaluated: (await llamaCppLayout(body)).length });
    expect(last).toMatchObject({ tokens_predicted: 6, stop_type: 'limit' });
    expect(pieces.map((p) => p.content).join('')).toContain('\n');
    expect(last.has_new_line).toBe(true);
    expect(last.timings.predicted_n).toBe(last.tokens_predicted);
  });

  it('response_fields picks the fields of the answer, nested ones by path', async () => {
    const answer = await post('/infill', { ...body, n_predict: 1, response_fields: ['content', 'timings/prompt_n', 'tokens_evaluated'] });
    expect(Object.keys(answer.json).sort()).toEqual(['content', 'timings/prompt_n', 'tokens_evaluated']);
  });

  it('a model whose vocabulary has no FIM tokens is a 400 that names it', async () => {
    const answer = await post('/infill', { ...body, model: NO_FIM });
    expectError(answer, 400, 'input_suffix', 'fim_unsupported');
    expect(answer.json.error.message).toContain(NO_FIM);
  });

  it('reads special tokens\' text in the prefix, suffix and chunks as plain text, as llama.cpp does', async () => {
    const request = { ...body, input_prefix: 'x = "<|im_end|>"\n', input_extra: [{ filename: 'a.txt', text: '<|endoftext|>' }], n_predict: 1 };
    const answer = await post('/infill', request);
    expect(answer.status, answer.text).toBe(200);
    expect(answer.json.prompt).toContain('<|file_sep|>a.txt\n<|endoftext|><|file_sep|>filename\n<|fim_prefix|>x = "<|im_end|>"\n');
    // The two spelled tokens count as their characters (the prompt's text, read back, would make them one token each).
    const expected = await llamaCppLayout(request);
    expect(answer.json.tokens_evaluated).toBe(expected.length);
    expect((await tokens(answer.json.prompt)).length).toBeLessThan(expected.length);
  });

  it('refuses malformed fields', async () => {
    expectError(await post('/infill', { input_suffix: '' }), 400, 'input_prefix', 'missing_required_parameter');
    expectError(await post('/infill', { input_prefix: '' }), 400, 'input_suffix', 'missing_required_parameter');
    expectError(await post('/infill', { ...body, input_extra: 'x' }), 400, 'input_extra');
    expectError(await post('/infill', { ...body, input_extra: [{ filename: 'a' }] }), 400, 'input_extra.0.text');
    expectError(await post('/infill', { ...body, input_extra: Array.from({ length: 257 }, () => ({ text: 'x' })) }), 400, 'input_extra');
    expectError(await post('/infill', { ...body, n_predict: 0 }), 400, 'n_predict');
    expectError(await post('/infill', { ...body, n_probs: 5 }), 400, 'n_probs');
    expectError(await post('/infill', { ...body, model: 'no-such-model' }), 404, 'model', 'model_not_found');
  });

  it('accepts the fields editor plugins send that tune llama.cpp\'s own slots', async () => {
    const answer = await post('/infill', { ...body, n_predict: 1, cache_prompt: true, samplers: ['top_k', 'top_p', 'infill'], t_max_prompt_ms: 500, t_max_predict_ms: 1000, top_k: 40, top_p: 0.99 });
    expect(answer.status, answer.text).toBe(200);
  });
});
