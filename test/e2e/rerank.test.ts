import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinyEmbeddingModel, tinyRerankerModel } from '../fixtures/gguf/bert.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * POST /v1/rerank end to end: a random-weight `bert` reranker GGUF (real BGE
 * tokenizer, the `cls.*` classification head llama.cpp's RANK pooling reads),
 * the real server and node-llama-cpp's ranking context. Scores of random
 * weights mean nothing, so ordering is checked against the scores themselves
 * and against scoring each document alone.
 */

interface RerankBody {
  object: string;
  model: string;
  results: Array<{ index: number; relevance_score: number; document?: { text: string } }>;
  usage: { prompt_tokens: number; total_tokens: number };
  error?: Record<string, unknown>;
}

async function rerank(server: TestServer, body: unknown): Promise<{ status: number; body: RerankBody }> {
  const res = await fetch(`${server.url}/v1/rerank`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as RerankBody };
}

function expectError(response: { status: number; body: RerankBody }, status: number, fields: Record<string, unknown>): void {
  expect(response.status, JSON.stringify(fields)).toBe(status);
  const error = response.body.error!;
  expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(error).toMatchObject({ message: expect.any(String), ...fields });
  expect(JSON.stringify(response.body)).not.toMatch(/at .*\.(ts|js):\d+/);
}

const query = 'What is the capital of France?';
const documents = [
  'Paris is the capital and largest city of France.',
  'The mitochondria is the powerhouse of the cell.',
  'Berlin is the capital of Germany.',
  'France is a country in Western Europe; its capital is Paris.',
  'Bananas are yellow.',
];

describe('POST /v1/rerank', () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer();
    await server.engine.store.registerLocal(tinyRerankerModel(), { kind: 'rerank', id: 'rerank-test' });
    await server.engine.store.registerLocal(tinyEmbeddingModel(), { kind: 'embedding', id: 'bge-test' });
  });

  afterAll(async () => {
    await server?.stop();
  });

  it('scores every document, sorted best first, in the DESIGN.md shape with real token usage', async () => {
    const { status, body } = await rerank(server, { model: 'rerank-test', query, documents });
    expect(status).toBe(200);
    expect(body.object).toBe('list');
    expect(body.model).toBe('rerank-test');
    expect(body.results.map((r) => r.index).sort()).toEqual([0, 1, 2, 3, 4]);
    for (const r of body.results) {
      expect(Object.keys(r).sort()).toEqual(['index', 'relevance_score']);
      expect(r.relevance_score).toBeGreaterThan(0);
      expect(r.relevance_score).toBeLessThan(1);
    }
    const scores = body.results.map((r) => r.relevance_score);
    expect(scores).toEqual([...scores].sort((a, b) => b - a));
    expect(new Set(scores).size).toBeGreaterThan(1);
    expect(body.usage.prompt_tokens).toBeGreaterThan(5 * 10);
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens);

    // Scoring in one batch gives each document the score it gets alone.
    for (const r of body.results) {
      const alone = await rerank(server, { model: 'rerank-test', query, documents: [documents[r.index]!] });
      expect(alone.body.results[0]!.relevance_score).toBeCloseTo(r.relevance_score, 6);
    }
  });

  it('top_n cuts to the best n; return_documents adds the text; {text} documents score like strings', async () => {
    const all = (await rerank(server, { model: 'rerank-test', query, documents })).body.results;
    const top = await rerank(server, { model: 'rerank-test', query, documents: documents.map((text) => ({ text })), top_n: 2, return_documents: true });
    expect(top.status).toBe(200);
    expect(top.body.results).toHaveLength(2);
    expect(top.body.results.map((r) => r.index)).toEqual(all.slice(0, 2).map((r) => r.index));
    for (const r of top.body.results) expect(r.document).toEqual({ text: documents[r.index] });
    top.body.results.forEach((r, i) => expect(r.relevance_score).toBeCloseTo(all[i]!.relevance_score, 6));
    const many = await rerank(server, { model: 'rerank-test', query, documents, top_n: 50 });
    expect(many.body.results).toHaveLength(5);
  });

  it('a document too long for the context is a 400 naming it, or is cut with truncate: true', async () => {
    const long = 'word '.repeat(300);
    expectError(await rerank(server, { model: 'rerank-test', query, documents: ['short', long] }), 400, {
      type: 'invalid_request_error',
      param: 'documents.1',
      code: 'context_length_exceeded',
    });
    const cut = await rerank(server, { model: 'rerank-test', query, documents: ['short', long], truncate: true });
    expect(cut.status).toBe(200);
    expect(cut.body.results).toHaveLength(2);
    expectError(await rerank(server, { model: 'rerank-test', query: long, documents: ['short'] }), 400, { param: 'query', code: 'context_length_exceeded' });
  });

  it('every bad input is a 4xx in the OpenAI error shape, and the server keeps serving', async () => {
    const bad: Array<[unknown, number, Record<string, unknown>]> = [
      [{ model: 'rerank-test', documents }, 400, { param: 'query', code: 'missing_required_parameter' }],
      [{ model: 'rerank-test', query }, 400, { param: 'documents', code: 'missing_required_parameter' }],
      [{ query, documents }, 400, { param: 'model' }],
      [{ model: 'rerank-test', query: '', documents }, 400, { param: 'query' }],
      [{ model: 'rerank-test', query: 7, documents }, 400, { param: 'query', code: 'invalid_value' }],
      [{ model: 'rerank-test', query, documents: [] }, 400, { param: 'documents' }],
      [{ model: 'rerank-test', query, documents: 'one doc' }, 400, { param: 'documents' }],
      [{ model: 'rerank-test', query, documents: ['ok', 5] }, 400, { param: 'documents.1' }],
      [{ model: 'rerank-test', query, documents: ['ok', { body: 'x' }] }, 400, { param: 'documents.1' }],
      [{ model: 'rerank-test', query, documents: ['ok', ''] }, 400, { param: 'documents.1' }],
      [{ model: 'rerank-test', query, documents, top_n: 0 }, 400, { param: 'top_n' }],
      [{ model: 'rerank-test', query, documents, top_n: 1.5 }, 400, { param: 'top_n' }],
      [{ model: 'rerank-test', query, documents, return_documents: 'yes' }, 400, { param: 'return_documents' }],
      ['"just a string"', 400, { param: null }],
      [{ model: 'no-such-reranker', query, documents }, 404, { type: 'not_found_error', code: 'model_not_found' }],
      [{ model: 'bge-reranker-v2-m3', query, documents }, 404, { code: 'model_not_found' }],
      [{ model: 'bge-test', query, documents }, 400, { code: 'wrong_model_kind', param: 'model' }],
    ];
    for (const [body, status, fields] of bad) expectError(await rerank(server, body), status, fields);
    const kind = await rerank(server, { model: 'bge-test', query, documents });
    expect(kind.body.error!.message).toMatch(/is an embedding model, not a rerank model\. Installed: (.+, )?rerank-test[,.]/);
    expect((await fetch(`${server.url}/health`)).status).toBe(200);
    expect((await rerank(server, { model: 'rerank-test', query, documents: ['still here'] })).status).toBe(200);
  });
});
