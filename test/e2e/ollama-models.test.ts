import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ollama, type ProgressResponse } from 'ollama';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Catalog, DEFAULT_CATALOG_PATH } from '../../src/core/catalog.js';
import { tinyEmbeddingModel } from '../fixtures/gguf/bert.js';
import { tinyFimModel } from '../fixtures/gguf/fim.js';
import { tinyQwen3File } from '../helpers/chat-model.js';
import { startMirror, testBytes, writeCatalog, type Mirror } from '../helpers/hf-mirror.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Ollama's model-management API driven by the official `ollama` client,
 * unmodified: list, show, ps, version, pull (from a local hub mirror),
 * delete, copy, create / push (501), and the root probe. If the client
 * parses it and gets what it asked for, the wire format is right.
 */

const REPO = 'test-org/ollama-pullable';
let mirror: Mirror;
let dir: string;
let server: TestServer;
let keyed: TestServer;
let ollama: Ollama;
const previousEndpoint = process.env.HF_ENDPOINT;

/** The error the client threw, with the status it read. */
async function failure(promise: Promise<unknown>): Promise<{ status: number; message: string }> {
  try {
    await promise;
  } catch (error) {
    return { status: (error as { status_code?: number }).status_code ?? 0, message: (error as Error).message };
  }
  throw new Error('expected the call to fail');
}

beforeAll(async () => {
  mirror = await startMirror();
  process.env.HF_ENDPOINT = mirror.endpoint;
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-ollama-models-'));
  const big = await mirror.put(REPO, 'onnx/model.onnx', testBytes(400_000, 11), { linkedEtag: true, bytesPerSecond: 2_000_000 });
  const small = await mirror.put(REPO, 'tokens.txt', testBytes(3_000, 12));
  const real = Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH));
  const catalog = await writeCatalog(dir, [
    {
      id: 'tiny-pull',
      kind: 'asr',
      backend: 'onnx',
      description: 'test model',
      owned_by: 'test',
      license: 'mit',
      aliases: ['tiny:1b'],
      files: { encoder: { repo: REPO, path: 'onnx/model.onnx', size: big.size }, tokens: { repo: REPO, path: 'tokens.txt', sha256: small.sha256, size: small.size } },
    },
    real.get('ppocr-v4-mobile'),
  ]);
  server = await startTestServer({ engine: { catalogPath: catalog, threads: 1, parallel: 1 } });
  keyed = await startTestServer({ engine: { catalogPath: catalog }, server: { apiKey: 'sekrit' } });
  const { store } = server.engine;
  await store.registerLocal(tinyQwen3File(), { kind: 'chat', id: 'qwen3-test' });
  await store.registerLocal(tinyEmbeddingModel(), { kind: 'embedding', id: 'bge-test' });
  await store.registerLocal(tinyFimModel(), { kind: 'chat', id: 'coder-test' });
  ollama = new Ollama({ host: server.url });
});

afterAll(async () => {
  await server?.stop();
  await keyed?.stop();
  await mirror?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
  if (previousEndpoint === undefined) delete process.env.HF_ENDPOINT;
  else process.env.HF_ENDPOINT = previousEndpoint;
});

