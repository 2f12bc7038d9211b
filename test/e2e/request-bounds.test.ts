import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_CHAT_MESSAGES, MAX_LOGIT_BIAS_ENTRIES, MAX_OUTPUT_TOKENS, MAX_STOP_SEQUENCES, MAX_TOOLS } from '../../src/api/chat.js';
import { MAX_EMBEDDING_DIMENSIONS, MAX_EMBEDDING_INPUT_CHARS, MAX_EMBEDDING_INPUT_TOKENS, MAX_EMBEDDING_INPUTS } from '../../src/api/embeddings.js';
import { MAX_GUIDANCE_SCALE, MAX_IMAGE_SIDE, MAX_IMAGES, MAX_PROMPT_CHARS, MAX_STEPS } from '../../src/api/images.js';
import { MAX_RERANK_DOCUMENT_CHARS, MAX_RERANK_DOCUMENTS, MAX_RERANK_QUERY_CHARS } from '../../src/api/rerank.js';
import { MAX_SPEECH_FRAMES, MAX_SPEECH_SPEED, MIN_SPEECH_SPEED } from '../../src/api/speech.js';
import { MAX_TRANSCRIPTION_PROMPT_CHARS } from '../../src/api/transcription.js';
import { MAX_INPUT_PIXELS } from '../../src/core/tasks/image.js';
import { MAX_INPUT_CHARS } from '../../src/core/tasks/speak.js';
import { DEFAULT_MAX_PIXELS } from '../../src/image/decode.js';
import { tinyEmbeddingModel, tinyRerankerModel } from '../fixtures/gguf/bert.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { tinyWhisperModel } from '../fixtures/onnx/whisper.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { pngHeader } from '../helpers/png.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Every request field that multiplies work or memory has a documented bound
 * (docs/api.md, "Limits"; DESIGN.md §3). For each, a value just over it is refused
 * with the limit in the message and the field in `param`, and a value at it
 * is not refused for that field. Schema bounds hold before the model is even
 * resolved: a request naming a model that is not installed still gets the
 * 400 for the field, not a 404. With installed models, no bound case loads a
 * model; afterwards the server still answers /health and normal requests.
 */

let server: TestServer;
const MISSING = 'no-such-model';
const MODELS = { chat: CHAT_MODEL_ID, embedding: 'bge-test', rerank: 'rerank-test', image: 'sd-test', tts: 'piper-test', asr: 'whisper-test' } as const;

beforeAll(async () => {
  server = await startTestServer();
  const { store } = server.engine;
  await store.registerLocal(tinyQwen3File(), { kind: 'chat', id: MODELS.chat });
  await store.registerLocal(tinyEmbeddingModel(), { kind: 'embedding', id: MODELS.embedding });
  await store.registerLocal(tinyRerankerModel(), { kind: 'rerank', id: MODELS.rerank });
  await store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: MODELS.image });
  await store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: MODELS.tts });
  await store.registerDirectory(await tinyWhisperModel(), { kind: 'asr', id: MODELS.asr });
});

afterAll(async () => {
  await server?.stop();
});

interface Answer {
  status: number;
  message: string;
  param: string | null | undefined;
  code: string | null | undefined;
  body: Record<string, unknown>;
}

async function send(path: string, body: unknown): Promise<Answer> {
  const init: RequestInit = body instanceof FormData ? { method: 'POST', body } : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) };
  const res = await fetch(`${server.url}${path}`, init);
  const text = await res.text();
  const parsed = (text.startsWith('{') ? JSON.parse(text) : {}) as { error?: { message: string; param?: string | null; code?: string | null } };
  return { status: res.status, message: parsed.error?.message ?? '', param: parsed.error?.param, code: parsed.error?.code, body: parsed as Record<string, unknown> };
}

