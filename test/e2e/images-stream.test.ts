import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ImageStreamEvent } from '../../src/api/images.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Image progress: `stream: true` on /v1/images/generations, /edits and
 * /img2img answers SSE, a progress event per denoising step and one
 * completed event per image (OpenAI's event names), with the synthetic
 * SD-Turbo at 64x64 through the real pipeline.
 */

let server: TestServer;
const MODEL = 'sd-test';

beforeAll(async () => {
  server = await startTestServer();
  await server.engine.store.registerDirectory(await tinySdTurboModel(), { kind: 'image', id: MODEL });
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