describe('GET / and /api/version', () => {
  it('answers the root probe as Ollama does, and browsers with the playground', async () => {
    for (const method of ['GET', 'HEAD']) {
      const res = await fetch(`${server.url}/`, { method });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/plain; charset=utf-8');
      if (method === 'GET') expect(await res.text()).toBe('Ollama is running');
    }
    const page = await fetch(`${server.url}/`, { headers: { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' } });
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(await page.text()).toMatch(/^<!doctype html>/i);
  });

  it('answers a version Ollama clients accept (semver, at least their minimums)', async () => {
    const { version } = await ollama.version();
    expect(version).toMatch(/^\d+\.\d+\.\d+$/);
    const [major, minor] = version.split('.').map(Number) as [number, number];
    expect(major > 0 || minor >= 7).toBe(true);
  });
});

describe('list and show', () => {
  it('lists every installed model in Ollama’s shape, and each name shows that model', async () => {
    const { models } = await ollama.list();
    const names = models.map((m) => m.name).sort();
    expect(names).toEqual(['bge-test:latest', 'coder-test:latest', 'ppocr-v4-mobile:latest', 'qwen3-test:latest']);
    for (const m of models) {
      expect(m.model).toBe(m.name);
      expect(m.digest).toMatch(/^[0-9a-f]{64}$/);
      expect(m.size).toBeGreaterThan(0);
      expect(Number.isNaN(new Date(m.modified_at).getTime())).toBe(false);
      expect(Object.keys(m.details).sort()).toEqual(['families', 'family', 'format', 'parameter_size', 'parent_model', 'quantization_level']);
      const shown = await ollama.show({ model: m.name });
      expect(shown.details).toEqual(m.details);
    }
    const qwen = models.find((m) => m.name === 'qwen3-test:latest')!;
    expect(qwen.details).toEqual({ parent_model: '', format: 'gguf', family: 'qwen3', families: ['qwen3'], parameter_size: '9.80M', quantization_level: 'Q8_0' });
    expect(models.find((m) => m.name === 'bge-test:latest')!.details).toMatchObject({ format: 'gguf', family: 'bert', quantization_level: 'F16' });
    // Not a GGUF: listed with what is known.
    expect(models.find((m) => m.name === 'ppocr-v4-mobile:latest')!.details).toMatchObject({ format: 'onnx', family: 'ocr', parameter_size: '', quantization_level: '' });
    // The digest is stable.
    expect((await ollama.list()).models.find((m) => m.name === qwen.name)!.digest).toBe(qwen.digest);
  });

  it('shows a chat model: details, model_info from its header, template, capabilities', async () => {
    const shown = await ollama.show({ model: 'qwen3-test' });
    expect(shown.capabilities).toEqual(expect.arrayContaining(['completion', 'tools', 'thinking']));
    expect(shown.capabilities).not.toContain('insert');
    expect(shown.capabilities).not.toContain('embedding');
    expect(shown.capabilities).not.toContain('vision');
    const info = shown.model_info as unknown as Record<string, unknown>;
    expect(info).toMatchObject({ 'general.architecture': 'qwen3', 'qwen3.context_length': 4096, 'qwen3.embedding_length': 64, 'qwen3.block_count': 2, 'general.file_type': 7 });
    expect(info['general.parameter_count']).toBe(9_798_016);
    expect(info['tokenizer.ggml.tokens']).toBeUndefined();
    expect(shown.template).toContain('<think>');
    expect(shown.modelfile).toContain('FROM qwen3-test:latest');
    expect(typeof shown.parameters).toBe('string');
    // verbose: the tokenizer's arrays too.
    // The client's ShowRequest type (0.6.4) lacks Ollama's `verbose`; it sends whatever the request holds.
    const verboseRequest = { model: 'qwen3-test:latest', verbose: true };
    const verbose = await ollama.show(verboseRequest);
    expect(((verbose.model_info as unknown as Record<string, unknown>)['tokenizer.ggml.tokens'] as string[]).length).toBeGreaterThan(150_000);
  });

  it('embedding models have `embedding`; `insert` only where the GGUF declares FIM tokens', async () => {
    expect((await ollama.show({ model: 'bge-test' })).capabilities).toEqual(['embedding']);
    const coder = await ollama.show({ model: 'coder-test:latest' });
    expect(coder.capabilities).toEqual(expect.arrayContaining(['completion', 'insert']));
    expect((coder.model_info as unknown as Record<string, unknown>)['tokenizer.ggml.fim_pre_token_id']).toBe(151659);
  });

  it('an unknown model is Ollama’s 404', async () => {
    expect(await failure(ollama.show({ model: 'nope:7b' }))).toEqual({ status: 404, message: 'model "nope:7b" not found, try pulling it first' });
  });
});

describe('ps', () => {
  it('lists a model once a request loaded it', async () => {
    expect((await ollama.ps()).models).toEqual([]);
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'qwen3-test', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
    });
    expect(res.status).toBe(200);
    const { models } = await ollama.ps();
    expect(models.map((m) => m.name)).toEqual(['qwen3-test:latest']);
    const [loaded] = models;
    const listed = (await ollama.list()).models.find((m) => m.name === 'qwen3-test:latest')!;
    expect(loaded).toMatchObject({ model: 'qwen3-test:latest', size_vram: 0, digest: listed.digest, details: listed.details });
    expect(loaded!.size).toBeGreaterThan(0);
    expect(new Date(loaded!.expires_at).getTime()).toBeGreaterThan(Date.now());
    expect((loaded as unknown as { context_length: number }).context_length).toBeGreaterThan(0);
  });
});

describe('pull, copy, delete', () => {
  it('pulls a catalog model through the mirror with Ollama’s progress lines', async () => {
    const stream = await ollama.pull({ model: 'tiny:1b', stream: true });
    const lines: ProgressResponse[] = [];
    for await (const line of stream) lines.push(line);
    expect(lines[0]!.status).toBe('pulling manifest');
    const layers = lines.filter((l) => l.digest);
    expect(layers.length).toBeGreaterThan(0);
    for (const l of layers) {
      expect(l.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
      expect(l.status).toBe(`pulling ${l.digest.slice(7, 19)}`);
    }
    // Each file ends complete.
    const ends = new Map(layers.map((l) => [l.digest, l]));
    expect(ends.size).toBe(2);
    for (const end of ends.values()) expect(end.completed).toBe(end.total);
    expect([...ends.values()].map((l) => l.total).sort((a, b) => a - b)).toEqual([3_000, 400_000]);
    expect(lines.slice(-3).map((l) => l.status)).toEqual(['verifying sha256 digest', 'writing manifest', 'success']);
    expect((await ollama.list()).models.map((m) => m.name)).toContain('tiny-pull:latest');
    // Again, not streamed: already there.
    expect(await ollama.pull({ model: 'tiny-pull' })).toEqual({ status: 'success' });
  });

  it('refuses what is not a catalog model: an unknown name is a 404, a path or URL a 400', async () => {
    expect((await failure(ollama.pull({ model: 'no-such-model' }))).status).toBe(404);
    const file = tinyQwen3File();
    expect((await failure(ollama.pull({ model: file }))).status).toBe(400);
    expect((await failure(ollama.pull({ model: 'https://example.com/model.gguf' }))).status).toBe(400);
    expect((await ollama.list()).models.map((m) => m.name)).not.toContain(expect.stringContaining('qwen3-tiny'));
  });

  it('pulls a Hugging Face reference (hf.co/{repo}:{quantization}) from the hub\'s listing of the repository, and answers to it after', async () => {
    const gguf = readFileSync(tinyQwen3File());
    await mirror.put('test-org/Tiny-GGUF', 'tiny-Q8_0.gguf', gguf);
    await mirror.put('test-org/Tiny-GGUF', 'tiny-Q4_K_M.gguf', gguf);
    await mirror.put('test-org/Tiny-GGUF', 'README.md', Buffer.from('# tiny'));
    const lines: ProgressResponse[] = [];
    for await (const line of await ollama.pull({ model: 'hf.co/test-org/Tiny-GGUF:Q8_0', stream: true })) lines.push(line);
    expect(lines.at(-1)!.status).toBe('success');
    const layer = lines.filter((l) => l.digest).at(-1)!;
    expect(layer.completed).toBe(gguf.length);
    expect((await ollama.list()).models.map((m) => m.name)).toContain('tiny-gguf-q8_0:latest');
    // The reference names the installed model from now on.
    const answer = await ollama.chat({ model: 'hf.co/test-org/Tiny-GGUF:Q8_0', messages: [{ role: 'user', content: 'hi' }], options: { num_predict: 2 } });
    expect(answer.done).toBe(true);
    // Without a quantization, Q4_K_M, as Ollama takes it.
    expect(await ollama.pull({ model: 'hf.co/test-org/Tiny-GGUF' })).toEqual({ status: 'success' });
    expect((await ollama.list()).models.map((m) => m.name)).toContain('tiny-gguf-q4_k_m:latest');
    // A quantization the repository lacks, and a repository that is not there: 404s that say what is offered.
    const missing = await failure(ollama.pull({ model: 'hf.co/test-org/Tiny-GGUF:Q2_K' }));
    expect(missing.status).toBe(404);
    expect(missing.message).toMatch(/offers: Q8_0, Q4_K_M|offers: Q4_K_M, Q8_0/);
    expect((await failure(ollama.pull({ model: 'hf.co/test-org/Nothing-GGUF' }))).status).toBe(404);
    await ollama.delete({ model: 'tiny-gguf-q8_0' });
    await ollama.delete({ model: 'tiny-gguf-q4_k_m' });
  });

  it('copies a model: the new name shows it, survives the source’s deletion, and is deleted alone', async () => {
    await ollama.copy({ source: 'tiny-pull', destination: 'tiny-backup:v1' });
    const copy = await ollama.show({ model: 'tiny-backup:v1' });
    expect(copy.details).toEqual((await ollama.show({ model: 'tiny-pull' })).details);
    const digests = Object.fromEntries((await ollama.list()).models.map((m) => [m.name, m.digest]));
    expect(digests['tiny-backup-v1:latest']).toBe(digests['tiny-pull:latest']);
    await ollama.delete({ model: 'tiny-pull' });
    const after = (await ollama.list()).models.map((m) => m.name);
    expect(after).not.toContain('tiny-pull:latest');
    expect(after).toContain('tiny-backup-v1:latest');
    const backup = await server.engine.store.resolve('tiny-backup-v1');
    for (const file of Object.values(backup!.files)) expect(existsSync(file)).toBe(true);
    // Deleting again is Ollama's 404.
    expect(await failure(ollama.delete({ model: 'tiny-pull' }))).toEqual({ status: 404, message: 'model "tiny-pull" not found' });
    await ollama.delete({ model: 'tiny-backup:v1' });
    expect((await ollama.list()).models.map((m) => m.name)).not.toContain('tiny-backup-v1:latest');
  });

  it('a copy of a registered file is usable by its name; a taken name or an unknown source is refused', async () => {
    await ollama.copy({ source: 'qwen3-test:latest', destination: 'my-qwen' });
    expect((await ollama.show({ model: 'my-qwen:latest' })).capabilities).toEqual((await ollama.show({ model: 'qwen3-test' })).capabilities);
    expect((await failure(ollama.copy({ source: 'qwen3-test', destination: 'bge-test' }))).status).toBe(400);
    expect((await failure(ollama.copy({ source: 'missing', destination: 'other' }))).status).toBe(404);
    // Copying onto its own name changes nothing.
    await ollama.copy({ source: 'my-qwen', destination: 'my-qwen:latest' });
    await ollama.delete({ model: 'my-qwen' });
    expect((await ollama.show({ model: 'qwen3-test' })).details.family).toBe('qwen3');
  });

  it('create and push are 501s that say how to register a model', async () => {
    const create = await failure(ollama.create({ model: 'mine', from: 'qwen3-test' }));
    expect(create.status).toBe(501);
    expect(create.message).toContain('npx lserve pull');
    const push = await failure(ollama.push({ model: 'me/mine:latest' }));
    expect(push.status).toBe(501);
    expect(push.message).toContain('POST /api/pull');
  });
});

describe('--api-key', () => {
  it('is required on /api/*, sent as a Bearer token; the root probe needs none', async () => {
    expect((await failure(new Ollama({ host: keyed.url }).list())).status).toBe(401);
    const authed = new Ollama({ host: keyed.url, headers: { Authorization: 'Bearer sekrit' } });
    expect((await authed.list()).models.map((m) => m.name)).toEqual(['ppocr-v4-mobile:latest']);
    expect(await (await fetch(`${keyed.url}/`)).text()).toBe('Ollama is running');
  });
});
