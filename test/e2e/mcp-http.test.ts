import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tinyEmbeddingModel, tinyRerankerModel } from '../fixtures/gguf/bert.js';
import { renderOneLine } from '../fixtures/ocr/corpus.js';
import { cer } from '../fixtures/ocr/cer.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * `lserve serve --mcp`: the Model Context Protocol over Streamable HTTP at
 * /mcp, through the official SDK's own Client, on the suite's synthetic
 * models (bert embedding and reranker GGUFs, the tiny Qwen3) and the bundled
 * PP-OCRv4 weights; and /mcp behind the server's Host/Origin rules and API key.
 */

const TOOLS = ['list_models', 'ask_local_model', 'embed_texts', 'rerank_documents', 'read_text_in_image', 'transcribe_audio', 'speak_text', 'generate_image'];

async function connect(server: TestServer, headers: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'lserve-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), { requestInit: { headers } }));
  return client;
}

const call = async (client: Client, name: string, args: Record<string, unknown>) => (await client.callTool({ name, arguments: args })) as CallToolResult;
const textOf = (result: CallToolResult) => result.content.map((c) => (c.type === 'text' ? c.text : '')).join('\n');

describe('MCP over Streamable HTTP (serve --mcp)', () => {
  let server: TestServer;
  let client: Client;

  beforeAll(async () => {
    server = await startTestServer({ engine: { threads: 1 }, server: { mcp: true } });
    await server.engine.store.registerLocal(tinyEmbeddingModel(), { kind: 'embedding', id: 'bge-test' });
    await server.engine.store.registerLocal(tinyRerankerModel(), { kind: 'rerank', id: 'rerank-test' });
    await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
    client = await connect(server);
  });

  afterAll(async () => {
    await client?.close();
    await server?.stop();
  });

  it('lists every tool with its input and output schemas', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...TOOLS].sort());
    for (const tool of tools) {
      expect(tool.description, tool.name).toBeTruthy();
      expect(tool.inputSchema.type, tool.name).toBe('object');
      expect(tool.outputSchema?.type, tool.name).toBe('object');
    }
    const ocr = tools.find((t) => t.name === 'read_text_in_image')!;
    // Over HTTP a tool takes no local path.
    expect(Object.keys(ocr.inputSchema.properties ?? {}).sort()).toEqual(['image_base64', 'image_url', 'model']);
    const embed = tools.find((t) => t.name === 'embed_texts')!;
    expect(embed.inputSchema.required).toEqual(['texts']);
  });

  it('list_models shows the installed models as /v1/models does', async () => {
    const result = await call(client, 'list_models', {});
    expect(result.isError).toBeFalsy();
    const { models } = result.structuredContent as { models: Array<{ id: string; kind: string; loaded: boolean; default?: true }> };
    const http = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<Record<string, unknown>> };
    expect(models).toEqual(http.data);
    expect(models.find((m) => m.id === 'bge-test')).toMatchObject({ kind: 'embedding', default: true });
    const chat = await call(client, 'list_models', { kind: 'chat' });
    expect((chat.structuredContent as { models: Array<{ id: string }> }).models.map((m) => m.id)).toEqual([CHAT_MODEL_ID]);
  });

  it('embed_texts embeds on the default embedding model: unit vectors, one per text', async () => {
    const result = await call(client, 'embed_texts', { texts: ['hello world', 'another text'] });
    expect(result.isError, textOf(result)).toBeFalsy();
    const body = result.structuredContent as { model: string; dimensions: number; embeddings: number[][]; usage: { prompt_tokens: number } };
    expect(body.model).toBe('bge-test');
    expect(body.dimensions).toBe(64);
    expect(body.embeddings).toHaveLength(2);
    for (const v of body.embeddings) expect(Math.hypot(...v)).toBeCloseTo(1, 4);
    expect(body.usage.prompt_tokens).toBeGreaterThan(0);
    // The same numbers as POST /v1/embeddings.
    const http = (await (await fetch(`${server.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'bge-test', input: 'hello world' }) })).json()) as {
      data: Array<{ embedding: number[] }>;
    };
    expect(body.embeddings[0]![0]).toBeCloseTo(http.data[0]!.embedding[0]!, 5);
  });

  it('rerank_documents sorts documents by score, each with its index and text', async () => {
    const documents = ['Paris is the capital of France.', 'Bananas are yellow.', 'Berlin is in Germany.'];
    const result = await call(client, 'rerank_documents', { query: 'capital of France?', documents, top_n: 2 });
    expect(result.isError, textOf(result)).toBeFalsy();
    const body = result.structuredContent as { model: string; results: Array<{ index: number; relevance_score: number; document: string }> };
    expect(body.model).toBe('rerank-test');
    expect(body.results).toHaveLength(2);
    expect(body.results[0]!.relevance_score).toBeGreaterThanOrEqual(body.results[1]!.relevance_score);
    for (const r of body.results) expect(r.document).toBe(documents[r.index]);
  });

  it('ask_local_model answers with the local chat model, with progress notifications', async () => {
    const progress: number[] = [];
    const result = (await client.callTool({ name: 'ask_local_model', arguments: { prompt: 'Say hi.', max_tokens: 4, think: false, temperature: 0 } }, undefined, {
      onprogress: (p) => progress.push(p.progress),
    })) as CallToolResult;
    expect(result.isError, textOf(result)).toBeFalsy();
    const body = result.structuredContent as { model: string; answer: string; finish_reason: string; usage: { completion_tokens: number } };
    expect(body.model).toBe(CHAT_MODEL_ID);
    expect(typeof body.answer).toBe('string');
    expect(body.usage.completion_tokens).toBeLessThanOrEqual(4);
    expect(['stop', 'length']).toContain(body.finish_reason);
    expect(progress.length).toBeGreaterThan(0);
    expect(progress).toEqual([...progress].sort((a, b) => a - b));
  });

  it('read_text_in_image reads text from a base64 image with the bundled OCR model', async () => {
    const text = 'Receipts are read offline.';
    const { png } = await renderOneLine(text, 26);
    const result = await call(client, 'read_text_in_image', { image_base64: png.toString('base64') });
    expect(result.isError, textOf(result)).toBeFalsy();
    const body = result.structuredContent as { text: string; lines: Array<{ text: string; confidence: number; box: number[][] }>; image_width: number };
    expect(cer(text, body.text)).toBeLessThanOrEqual(0.02);
    expect(body.lines[0]!.box).toHaveLength(4);
    expect(body.lines[0]!.confidence).toBeGreaterThan(0);
    expect(body.image_width).toBeGreaterThan(0);
  });

  it('a model that is not installed is a tool error naming the pull to run', async () => {
    const missing = await call(client, 'speak_text', { text: 'hello' });
    expect(missing.isError).toBe(true);
    expect(textOf(missing)).toMatch(/lserve pull \S+/);
    const named = await call(client, 'generate_image', { prompt: 'a fox', model: 'sd-turbo' });
    expect(named.isError).toBe(true);
    expect(textOf(named)).toContain('lserve pull sd-turbo');
  });

  it('bad arguments are tool errors, and the server goes on serving', async () => {
    const empty = await call(client, 'embed_texts', { texts: [] });
    expect(empty.isError).toBe(true);
    expect(textOf(empty)).toMatch(/texts/);
    const wrongType = await call(client, 'rerank_documents', { query: 42, documents: ['a'] });
    expect(wrongType.isError).toBe(true);
    // A local path is no argument over HTTP.
    const local = await call(client, 'read_text_in_image', { image_path: '/etc/passwd' });
    expect(local.isError).toBe(true);
    expect(textOf(local)).not.toContain('root:');
    const none = await call(client, 'read_text_in_image', {});
    expect(none.isError).toBe(true);
    expect(textOf(none)).toContain("'image_base64' or 'image_url'");
    const badBase64 = await call(client, 'read_text_in_image', { image_base64: 'not base64 at all!' });
    expect(badBase64.isError).toBe(true);
    // URLs follow the server's rules: no private addresses by default.
    const privateUrl = await call(client, 'transcribe_audio', { audio_url: `${server.url}/health`, model: 'bge-test' });
    expect(privateUrl.isError).toBe(true);
    const ok = await call(client, 'list_models', {});
    expect(ok.isError).toBeFalsy();
  });

  it('lists installed models as lserve://models/<id> resources and reads them', async () => {
    const { resources } = await client.listResources();
    // Every installed model, the bundled OCR one included: what /v1/models lists.
    const listed = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(resources.map((r) => r.uri).sort()).toEqual(listed.data.map((m) => `lserve://models/${m.id}`).sort());
    expect(resources.map((r) => r.uri)).toContain(`lserve://models/${CHAT_MODEL_ID}`);
    const read = await client.readResource({ uri: 'lserve://models/bge-test' });
    const content = read.contents[0]!;
    expect(content.mimeType).toBe('application/json');
    const model = JSON.parse('text' in content ? content.text : '') as Record<string, unknown>;
    const http = (await (await fetch(`${server.url}/v1/models/bge-test`)).json()) as Record<string, unknown>;
    expect(model).toEqual(http);
    await expect(client.readResource({ uri: 'lserve://models/no-such-model' })).rejects.toThrow();
  });

  it('refuses a foreign Origin and a foreign Host before any work', async () => {
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });
    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
    const foreign = await fetch(`${server.url}/mcp`, { method: 'POST', headers: { ...headers, origin: 'https://evil.example' }, body });
    expect(foreign.status).toBe(403);
    const http = await import('node:http');
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request(`${server.url}/mcp`, { method: 'POST', headers: { ...headers, host: 'rebound.example' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end(body);
    });
    expect(status).toBe(403);
    // Any message but initialize needs a session; one that ended is a 404 (the client then starts a new one).
    expect((await fetch(`${server.url}/mcp`, { headers: { accept: 'text/event-stream' } })).status).toBe(400);
    expect((await fetch(`${server.url}/mcp`, { headers: { accept: 'text/event-stream', 'mcp-session-id': 'no-such-session' } })).status).toBe(404);
  });
});

