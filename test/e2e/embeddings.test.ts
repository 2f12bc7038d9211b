import { readFile } from 'node:fs/promises';
import path from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinyEmbeddingModel, tinyRerankerModel } from '../fixtures/gguf/bert.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * POST /v1/embeddings end to end: a random-weight `bert` GGUF with the real
 * BGE tokenizer (CLS pooling, 64 dimensions, 128-token context), the real
 * server and node-llama-cpp, and the official OpenAI client.
 */

const norm = (v: ArrayLike<number>) => Math.sqrt(Array.from(v).reduce((s, x) => s + x * x, 0));

async function post(server: TestServer, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${server.url}/v1/embeddings`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

function expectError(response: { status: number; body: Record<string, unknown> }, status: number, fields: Record<string, unknown>): void {
  expect(response.status).toBe(status);
  const error = response.body.error as Record<string, unknown>;
  expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(error).toMatchObject({ message: expect.any(String), ...fields });
  expect(JSON.stringify(response.body)).not.toMatch(/at .*\.(ts|js):\d+/);
}

describe('POST /v1/embeddings', () => {
  let server: TestServer;
  let client: OpenAI;

  beforeAll(async () => {
    server = await startTestServer();
    const store = server.engine.store;
    await store.registerLocal(tinyEmbeddingModel(), { kind: 'embedding', id: 'bge-test' });
    await store.registerLocal(tinyRerankerModel(), { kind: 'rerank', id: 'rerank-test' });
    // The same file again, declared Matryoshka-trained so 'dimensions' may shorten it.
    const mrl = await store.registerLocal(tinyEmbeddingModel(), { kind: 'embedding', id: 'mrl-test' });
    const manifestFile = path.join(store.modelDir(mrl.id), 'manifest.json');
    const manifest = JSON.parse(await readFile(manifestFile, 'utf8'));
    await store.writeManifest(mrl.id, { ...manifest, entry: { ...manifest.entry, defaults: { matryoshka: true } } });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  afterAll(async () => {
    await server?.stop();
  });

  it('embeds one string through the OpenAI client (float), unit length, with real token usage', async () => {
    const res = await client.embeddings.create({ model: 'bge-test', input: 'hello world', encoding_format: 'float' });
    expect(res.object).toBe('list');
    expect(res.model).toBe('bge-test');
    expect(res.data).toHaveLength(1);
    expect(res.data[0]).toMatchObject({ object: 'embedding', index: 0 });
    expect(res.data[0]!.embedding).toHaveLength(64);
    expect(norm(res.data[0]!.embedding)).toBeCloseTo(1, 5);
    // [CLS] hello world [SEP]
    expect(res.usage).toEqual({ prompt_tokens: 4, total_tokens: 4 });
  });

  it('base64 is little-endian float32 that the OpenAI client decodes to the same floats', async () => {
    const float = await client.embeddings.create({ model: 'bge-test', input: 'hello world', encoding_format: 'float' });
    // With no encoding_format the SDK asks for base64 itself and decodes it.
    const decoded = await client.embeddings.create({ model: 'bge-test', input: 'hello world' });
    expect(decoded.data[0]!.embedding).toEqual(float.data[0]!.embedding);
    const raw = await client.embeddings.create({ model: 'bge-test', input: 'hello world', encoding_format: 'base64' });
    const text = raw.data[0]!.embedding as unknown as string;
    expect(typeof text).toBe('string');
    const bytes = Buffer.from(text, 'base64');
    expect(bytes.length).toBe(64 * 4);
    expect(Array.from({ length: 64 }, (_, i) => bytes.readFloatLE(i * 4))).toEqual(float.data[0]!.embedding);
  });

  it('a batch returns one vector per input, in order, equal to embedding each alone', async () => {
    const texts = ['the cat sat on the mat', 'hello world', 'quantum chromodynamics', 'hello world', 'a', 'rain in spain'];
    const batch = await client.embeddings.create({ model: 'bge-test', input: texts, encoding_format: 'float' });
    expect(batch.data.map((d) => d.index)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(batch.data[1]!.embedding).toEqual(batch.data[3]!.embedding);
    expect(batch.data[0]!.embedding).not.toEqual(batch.data[1]!.embedding);
    const alone = await client.embeddings.create({ model: 'bge-test', input: texts[2]!, encoding_format: 'float' });
    for (const [a, b] of alone.data[0]!.embedding.map((x, i) => [x, batch.data[2]!.embedding[i]!])) expect(a).toBeCloseTo(b!, 5);
    const single = await Promise.all(texts.map((t) => client.embeddings.create({ model: 'bge-test', input: t, encoding_format: 'float' })));
    expect(batch.usage.prompt_tokens).toBe(single.reduce((s, r) => s + r.usage.prompt_tokens, 0));
  });

  it('token-id inputs (one array or an array of arrays) embed like the text they spell', async () => {
    const text = await client.embeddings.create({ model: 'bge-test', input: 'hello world', encoding_format: 'float' });
    // BGE WordPiece ids of "hello" and "world"; the server adds [CLS]/[SEP] as for text.
    const one = await client.embeddings.create({ model: 'bge-test', input: [7592, 2088], encoding_format: 'float' });
    const many = await client.embeddings.create({ model: 'bge-test', input: [[7592, 2088], [7592]], encoding_format: 'float' });
    expect(one.data[0]!.embedding).toEqual(text.data[0]!.embedding);
    expect(many.data).toHaveLength(2);
    expect(many.data[0]!.embedding).toEqual(text.data[0]!.embedding);
    expect(many.usage.prompt_tokens).toBe(4 + 3);
  });

  it("'dimensions' shortens (and re-normalises) only on a model trained for it", async () => {
    const full = await client.embeddings.create({ model: 'mrl-test', input: 'hello world', encoding_format: 'float' });
    const short = await client.embeddings.create({ model: 'mrl-test', input: 'hello world', encoding_format: 'float', dimensions: 16 });
    expect(short.data[0]!.embedding).toHaveLength(16);
    expect(norm(short.data[0]!.embedding)).toBeCloseTo(1, 5);
    const prefix = full.data[0]!.embedding.slice(0, 16);
    const scale = norm(prefix);
    short.data[0]!.embedding.forEach((x, i) => expect(x).toBeCloseTo(prefix[i]! / scale, 5));
    expect((await client.embeddings.create({ model: 'bge-test', input: 'x', dimensions: 64 })).data[0]!.embedding).toHaveLength(64);
    expectError(await post(server, { model: 'bge-test', input: 'x', dimensions: 16 }), 400, { param: 'dimensions', code: 'unsupported_parameter' });
    expectError(await post(server, { model: 'mrl-test', input: 'x', dimensions: 65 }), 400, { param: 'dimensions', code: 'invalid_value' });
  });

  it('an input longer than the context is a 400 naming its index, or is cut with truncate: true', async () => {
    const long = 'word '.repeat(300);
    const refused = await post(server, { model: 'bge-test', input: ['short', long] });
    expectError(refused, 400, { type: 'invalid_request_error', param: 'input.1', code: 'context_length_exceeded' });
    expect((refused.body.error as { message: string }).message).toMatch(/Input 1 is 302 tokens.*127/);
    const cut = await post(server, { model: 'bge-test', input: ['short', long], truncate: true, encoding_format: 'float' });
    expect(cut.status).toBe(200);
    expect((cut.body.data as unknown[]).length).toBe(2);
    expect(cut.body.usage).toEqual({ prompt_tokens: 3 + 127, total_tokens: 3 + 127 });
  });

  it('concurrent requests are all answered', async () => {
    const results = await Promise.all(
      Array.from({ length: 6 }, (_, i) => client.embeddings.create({ model: 'bge-test', input: [`text ${i}`, `more ${i}`, `and ${i}`], encoding_format: 'float' })),
    );
    for (const r of results) expect(r.data).toHaveLength(3);
  });

  it('every bad input is a 4xx in the OpenAI error shape, and the server keeps serving', async () => {
    const bad: Array<[unknown, number, Record<string, unknown>]> = [
      [{ model: 'bge-test' }, 400, { param: 'input', code: 'missing_required_parameter' }],
      [{ input: 'x' }, 400, { param: 'model', code: 'missing_required_parameter' }],
      [{ model: 'bge-test', input: '' }, 400, { param: 'input' }],
      [{ model: 'bge-test', input: [] }, 400, { param: 'input' }],
      [{ model: 'bge-test', input: ['ok', ''] }, 400, { param: 'input.1' }],
      [{ model: 'bge-test', input: ['ok', 5] }, 400, { param: 'input.1' }],
      [{ model: 'bge-test', input: [['a']] }, 400, { param: 'input.0' }],
      [{ model: 'bge-test', input: 5 }, 400, { param: 'input' }],
      [{ model: 'bge-test', input: { text: 'x' } }, 400, { param: 'input' }],
      [{ model: 'bge-test', input: [1, -2] }, 400, { param: 'input.1' }],
      [{ model: 'bge-test', input: [1.5] }, 400, { param: 'input.0' }],
      [{ model: 'bge-test', input: [[7592], [999_999]] }, 400, { param: 'input.1', code: 'invalid_value' }],
      [{ model: 'bge-test', input: 'x', encoding_format: 'int8' }, 400, { param: 'encoding_format' }],
      [{ model: 'bge-test', input: 'x', dimensions: 0 }, 400, { param: 'dimensions' }],
      [{ model: 'bge-test', input: 'x', truncate: 'yes' }, 400, { param: 'truncate' }],
      [{ model: 42, input: 'x' }, 400, { param: 'model', code: 'invalid_value' }],
      ['[1, 2]', 400, { param: null }],
      [{ model: 'no-such-model', input: 'x' }, 404, { type: 'not_found_error', code: 'model_not_found', param: 'model' }],
      [{ model: 'qwen3-embedding-0.6b', input: 'x' }, 404, { code: 'model_not_found' }],
      [{ model: 'rerank-test', input: 'x' }, 400, { code: 'wrong_model_kind', param: 'model' }],
      [{ model: 'ppocr-v4-mobile', input: 'x' }, 400, { code: 'wrong_model_kind' }],
    ];
    for (const [body, status, fields] of bad) {
      const response = await post(server, body);
      expect.soft(response.status, JSON.stringify(body)).toBe(status);
      expectError(response, status, fields);
    }
    const kind = await post(server, { model: 'rerank-test', input: 'x' });
    expect((kind.body.error as { message: string }).message).toMatch(/is a rerank model, not an embedding model\. Installed: (.+, )?bge-test[,.]/);
    const notInstalled = await post(server, { model: 'qwen3-embedding-0.6b', input: 'x' });
    expect((notInstalled.body.error as { message: string }).message).toMatch(/lserve pull qwen3-embedding-0.6b/);
    // And the reverse: a chat endpoint asked for an embedding model.
    const chat = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'bge-test', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expectError({ status: chat.status, body: (await chat.json()) as Record<string, unknown> }, 400, { code: 'wrong_model_kind', param: 'model', message: expect.stringMatching(/embedding model/) });
    await expect(client.embeddings.create({ model: 'bge-test', input: '' })).rejects.toMatchObject({ status: 400 });
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    expect((await client.embeddings.create({ model: 'bge-test', input: 'still here' })).data).toHaveLength(1);
  });
});
