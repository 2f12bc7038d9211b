import OpenAI, { toFile } from 'openai';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ImageStreamEvent } from '../../src/api/images.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { syntheticTaesdModel } from '../fixtures/onnx/sd-turbo/taesd.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Image progress: `stream: true` on /v1/images/generations, /edits and
 * /img2img answers SSE, a progress event per denoising step and one
 * completed event per image (OpenAI's event names), with the synthetic
 * SD-Turbo at 64x64 through the real pipeline; with `partial_images`,
 * previews decoded by a latent decoder (the synthetic TAESD), once one is
 * installed (the first tests run without one).
 */

let server: TestServer;
let client: OpenAI;
const MODEL = 'sd-test';

beforeAll(async () => {
  server = await startTestServer();
  await server.engine.store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: MODEL });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await server?.stop();
});

async function stream(route: string, body: string | FormData, headers: Record<string, string> = {}): Promise<{ res: Response; events: ImageStreamEvent[]; names: string[] }> {
  const res = await fetch(`${server.url}${route}`, { method: 'POST', headers, body });
  const events: ImageStreamEvent[] = [];
  const names: string[] = [];
  if (res.headers.get('content-type')?.startsWith('text/event-stream')) {
    for (const block of (await res.text()).split('\n\n').filter(Boolean)) {
      names.push(/^event: (.*)$/m.exec(block)![1]!);
      events.push(JSON.parse(/^data: (.*)$/m.exec(block)![1]!) as ImageStreamEvent);
    }
  }
  return { res, events, names };
}

const json = (body: unknown) => [JSON.stringify(body), { 'content-type': 'application/json' }] as const;

describe('stream: true', () => {
  it('generations: a progress event per step of each image, then a completed event per image with its PNG and seed', async () => {
    const { res, events, names } = await stream('/v1/images/generations', ...json({ model: MODEL, prompt: 'a red fox', size: '64x64', steps: 2, n: 2, seed: 11, stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    expect(names).toEqual(events.map((e) => e.type));
    const progress = events.filter((e) => e.type === 'image_generation.progress');
    expect(progress).toEqual([
      { type: 'image_generation.progress', image: 0, images: 2, step: 0, steps: 2 },
      { type: 'image_generation.progress', image: 0, images: 2, step: 1, steps: 2 },
      { type: 'image_generation.progress', image: 0, images: 2, step: 2, steps: 2 },
      { type: 'image_generation.progress', image: 1, images: 2, step: 0, steps: 2 },
      { type: 'image_generation.progress', image: 1, images: 2, step: 1, steps: 2 },
      { type: 'image_generation.progress', image: 1, images: 2, step: 2, steps: 2 },
    ]);
    const completed = events.filter((e) => e.type === 'image_generation.completed') as Array<Extract<ImageStreamEvent, { seed: number }>>;
    expect(completed.map((e) => [e.image, e.seed, e.size, e.output_format])).toEqual([
      [0, 11, '64x64', 'png'],
      [1, 12, '64x64', 'png'],
    ]);
    expect(events.slice(-2).map((e) => e.type)).toEqual(['image_generation.completed', 'image_generation.completed']);
    for (const e of completed) {
      const meta = await sharp(Buffer.from(e.b64_json!, 'base64')).metadata();
      expect([meta.format, meta.width, meta.height]).toEqual(['png', 64, 64]);
      expect(e.created_at).toBeGreaterThan(1_700_000_000);
    }
    // The same seed without streaming gives the same picture.
    const plain = await fetch(`${server.url}/v1/images/generations`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, prompt: 'a red fox', size: '64x64', steps: 2, seed: 11, response_format: 'b64_json' }) });
    expect(((await plain.json()) as { data: Array<{ b64_json: string }> }).data[0]!.b64_json).toBe(completed[0]!.b64_json);
  });

  it('gives cache URLs instead when response_format is url', async () => {
    const { events } = await stream('/v1/images/generations', ...json({ model: MODEL, prompt: 'x', size: '64x64', stream: true, response_format: 'url' }));
    const done = events.at(-1) as { url?: string; b64_json?: string };
    expect(done.b64_json).toBeUndefined();
    expect((await fetch(done.url!)).headers.get('content-type')).toBe('image/png');
  });

  it('edits (multipart, with a mask) and img2img stream as image_edit events', async () => {
    const image = await sharp({ create: { width: 64, height: 64, channels: 3, background: { r: 40, g: 120, b: 200 } } }).png().toBuffer();
    // OpenAI's mask: transparent where to repaint (the centre), opaque elsewhere.
    const rgba = Buffer.alloc(64 * 64 * 4);
    for (let i = 0; i < 64 * 64; i++) rgba[i * 4 + 3] = i % 64 >= 16 && i % 64 < 48 && i >= 16 * 64 && i < 48 * 64 ? 0 : 255;
    const mask = await sharp(rgba, { raw: { width: 64, height: 64, channels: 4 } }).png().toBuffer();
    const form = new FormData();
    form.append('model', MODEL);
    form.append('prompt', 'a window');
    form.append('stream', 'true');
    form.append('image', new Blob([image], { type: 'image/png' }), 'in.png');
    form.append('mask', new Blob([mask], { type: 'image/png' }), 'mask.png');
    const edit = await stream('/v1/images/edits', form);
    expect(edit.res.status, edit.res.status === 200 ? '' : await edit.res.text()).toBe(200);
    expect(new Set(edit.names)).toEqual(new Set(['image_edit.progress', 'image_edit.completed']));
    expect(edit.events.at(-1)).toMatchObject({ type: 'image_edit.completed', size: '64x64' });
    const img2img = await stream('/v1/images/img2img', ...json({ model: MODEL, prompt: 'x', image: image.toString('base64'), strength: 0.5, stream: true }));
    expect(img2img.names.at(-1)).toBe('image_edit.completed');
  });

  it('answers a request that fails before any step with an ordinary JSON error and its status', async () => {
    const bad = await fetch(`${server.url}/v1/images/generations`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, prompt: 'x', size: '100x100', stream: true }) });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('invalid_size');
    const missing = await fetch(`${server.url}/v1/images/generations`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'nope', prompt: 'x', stream: true }) });
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe('model_not_found');
  });
});