const many = <T>(count: number, item: (i: number) => T): T[] => Array.from({ length: count }, (_, i) => item(i));
const text = (chars: number) => 'a'.repeat(chars);
const chatBody = (model: string, extra: Record<string, unknown>) => ({ model, messages: [{ role: 'user', content: 'hi' }], ...extra });
const anthropicBody = (model: string, extra: Record<string, unknown>) => ({ model, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }], ...extra });
const imageBody = (model: string, extra: Record<string, unknown>) => ({ model, prompt: 'a fox', size: '64x64', ...extra });


const bomb = pngHeader(100_000, 100_000).toString('base64');
const megapixels = (pixels: number) => `${(pixels / 1e6).toFixed(1)} MP`;

interface Bound {
  name: string;
  path: string;
  kind: keyof typeof MODELS;
  /** The request just over the bound, for a model id. */
  over: (model: string) => unknown;
  /** The same field at the bound: not refused for this field. */
  at?: (model: string) => unknown;
  param: string;
  /** What the message must contain: the limit. */
  limit: string | number;
  status?: number;
  code?: string;
  anthropic?: boolean;
  /** Checked before the model is resolved (schema and pre-resolve task checks): a missing model gets the same answer. */
  beforeResolve?: boolean;
}

const BOUNDS: Bound[] = [
  // Chat completions.
  { name: 'chat messages', path: '/v1/chat/completions', kind: 'chat', param: 'messages', limit: MAX_CHAT_MESSAGES, over: (m) => ({ model: m, messages: many(MAX_CHAT_MESSAGES + 1, () => ({ role: 'user', content: 'x' })) }), at: (m) => ({ model: m, messages: many(MAX_CHAT_MESSAGES, () => ({ role: 'user', content: 'x' })) }) },
  { name: 'chat max_tokens', path: '/v1/chat/completions', kind: 'chat', param: 'max_tokens', limit: MAX_OUTPUT_TOKENS, over: (m) => chatBody(m, { max_tokens: MAX_OUTPUT_TOKENS + 1 }), at: (m) => chatBody(m, { max_tokens: MAX_OUTPUT_TOKENS }) },
  { name: 'chat max_completion_tokens', path: '/v1/chat/completions', kind: 'chat', param: 'max_completion_tokens', limit: MAX_OUTPUT_TOKENS, over: (m) => chatBody(m, { max_completion_tokens: MAX_OUTPUT_TOKENS + 1 }), at: (m) => chatBody(m, { max_completion_tokens: MAX_OUTPUT_TOKENS }) },
  { name: 'chat thinking_tokens', path: '/v1/chat/completions', kind: 'chat', param: 'thinking_tokens', limit: MAX_OUTPUT_TOKENS, over: (m) => chatBody(m, { thinking_tokens: MAX_OUTPUT_TOKENS + 1 }), at: (m) => chatBody(m, { thinking_tokens: MAX_OUTPUT_TOKENS }) },
  { name: 'chat stop', path: '/v1/chat/completions', kind: 'chat', param: 'stop', limit: MAX_STOP_SEQUENCES, over: (m) => chatBody(m, { stop: many(MAX_STOP_SEQUENCES + 1, (i) => `s${i}`) }), at: (m) => chatBody(m, { stop: many(MAX_STOP_SEQUENCES, (i) => `s${i}`) }) },
  {
    name: 'chat logit_bias',
    path: '/v1/chat/completions',
    kind: 'chat',
    param: 'logit_bias',
    limit: MAX_LOGIT_BIAS_ENTRIES,
    over: (m) => chatBody(m, { logit_bias: Object.fromEntries(many(MAX_LOGIT_BIAS_ENTRIES + 1, (i) => [String(i), 1])) }),
    at: (m) => chatBody(m, { logit_bias: Object.fromEntries(many(MAX_LOGIT_BIAS_ENTRIES, (i) => [String(i), 1])) }),
  },
  {
    name: 'chat tools',
    path: '/v1/chat/completions',
    kind: 'chat',
    param: 'tools',
    limit: MAX_TOOLS,
    over: (m) => chatBody(m, { tools: many(MAX_TOOLS + 1, (i) => ({ type: 'function', function: { name: `f${i}` } })) }),
    at: (m) => chatBody(m, { tools: many(MAX_TOOLS, (i) => ({ type: 'function', function: { name: `f${i}` } })) }),
  },
  // Anthropic messages (Anthropic's error shape has no param: the message names the field).
  { name: 'anthropic messages', path: '/v1/messages', kind: 'chat', anthropic: true, param: 'messages', limit: MAX_CHAT_MESSAGES, over: (m) => ({ model: m, max_tokens: 16, messages: many(MAX_CHAT_MESSAGES + 1, () => ({ role: 'user', content: 'x' })) }) },
  { name: 'anthropic max_tokens', path: '/v1/messages', kind: 'chat', anthropic: true, param: 'max_tokens', limit: MAX_OUTPUT_TOKENS, over: (m) => anthropicBody(m, { max_tokens: MAX_OUTPUT_TOKENS + 1 }), at: (m) => anthropicBody(m, { max_tokens: MAX_OUTPUT_TOKENS }) },
  { name: 'anthropic stop_sequences', path: '/v1/anthropic/messages', kind: 'chat', anthropic: true, param: 'stop_sequences', limit: MAX_STOP_SEQUENCES, over: (m) => anthropicBody(m, { stop_sequences: many(MAX_STOP_SEQUENCES + 1, (i) => `s${i}`) }) },
  { name: 'anthropic thinking budget', path: '/v1/messages', kind: 'chat', anthropic: true, param: 'thinking.budget_tokens', limit: MAX_OUTPUT_TOKENS, over: (m) => anthropicBody(m, { thinking: { type: 'enabled', budget_tokens: MAX_OUTPUT_TOKENS + 1 } }) },
  // Embeddings.
  { name: 'embedding inputs', path: '/v1/embeddings', kind: 'embedding', param: 'input', limit: MAX_EMBEDDING_INPUTS, over: (m) => ({ model: m, input: many(MAX_EMBEDDING_INPUTS + 1, () => 'x') }), at: (m) => ({ model: m, input: many(MAX_EMBEDDING_INPUTS, () => 'x') }) },
  { name: 'embedding text length', path: '/v1/embeddings', kind: 'embedding', param: 'input', limit: MAX_EMBEDDING_INPUT_CHARS, over: (m) => ({ model: m, input: text(MAX_EMBEDDING_INPUT_CHARS + 1) }), at: (m) => ({ model: m, input: text(MAX_EMBEDDING_INPUT_CHARS) }) },
  { name: 'embedding text length in a list', path: '/v1/embeddings', kind: 'embedding', param: 'input.1', limit: MAX_EMBEDDING_INPUT_CHARS, over: (m) => ({ model: m, input: ['ok', text(MAX_EMBEDDING_INPUT_CHARS + 1)] }) },
  { name: 'embedding token ids', path: '/v1/embeddings', kind: 'embedding', param: 'input', limit: MAX_EMBEDDING_INPUT_TOKENS, over: (m) => ({ model: m, input: many(MAX_EMBEDDING_INPUT_TOKENS + 1, () => 1) }), at: (m) => ({ model: m, input: many(MAX_EMBEDDING_INPUT_TOKENS, () => 1) }) },
  { name: 'embedding dimensions', path: '/v1/embeddings', kind: 'embedding', param: 'dimensions', limit: MAX_EMBEDDING_DIMENSIONS, over: (m) => ({ model: m, input: 'x', dimensions: MAX_EMBEDDING_DIMENSIONS + 1 }), at: (m) => ({ model: m, input: 'x', dimensions: MAX_EMBEDDING_DIMENSIONS }) },
  // Rerank.
  { name: 'rerank documents', path: '/v1/rerank', kind: 'rerank', param: 'documents', limit: MAX_RERANK_DOCUMENTS, over: (m) => ({ model: m, query: 'q', documents: many(MAX_RERANK_DOCUMENTS + 1, () => 'd') }), at: (m) => ({ model: m, query: 'q', documents: many(MAX_RERANK_DOCUMENTS, () => 'd') }) },
  { name: 'rerank query length', path: '/v1/rerank', kind: 'rerank', param: 'query', limit: MAX_RERANK_QUERY_CHARS, over: (m) => ({ model: m, query: text(MAX_RERANK_QUERY_CHARS + 1), documents: ['d'] }), at: (m) => ({ model: m, query: text(MAX_RERANK_QUERY_CHARS), documents: ['d'] }) },
  { name: 'rerank document length', path: '/v1/rerank', kind: 'rerank', param: 'documents.1.text', limit: MAX_RERANK_DOCUMENT_CHARS, over: (m) => ({ model: m, query: 'q', documents: ['d', { text: text(MAX_RERANK_DOCUMENT_CHARS + 1) }] }), at: (m) => ({ model: m, query: 'q', documents: ['d', { text: text(MAX_RERANK_DOCUMENT_CHARS) }] }) },
  { name: 'rerank document length (string)', path: '/v1/rerank', kind: 'rerank', param: 'documents.0', limit: MAX_RERANK_DOCUMENT_CHARS, over: (m) => ({ model: m, query: 'q', documents: [text(MAX_RERANK_DOCUMENT_CHARS + 1)] }) },
  // Images.
  { name: 'images n', path: '/v1/images/generations', kind: 'image', param: 'n', limit: MAX_IMAGES, over: (m) => imageBody(m, { n: MAX_IMAGES + 1 }), at: (m) => imageBody(m, { n: MAX_IMAGES }) },
  { name: 'images steps', path: '/v1/images/generations', kind: 'image', param: 'steps', limit: MAX_STEPS, over: (m) => imageBody(m, { steps: MAX_STEPS + 1 }), at: (m) => imageBody(m, { steps: MAX_STEPS }) },
  { name: 'images size', path: '/v1/images/generations', kind: 'image', param: 'size', code: 'invalid_size', limit: MAX_IMAGE_SIDE, over: (m) => imageBody(m, { size: `${MAX_IMAGE_SIDE + 64}x64` }) },
  { name: 'images size (height)', path: '/v1/images/generations', kind: 'image', param: 'size', code: 'invalid_size', limit: MAX_IMAGE_SIDE, over: (m) => imageBody(m, { size: `64x${100_000}` }) },
  { name: 'images prompt', path: '/v1/images/generations', kind: 'image', param: 'prompt', limit: MAX_PROMPT_CHARS, over: (m) => imageBody(m, { prompt: text(MAX_PROMPT_CHARS + 1) }), at: (m) => imageBody(m, { prompt: text(MAX_PROMPT_CHARS) }) },
  { name: 'images negative_prompt', path: '/v1/images/generations', kind: 'image', param: 'negative_prompt', limit: MAX_PROMPT_CHARS, over: (m) => imageBody(m, { negative_prompt: text(MAX_PROMPT_CHARS + 1) }) },
  { name: 'images guidance_scale', path: '/v1/images/generations', kind: 'image', param: 'guidance_scale', limit: MAX_GUIDANCE_SCALE, over: (m) => imageBody(m, { guidance_scale: MAX_GUIDANCE_SCALE + 0.5 }) },
  { name: 'img2img strength', path: '/v1/images/img2img', kind: 'image', param: 'strength', limit: 'from 0 to 1', over: (m) => imageBody(m, { image: bomb, strength: 1.000001 }) },
  { name: 'img2img steps (multipart)', path: '/v1/images/img2img', kind: 'image', param: 'steps', limit: MAX_STEPS, over: (m) => form({ model: m, prompt: 'x', steps: String(MAX_STEPS + 1) }, bomb) },
  { name: 'edits n', path: '/v1/images/edits', kind: 'image', param: 'n', limit: MAX_IMAGES, over: (m) => imageBody(m, { image: bomb, n: MAX_IMAGES + 1 }) },
  // The model's own ranges: checked once the model is resolved, still before it loads.
  { name: 'images steps over the model range', path: '/v1/images/generations', kind: 'image', beforeResolve: false, param: 'steps', limit: 'from 1 to 4', over: (m) => imageBody(m, { steps: 5 }) },
  { name: 'images size over the model range', path: '/v1/images/generations', kind: 'image', beforeResolve: false, param: 'size', code: 'invalid_size', limit: 'from 64 to 768', over: (m) => imageBody(m, { size: '832x64' }) },
  // Input images: a tiny PNG declaring 100000x100000 is refused on its header, before decoding or loading.
  { name: 'img2img image pixels', path: '/v1/images/img2img', kind: 'image', beforeResolve: false, status: 413, code: 'image_too_large', param: 'image', limit: megapixels(MAX_INPUT_PIXELS), over: (m) => imageBody(m, { image: bomb }) },
  { name: 'edits image pixels', path: '/v1/images/edits', kind: 'image', beforeResolve: false, status: 413, code: 'image_too_large', param: 'image', limit: megapixels(MAX_INPUT_PIXELS), over: (m) => imageBody(m, { image: bomb }) },
  // Speech.
  { name: 'speech input', path: '/v1/audio/speech', kind: 'tts', status: 413, code: 'payload_too_large', param: 'input', limit: MAX_INPUT_CHARS, over: (m) => ({ model: m, input: text(MAX_INPUT_CHARS + 1) }), at: (m) => ({ model: m, input: text(MAX_INPUT_CHARS) }) },
  { name: 'speech frames', path: '/v1/audio/speech', kind: 'tts', param: 'frames', limit: MAX_SPEECH_FRAMES, over: (m) => ({ model: m, input: 'hi', frames: MAX_SPEECH_FRAMES + 1 }), at: (m) => ({ model: m, input: 'hi', frames: MAX_SPEECH_FRAMES }) },
  { name: 'speech speed (fast)', path: '/v1/audio/speech', kind: 'tts', param: 'speed', limit: MAX_SPEECH_SPEED, over: (m) => ({ model: m, input: 'hi', speed: MAX_SPEECH_SPEED + 0.01 }), at: (m) => ({ model: m, input: 'hi', speed: MAX_SPEECH_SPEED }) },
  { name: 'speech speed (slow)', path: '/v1/audio/speech', kind: 'tts', param: 'speed', limit: MIN_SPEECH_SPEED, over: (m) => ({ model: m, input: 'hi', speed: MIN_SPEECH_SPEED - 0.01 }), at: (m) => ({ model: m, input: 'hi', speed: MIN_SPEECH_SPEED }) },
  // Transcription.
  { name: 'transcription prompt', path: '/v1/audio/transcriptions', kind: 'asr', param: 'prompt', limit: MAX_TRANSCRIPTION_PROMPT_CHARS, over: (m) => ({ model: m, prompt: text(MAX_TRANSCRIPTION_PROMPT_CHARS + 1) }), at: (m) => ({ model: m, prompt: text(MAX_TRANSCRIPTION_PROMPT_CHARS) }) },
  // OCR: the decoded-size limit, on the header (the bundled model resolves without a pull; `kind` is unused here).
  { name: 'ocr image pixels', path: '/v1/ocr', kind: 'image', beforeResolve: false, status: 413, code: 'image_too_large', param: 'image_base64', limit: megapixels(DEFAULT_MAX_PIXELS), over: () => ({ model: 'ppocr-v4-mobile', image_base64: bomb }) },
];

