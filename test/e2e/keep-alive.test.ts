import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { renderText } from '../fixtures/ocr/render.js';

/** Per-request keep_alive (Ollama's extension) through a real endpoint and the real OCR runtime. */

let server: TestServer;
let image: string;

beforeAll(async () => {
  server = await startTestServer({ engine: { keepAliveMs: 60_000 } });
  image = (await renderText({ width: 240, height: 60, lines: [{ text: 'keep', x: 10, y: 40, size: 28 }] })).png.toString('base64');
});

afterAll(async () => {
  await server.stop();
});

async function ocr(keepAlive: unknown): Promise<Response> {
  return fetch(`${server.url}/v1/ocr`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'ppocr-v4-mobile', image_base64: image, keep_alive: keepAlive }),
  });
}

async function loaded(): Promise<boolean> {
  const list = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string; loaded: boolean }> };
  return list.data.find((m) => m.id === 'ppocr-v4-mobile')!.loaded;
}

describe('keep_alive', () => {
  it('keeps the model loaded for the duration given, and unloads at once with 0', async () => {
    expect((await ocr('10m')).status).toBe(200);
    expect(await loaded()).toBe(true);
    expect(server.engine.manager.loaded()[0]!.expiresAt! - Date.now()).toBeGreaterThan(9 * 60_000);
    expect((await ocr(0)).status).toBe(200);
    for (let i = 0; i < 100 && (await loaded()); i++) await new Promise((r) => setTimeout(r, 20));
    expect(await loaded()).toBe(false);
  });

  it('rejects a malformed duration with a 400 naming keep_alive', async () => {
    const res = await ocr('soon');
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { type: 'invalid_request_error', param: 'keep_alive' } });
  });
});
