import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { CHAT_MODEL_ID, NEVER_END, tinyQwen3File } from '../helpers/chat-model.js';
import { renderOneLine } from '../fixtures/ocr/corpus.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';

/**
 * GET /metrics (serve --metrics) through the real server: requests counted by
 * route pattern and status, the work the tasks report (chat tokens, OCR
 * pages), loaded models with their memory, requests waiting in a model's
 * line (a speech model's too), 503s per model; off by default (404), and
 * behind the API key and Host checks like every route.
 */

let server: TestServer;
let plain: TestServer;
let keyed: TestServer;
/** Metrics on and the default line (`--max-queue` 64), with a synthetic Piper voice. */
let speaking: TestServer;

beforeAll(async () => {
  // One sequence and no line: a second chat request while one generates is a 503 at once.
  server = await startTestServer({ engine: { threads: 1, parallel: 1, maxQueue: 0 }, server: { metrics: true } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  await server.engine.store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'piper-test' });
  plain = await startTestServer();
  keyed = await startTestServer({ server: { metrics: true, apiKey: 'sesame' } });
  speaking = await startTestServer({ server: { metrics: true } });
  await speaking.engine.store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'piper-test' });
});

afterAll(async () => {
  await server?.stop();
  await plain?.stop();
  await keyed?.stop();
  await speaking?.stop();
});

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus text exposition (comments skipped). */
function parse(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line.trim() || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/.exec(line);
    if (!match) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, key, raw] of (match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[key!] = raw!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

/** Sum of the samples of `name` whose labels include `labels`. */
function value(samples: Sample[], name: string, labels: Record<string, string> = {}): number {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((sum, s) => sum + s.value, 0);
}

async function scrape(target = server, headers: Record<string, string> = {}): Promise<Sample[]> {
  const res = await fetch(`${target.url}/metrics`, { headers });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return parse(await res.text());
}

function chat(body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: CHAT_MODEL_ID, temperature: 0, messages: [{ role: 'user', content: 'count' }], ...body }),
    signal,
  });
}

/** POST /v1/audio/speech for the synthetic Piper voice: `sentences` sentences, streamed back as PCM. */
function speech(target: TestServer, sentences: number): Promise<Response> {
  const input = Array.from({ length: sentences }, (_, i) => `Sentence number ${i + 1} is here.`).join(' ');
  return fetch(`${target.url}/v1/audio/speech`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'piper-test', input, response_format: 'pcm' }),
  });
}

const REQUESTS = 'lserve_http_requests_total';