function form(fields: Record<string, string>, imageBase64: string): FormData {
  const f = new FormData();
  f.append('image', new Blob([new Uint8Array(Buffer.from(imageBase64, 'base64'))], { type: 'image/png' }), 'image.png');
  for (const [k, v] of Object.entries(fields)) f.append(k, v);
  return f;
}

function expectRefused(answer: Answer, bound: Bound): void {
  const status = bound.status ?? 400;
  expect(answer.status, `${bound.name}: ${answer.message}`).toBe(status);
  expect(answer.message).toContain(String(bound.limit));
  expect(answer.message).not.toMatch(/\n\s+at /);
  if (bound.anthropic) {
    expect(answer.body).toMatchObject({ type: 'error', error: { type: status === 413 ? 'request_too_large' : 'invalid_request_error' } });
    expect(answer.message).toContain(`'${bound.param}'`);
  } else {
    expect(answer.param, bound.name).toBe(bound.param);
    expect(answer.code, bound.name).toBe(bound.code ?? 'invalid_value');
  }
}

describe('request bounds', () => {
  it.each(BOUNDS.map((b) => [b.name, b] as const))('%s: just over the limit is refused with the limit and the field', async (_, bound) => {
    expectRefused(await send(bound.path, bound.over(MODELS[bound.kind])), bound);
    if (bound.beforeResolve !== false) {
      // Before the model is resolved: a model that is not installed gets the same answer, not a 404.
      expectRefused(await send(bound.path, bound.over(MISSING)), bound);
    }
    if (bound.at) {
      // At the limit the field passes (the request then fails on the missing model, or on another field).
      const at = await send(bound.path, bound.at(MISSING));
      const namesField = bound.anthropic ? at.message.includes(`'${bound.param}'`) : at.param === bound.param;
      expect(namesField && (at.status === 400 || at.status === 413), `${bound.name} at the limit: ${at.status} ${at.message}`).toBe(false);
    }
  });

  it('loaded no model for any of them, and the server keeps serving', async () => {
    expect(server.engine.manager.loaded()).toEqual([]);
    const health = await fetch(`${server.url}/health`);
    expect(health.status).toBe(200);

    // top_n above the number of documents is clamped (as Cohere and Jina do), not refused.
    const documents = ['Paris is the capital of France.', 'Bananas are yellow.', 'Berlin is in Germany.'];
    const rerank = await send('/v1/rerank', { model: MODELS.rerank, query: 'capital of France?', documents, top_n: documents.length + 5 });
    expect(rerank.status, rerank.message).toBe(200);
    expect((rerank.body.results as unknown[]).length).toBe(documents.length);
  });
});