type Partial = Extract<ImageStreamEvent, { partial_image_index: number }>;

/** A PNG's format and size. */
async function pngSize(b64: string): Promise<[string | undefined, number | undefined, number | undefined]> {
  const meta = await sharp(Buffer.from(b64, 'base64')).metadata();
  return [meta.format, meta.width, meta.height];
}

describe('without a latent decoder installed', () => {
  it("decodes quality low with the model's VAE, says so in a header and once in the log", async () => {
    const body = { model: MODEL, prompt: 'a red fox', size: '64x64', seed: 4, response_format: 'b64_json' };
    const post = (extra: Record<string, unknown>) => fetch(`${server.url}/v1/images/generations`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, ...extra }) });
    const plain = await post({});
    const low = await post({ quality: 'low' });
    expect([plain.status, low.status]).toEqual([200, 200]);
    expect(low.headers.get('lserve-image-decoder')).toBe('vae');
    const image = async (res: Response) => ((await res.json()) as { data: Array<{ b64_json: string }> }).data[0]!.b64_json;
    expect(await image(low)).toBe(await image(plain));
    await (await post({ quality: 'medium' })).arrayBuffer();
    const told = server.logs.filter((line) => line.includes('No latent decoder is installed'));
    expect(told).toHaveLength(1);
    expect(told[0]).toMatch(/'quality: low' is decoded with the model's full VAE.*lserve pull taesd/);
  });

  it('streams without partial images, saying so once in a notice first', async () => {
    const { res, events } = await stream('/v1/images/generations', ...json({ model: MODEL, prompt: 'x', size: '64x64', steps: 3, stream: true, partial_images: 2 }));
    expect(res.status).toBe(200);
    expect(events[0]).toEqual({ type: 'image_generation.notice', code: 'partial_images_unavailable', message: expect.stringMatching(/no partial images are made.*lserve pull taesd/) });
    expect(events.filter((e) => e.type === 'image_generation.notice')).toHaveLength(1);
    expect(events.some((e) => e.type === 'image_generation.partial_image')).toBe(false);
    expect(events.at(-1)!.type).toBe('image_generation.completed');
  });
});