describe('/mcp without --mcp, and with --api-key', () => {
  it('is a 404 that says how to turn it on', async () => {
    const server = await startTestServer();
    try {
      const res = await fetch(`${server.url}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
      expect(res.status).toBe(404);
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe('mcp_disabled');
      expect(body.error.message).toContain('--mcp');
    } finally {
      await server.stop();
    }
  });

  it('requires the API key when one is set', async () => {
    const server = await startTestServer({ server: { mcp: true, apiKey: 'secret' } });
    try {
      await expect(connect(server)).rejects.toThrow();
      await expect(connect(server, { authorization: 'Bearer wrong' })).rejects.toThrow();
      const client = await connect(server, { authorization: 'Bearer secret' });
      const result = await call(client, 'list_models', {});
      expect(result.isError).toBeFalsy();
      await client.close();
    } finally {
      await server.stop();
    }
  });
});

describe('cancelling an MCP call over HTTP', () => {
  it('stops its work: the cancelled generation ends long before its max_tokens', async () => {
    const server = await startTestServer({ engine: { threads: 1 }, server: { mcp: true, metrics: true } });
    try {
      await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
      const client = await connect(server);
      const cancel = new AbortController();
      const call = client.callTool({ name: 'ask_local_model', arguments: { prompt: 'Write a long story.', max_tokens: 3000, think: false } }, undefined, {
        signal: cancel.signal,
        onprogress: () => cancel.abort(),
      });
      await expect(call).rejects.toThrow();
      // The generation's count reaches /metrics when it ends: soon after the cancel, far short of 3000 tokens.
      let generated: number | undefined;
      for (let waited = 0; generated === undefined && waited < 20_000; waited += 100) {
        const text = await (await fetch(`${server.url}/metrics`)).text();
        const line = text.split('\n').find((l) => l.startsWith(`lserve_chat_completion_tokens_total{model="${CHAT_MODEL_ID}"}`));
        if (line) generated = Number(line.split(' ').at(-1));
        else await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(generated).toBeDefined();
      expect(generated!).toBeLessThan(500);
      // The session goes on serving.
      const next = (await client.callTool({ name: 'list_models', arguments: {} })) as CallToolResult;
      expect(next.isError).toBeFalsy();
      await client.close();
    } finally {
      await server.stop();
    }
  });
});