describe('GET /metrics', () => {
  it('counts Responses API requests by route and their chat tokens as chat ones', async () => {
    const before = await scrape();
    const res = await fetch(`${server.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: CHAT_MODEL_ID, temperature: 0, input: 'count', max_output_tokens: 4, logit_bias: NEVER_END, store: false }),
    });
    expect(res.status).toBe(200);
    const usage = ((await res.json()) as { usage: { input_tokens: number; output_tokens: number } }).usage;
    const after = await scrape();
    const moved = (name: string, labels: Record<string, string> = {}) => value(after, name, labels) - value(before, name, labels);
    expect(moved(REQUESTS, { method: 'POST', route: '/v1/responses', status: '200' })).toBe(1);
    expect(moved('lserve_chat_prompt_tokens_total', { model: CHAT_MODEL_ID })).toBe(usage.input_tokens);
    expect(moved('lserve_chat_completion_tokens_total', { model: CHAT_MODEL_ID })).toBe(4);
  });

  it('counts requests by route pattern and status, and the work the tasks did', async () => {
    const before = await scrape();

    const completion = await chat({ max_tokens: 6, logit_bias: NEVER_END });
    expect(completion.status).toBe(200);
    const usage = ((await completion.json()) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    expect(usage.completion_tokens).toBe(6);

    const line = await renderOneLine('Metrics count pages.', 26);
    const ocr = await fetch(`${server.url}/v1/ocr`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'ppocr-v4-mobile', image_base64: line.png.toString('base64') }),
    });
    expect(ocr.status).toBe(200);
    await ocr.arrayBuffer();

    expect((await fetch(`${server.url}/v1/no-such-route`)).status).toBe(404);
    expect((await fetch(`${server.url}/v1/models/model-42-that-is-not-there`)).status).toBe(404);

    const after = await scrape();
    const moved = (name: string, labels: Record<string, string> = {}) => value(after, name, labels) - value(before, name, labels);

    // Requests, by the route's pattern (never the raw path) and status.
    expect(moved(REQUESTS, { method: 'POST', route: '/v1/chat/completions', status: '200' })).toBe(1);
    expect(moved(REQUESTS, { method: 'POST', route: '/v1/ocr', status: '200' })).toBe(1);
    expect(moved(REQUESTS, { method: 'GET', route: 'unmatched', status: '404' })).toBe(1);
    expect(moved(REQUESTS, { method: 'GET', route: '/v1/models/:model', status: '404' })).toBe(1);
    // The scrape before this one (this one is still being answered when counted).
    expect(moved(REQUESTS, { method: 'GET', route: '/metrics', status: '200' })).toBe(1);
    expect(moved(REQUESTS)).toBe(5);
    expect(after.some((s) => Object.values(s.labels).some((v) => v.includes('no-such-route') || v.includes('model-42')))).toBe(false);
    expect(moved('lserve_http_request_duration_seconds_count', { method: 'POST', route: '/v1/chat/completions' })).toBe(1);
    expect(moved('lserve_http_request_duration_seconds_sum', { method: 'POST', route: '/v1/chat/completions' })).toBeGreaterThan(0);

    // Chat tokens in and out, exactly as the response's usage says; one decode rate observed.
    expect(moved('lserve_chat_prompt_tokens_total', { model: CHAT_MODEL_ID })).toBe(usage.prompt_tokens);
    expect(moved('lserve_chat_completion_tokens_total', { model: CHAT_MODEL_ID })).toBe(6);
    expect(moved('lserve_chat_decode_tokens_per_second_count', { model: CHAT_MODEL_ID })).toBe(1);
    expect(moved('lserve_chat_decode_tokens_per_second_sum', { model: CHAT_MODEL_ID })).toBeGreaterThan(0);

    expect(moved('lserve_ocr_pages_total', { model: 'ppocr-v4-mobile' })).toBe(1);

    // What is loaded, read at the scrape.
    expect(value(after, 'lserve_loaded_models')).toBe(2);
    expect(value(after, 'lserve_model_memory_bytes', { model: CHAT_MODEL_ID, kind: 'chat' })).toBeGreaterThan(0);
    expect(value(after, 'lserve_model_memory_bytes', { model: 'ppocr-v4-mobile', kind: 'ocr' })).toBeGreaterThan(0);
    expect(value(after, 'lserve_model_queue_depth', { model: CHAT_MODEL_ID })).toBe(0);
    expect(value(after, 'lserve_model_active_requests', { model: CHAT_MODEL_ID })).toBe(0);
    expect(moved('lserve_model_rejected_requests_total')).toBe(0);

    // The process's own metrics come along.
    expect(value(after, 'process_resident_memory_bytes')).toBeGreaterThan(0);
  });

  it('counts a 503 from a full line against the model', async () => {
    const before = await scrape();
    // A long generation holds the only sequence.
    const controller = new AbortController();
    const held = await chat({ max_tokens: 3000, logit_bias: NEVER_END, stream: true }, controller.signal);
    expect(held.status).toBe(200);
    const reader = held.body!.getReader();
    let text = '';
    while (!text.includes('"role":"assistant"')) {
      const { value: chunk, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(chunk);
    }
    const during = await scrape();
    expect(value(during, 'lserve_model_active_requests', { model: CHAT_MODEL_ID })).toBe(1);

    const refused = await chat({ max_tokens: 2 });
    expect(refused.status).toBe(503);
    await refused.arrayBuffer();
    controller.abort();
    await reader.read().catch(() => undefined);

    const after = await scrape();
    expect(value(after, 'lserve_model_rejected_requests_total', { model: CHAT_MODEL_ID }) - value(before, 'lserve_model_rejected_requests_total', { model: CHAT_MODEL_ID })).toBe(1);
    expect(value(after, REQUESTS, { route: '/v1/chat/completions', status: '503' }) - value(before, REQUESTS, { route: '/v1/chat/completions', status: '503' })).toBe(1);
  });

  it('counts speech requests waiting for their turn on the model, and none once they are served', async () => {
    const depth = async () => value(await scrape(speaking), 'lserve_model_queue_depth', { model: 'piper-test' });
    // Three requests of 60 sentences each take turns sentence by sentence: while they run, two wait.
    const requests = [speech(speaking, 60), speech(speaking, 60), speech(speaking, 60)].map((pending) =>
      pending.then(async (res) => ({ status: res.status, bytes: (await res.arrayBuffer()).byteLength })),
    );
    await expect.poll(depth, { timeout: 30_000, interval: 10 }).toBeGreaterThan(0);
    for (const { status, bytes } of await Promise.all(requests)) {
      expect(status).toBe(200);
      expect(bytes).toBeGreaterThan(0);
    }
    const after = await scrape(speaking);
    expect(value(after, 'lserve_loaded_models')).toBe(1);
    expect(after.some((s) => s.name === 'lserve_model_queue_depth' && s.labels.model === 'piper-test')).toBe(true);
    expect(value(after, 'lserve_model_queue_depth', { model: 'piper-test' })).toBe(0);
  });

  it('refuses speech beyond the line (--max-queue) with a 503 before the response starts, counted against the model', async () => {
    const before = await scrape();
    const held = await speech(server, 120);
    expect(held.status).toBe(200);
    const reader = held.body!.getReader();
    await reader.read();
    const refused = await speech(server, 1);
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { error: { type: string; message: string } }).error).toMatchObject({
      type: 'overloaded_error',
      message: "Speech synthesis model 'piper-test' is busy with 1 requests (0 may wait). Retry later.",
    });
    while (!(await reader.read()).done);
    const after = await scrape();
    const rejected = (samples: Sample[]) => value(samples, 'lserve_model_rejected_requests_total', { model: 'piper-test' });
    expect(rejected(after) - rejected(before)).toBe(1);
    expect(value(after, 'lserve_model_queue_depth', { model: 'piper-test' })).toBe(0);
  });

  it('is 404 unless the server was started with metrics on, in the error shape, naming the flag that turns them on', async () => {
    const res = await fetch(`${plain.url}/metrics`);
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await res.json()).toEqual({
      error: { message: expect.stringContaining('`lserve serve --metrics`'), type: 'not_found_error', param: null, code: 'metrics_disabled' },
    });
  });

  it('needs the API key when one is set, like every route', async () => {
    const refused = await fetch(`${keyed.url}/metrics`);
    expect(refused.status).toBe(401);
    await refused.arrayBuffer();
    const res = await fetch(`${keyed.url}/metrics`, { headers: { authorization: 'Bearer sesame' } });
    expect(res.status).toBe(200);
    const samples = parse(await res.text());
    // The refused scrape was counted (before any route matched) and no model is loaded.
    expect(value(samples, REQUESTS, { route: 'unmatched', status: '401' })).toBe(1);
    expect(value(samples, 'lserve_loaded_models')).toBe(0);
  });

  it('answers only Host names the server accepts, like every route', async () => {
    const { request } = await import('node:http');
    const status = await new Promise<number>((resolve, reject) => {
      const req = request(`${server.url}/metrics`, { headers: { host: 'attacker.example' } }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(403);
  });

  it('keeps a registry per server: counts of one server do not show in another', async () => {
    const samples = await scrape(keyed, { authorization: 'Bearer sesame' });
    expect(value(samples, REQUESTS, { route: '/v1/chat/completions' })).toBe(0);
    expect(value(samples, 'lserve_chat_completion_tokens_total')).toBe(0);
  });
});