describe('img2img strength', () => {
  const picture = async () => {
    const raw = Buffer.alloc(64 * 64 * 3);
    for (let i = 0; i < 64 * 64; i++) raw.set([40 + (i % 64) * 2, 200 - Math.floor(i / 64) * 2, 90], i * 3);
    return (await sharp(raw, { raw: { width: 64, height: 64, channels: 3 } }).png().toBuffer()).toString('base64');
  };
  const img2img = async (image: string, strength: number, steps: number) => {
    const answer = await send('/v1/images/img2img', { model: MODELS.image, prompt: 'a painting', image, strength, steps, seed: 3, response_format: 'b64_json' });
    expect(answer.status, answer.message).toBe(200);
    const b64 = (answer.body.data as Array<{ b64_json: string }>)[0]!.b64_json;
    return sharp(Buffer.from(b64, 'base64')).removeAlpha().raw().toBuffer();
  };

  it('a tiny strength (1e-9) runs one step near the input instead of scheduling a billion', async () => {
    const image = await picture();
    const started = Date.now();
    const tiny = await img2img(image, 1e-9, 4);
    const none = await img2img(image, 0, 4);
    expect(Date.now() - started).toBeLessThan(30_000);
    let diff = 0;
    for (let i = 0; i < tiny.length; i++) diff += Math.abs(tiny[i]! - none[i]!);
    expect(diff / tiny.length).toBeLessThan(8);
  });

  it('at 1 step, the strength still matters: 0.5 and 0.9 start from different noise levels', async () => {
    const image = await picture();
    const [half, most] = [await img2img(image, 0.5, 1), await img2img(image, 0.9, 1)];
    expect(half.equals(most)).toBe(false);
  });
});