describe('partial_images, with a latent decoder installed', () => {
  beforeAll(async () => {
    await server.engine.store.registerDirectory(await syntheticTaesdModel(), { kind: 'image', id: 'taesd-test' });
  });

  it('sends OpenAI partial_image events through the OpenAI client: PNG previews of the right size at evenly spaced steps, before each image completes', async () => {
    const params = { model: MODEL, prompt: 'a red fox', size: '64x64', n: 2, steps: 4, seed: 5, stream: true, partial_images: 2 } as unknown as OpenAI.ImageGenerateParamsStreaming;
    const events: ImageStreamEvent[] = [];
    for await (const event of await client.images.generate(params)) events.push(event as unknown as ImageStreamEvent);
    const partials = events.filter((e): e is Partial => e.type === 'image_generation.partial_image');
    expect(partials.map((e) => [e.image, e.partial_image_index])).toEqual([
      [0, 0],
      [0, 1],
      [1, 0],
      [1, 1],
    ]);
    for (const e of partials) {
      expect(await pngSize(e.b64_json)).toEqual(['png', 64, 64]);
      expect(e).toMatchObject({ size: '64x64', output_format: 'png', quality: 'auto', background: 'opaque' });
      expect(e.created_at).toBeGreaterThan(1_700_000_000);
    }
    // 2 previews of 4 steps: after steps 1 and 3 (of the 3 before the last), each right after that step's progress event.
    const order = events.map((e) => (e.type === 'image_generation.progress' ? `step ${e.image}:${e.step}` : e.type === 'image_generation.partial_image' ? `partial ${e.image}:${e.partial_image_index}` : `${e.type} ${'image' in e ? e.image : ''}`));
    expect(order).toEqual([
      'step 0:0', 'step 0:1', 'partial 0:0', 'step 0:2', 'step 0:3', 'partial 0:1', 'step 0:4',
      'step 1:0', 'step 1:1', 'partial 1:0', 'step 1:2', 'step 1:3', 'partial 1:1', 'step 1:4',
      'image_generation.completed 0', 'image_generation.completed 1',
    ]);
    // A preview is a picture of the prediction at its step: not the finished image.
    const completed = events.filter((e) => e.type === 'image_generation.completed') as Array<{ b64_json: string }>;
    expect(partials[1]!.b64_json).not.toBe(completed[0]!.b64_json);
  });

  it('sends at most steps − 1 previews: none for a 1-step image, and never more than asked', async () => {
    const count = async (steps: number, partial_images: number) => {
      const { events } = await stream('/v1/images/generations', ...json({ model: MODEL, prompt: 'x', size: '64x64', steps, seed: 1, stream: true, partial_images }));
      expect(events.at(-1)!.type).toBe('image_generation.completed');
      return events.filter((e) => e.type === 'image_generation.partial_image').length;
    };
    expect(await count(1, 3)).toBe(0);
    expect(await count(2, 3)).toBe(1);
    expect(await count(4, 3)).toBe(3);
    expect(await count(4, 0)).toBe(0);
  });

  it('sends image_edit.partial_image events for edits (multipart, through the OpenAI client) and img2img', async () => {
    // Opaque blue with a transparent square to repaint (the image's own transparency is the mask).
    const rgba = Buffer.alloc(64 * 64 * 4);
    for (let i = 0; i < 64 * 64; i++) rgba.set([40, 120, 200, i % 64 >= 24 && i % 64 < 40 && i >= 24 * 64 && i < 40 * 64 ? 0 : 255], i * 4);
    const image = await sharp(rgba, { raw: { width: 64, height: 64, channels: 4 } }).png().toBuffer();
    const events: ImageStreamEvent[] = [];
    const params = { model: MODEL, prompt: 'a window', image: await toFile(image, 'in.png'), stream: true, partial_images: 1, steps: 2 } as unknown as OpenAI.ImageEditParamsStreaming;
    for await (const event of await client.images.edit(params)) events.push(event as unknown as ImageStreamEvent);
    const partials = events.filter((e): e is Partial => e.type === 'image_edit.partial_image');
    expect(partials).toHaveLength(1);
    expect(await pngSize(partials[0]!.b64_json)).toEqual(['png', 64, 64]);
    expect(events.at(-1)!.type).toBe('image_edit.completed');
    const img2img = await stream('/v1/images/img2img', ...json({ model: MODEL, prompt: 'x', image: image.toString('base64'), strength: 1, steps: 3, stream: true, partial_images: 2 }));
    expect(img2img.events.filter((e) => e.type === 'image_edit.partial_image')).toHaveLength(2);
  });

  it('keeps a quality low stream on the latent decoder, previews and image alike', async () => {
    const { res, events } = await stream('/v1/images/generations', ...json({ model: MODEL, prompt: 'x', size: '64x64', steps: 2, stream: true, partial_images: 1, quality: 'low' }));
    expect(res.headers.get('lserve-image-decoder')).toBe('taesd-test');
    expect(events.filter((e) => e.type === 'image_generation.partial_image').map((e) => (e as Partial).quality)).toEqual(['low']);
  });
});
