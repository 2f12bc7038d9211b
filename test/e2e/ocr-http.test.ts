import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import sharp from 'sharp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OcrResponse } from '../../src/api/ocr.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { installSyntheticV5 } from '../fixtures/onnx/ppocr.js';
import { renderOneLine } from '../fixtures/ocr/corpus.js';
import { cer } from '../fixtures/ocr/cer.js';

/**
 * POST /v1/ocr through the real server: every input form, every bad input
 * with its status and error shape (and the server still answering after),
 * the remote-input policy, and the PP-OCRv5 catalog entries loading through
 * the same code path (synthetic v5-shaped ONNX models, requested by the
 * spec's literal model name).
 */

let server: TestServer;
let restricted: TestServer;
let dir: string;
let line: { png: Buffer; text: string };

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-ocr-http-'));
  server = await startTestServer({ server: { maxBodyBytes: 2 * 1024 * 1024, allowLocalFiles: [dir], allowPrivateUrls: ['127.0.0.1'] } });
  restricted = await startTestServer();
  line = await renderOneLine('Local models answer offline.', 26);
  await installSyntheticV5(server.home);
});

afterAll(async () => {
  await server?.stop();
  await restricted?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

function post(body: unknown, target = server): Promise<Response> {
  return fetch(`${target.url}/v1/ocr`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

async function expectError(res: Response, status: number, code: string, param?: string): Promise<void> {
  expect(res.status).toBe(status);
  const body = (await res.json()) as { error: { message: string; type: string; param: string | null; code: string | null } };
  expect(body.error.type).toBe(status >= 500 ? 'server_error' : status === 404 ? 'not_found_error' : status === 403 ? 'permission_error' : 'invalid_request_error');
  expect(body.error.code).toBe(code);
  expect(typeof body.error.message).toBe('string');
  expect(body.error.message).not.toMatch(/\n\s+at /);
  if (param) expect(body.error.param).toBe(param);
}

describe('POST /v1/ocr input forms', () => {
  it('accepts raw base64 and a data URI, with the same result', async () => {
    const raw = await post({ model: 'ppocr-v4-mobile', image_base64: line.png.toString('base64') });
    expect(raw.status).toBe(200);
    const a = (await raw.json()) as OcrResponse;
    expect(cer(line.text, a.text)).toBeLessThanOrEqual(0.02);
    expect(Object.keys(a).sort()).toEqual(['elapsed_ms', 'image_height', 'image_width', 'lines', 'text']);
    expect(Object.keys(a.lines[0]!).sort()).toEqual(['box', 'score', 'text']);
    const uri = await post({ model: 'ppocr-v4-mobile', image_base64: `data:image/png;base64,${line.png.toString('base64')}` });
    const b = (await uri.json()) as OcrResponse;
    expect(b.text).toBe(a.text);
    expect(b.lines[0]!.box).toEqual(a.lines[0]!.box);
  });

  it('defaults the model when none is given', async () => {
    const res = await post({ image_base64: line.png.toString('base64') });
    expect(res.status).toBe(200);
  });

  it('accepts a multipart file upload', async () => {
    const form = new FormData();
    form.append('model', 'ppocr-v4-mobile');
    form.append('file', new Blob([new Uint8Array(await sharp(line.png).jpeg({ quality: 95 }).toBuffer())], { type: 'image/jpeg' }), 'line.jpg');
    const res = await fetch(`${server.url}/v1/ocr`, { method: 'POST', body: form });
    expect(res.status).toBe(200);
    expect(cer(line.text, ((await res.json()) as OcrResponse).text)).toBeLessThanOrEqual(0.02);
  });

  it('reads image_url from a path under --allow-local-files, and refuses paths by default', async () => {
    const file = path.join(dir, 'line.png');
    await writeFile(file, line.png);
    const res = await post({ model: 'ppocr-v4-mobile', image_url: file });
    expect(res.status).toBe(200);
    expect(cer(line.text, ((await res.json()) as OcrResponse).text)).toBeLessThanOrEqual(0.02);
    await expectError(await post({ model: 'ppocr-v4-mobile', image_url: file }, restricted), 403, 'local_files_forbidden', 'image_url');
    await expectError(await post({ model: 'ppocr-v4-mobile', image_url: 'http://127.0.0.1:1/x.png' }, restricted), 403, 'private_url_forbidden', 'image_url');
    await expectError(await post({ model: 'ppocr-v4-mobile', image_url: 'relative/path.png' }), 400, 'invalid_value', 'image_url');
    await expectError(await post({ model: 'ppocr-v4-mobile', image_url: path.join(dir, 'missing.png') }), 400, 'file_not_found', 'image_url');
  });

  it('reads image_url from a loopback http URL under --allow-private-urls', async () => {
    // The server serves nothing of its own to fetch; a tiny server here does.
    const http = await import('node:http');
    const files = http.createServer((_req, res) => res.end(line.png));
    await new Promise<void>((resolve) => files.listen(0, '127.0.0.1', resolve));
    try {
      const port = (files.address() as { port: number }).port;
      const res = await post({ model: 'ppocr-v4-mobile', image_url: `http://127.0.0.1:${port}/line.png` });
      expect(res.status).toBe(200);
      expect(cer(line.text, ((await res.json()) as OcrResponse).text)).toBeLessThanOrEqual(0.02);
    } finally {
      files.close();
    }
  });
});

describe('POST /v1/ocr bad input', () => {
  it('answers each bad input with its status and error shape, and keeps serving', async () => {
    const png = line.png;
    await expectError(await post({ model: 'ppocr-v4-mobile', image_base64: '%%% not base64 %%%' }), 400, 'invalid_base64', 'image_base64');
    await expectError(await post({ model: 'ppocr-v4-mobile', image_base64: Buffer.from('hello, I am text').toString('base64') }), 400, 'invalid_image');
    await expectError(await post({ model: 'ppocr-v4-mobile', image_base64: png.subarray(0, png.length - 64).toString('base64') }), 400, 'invalid_image');
    await expectError(await post({ model: 'ppocr-v4-mobile', image_base64: '' }), 400, 'empty_image');
    await expectError(await post({ model: 'ppocr-v4-mobile', image_base64: 'data:image/png;base64,' }), 400, 'empty_image');
    await expectError(await post({ model: 'ppocr-v4-mobile' }), 400, 'missing_required_parameter');
    await expectError(await post({ model: 'ppocr-v4-mobile', image_base64: png.toString('base64'), image_url: '/tmp/x.png' }), 400, 'invalid_value', 'image_base64');
    await expectError(await post({ model: 'ppocr-v4-mobile', image_base64: 42 }), 400, 'invalid_value', 'image_base64');
    await expectError(await post({ model: 'no-such-model', image_base64: png.toString('base64') }), 404, 'model_not_found', 'model');
    await expectError(await post({ model: 'ppocr-v5-mobile', image_base64: png.toString('base64') }), 404, 'model_not_found', 'model');
    // Over the pixel limit: a 60-megapixel canvas that compresses to a few kilobytes.
    const huge = await sharp({ create: { width: 10_000, height: 6_000, channels: 3, background: '#ffffff' } }).png({ compressionLevel: 9 }).toBuffer();
    await expectError(await post({ model: 'ppocr-v4-mobile', image_base64: huge.toString('base64') }), 413, 'image_too_large');
    // Over the JSON body limit (2 MB in this server).
    await expectError(await post({ model: 'ppocr-v4-mobile', image_base64: 'A'.repeat(3 * 1024 * 1024) }), 413, 'payload_too_large');
    const malformed = await fetch(`${server.url}/v1/ocr`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":' });
    await expectError(malformed, 400, 'invalid_json');

    const health = await fetch(`${server.url}/health`);
    expect(health.status).toBe(200);
    const again = await post({ model: 'ppocr-v4-mobile', image_base64: png.toString('base64') });
    expect(again.status).toBe(200);
  });
});

describe('PP-OCRv5 catalog entries', () => {
  it('load and run through the same pipeline (synthetic v5-shaped models, the spec model name)', async () => {
    const res = await post({ model: 'vendor-ppocrv5-server', image_base64: line.png.toString('base64') });
    expect(res.status).toBe(200);
    const body = (await res.json()) as OcrResponse;
    expect(body.image_width).toBe((await sharp(line.png).metadata()).width);
    // The synthetic recogniser reads ink as 'o': one line, found where the text is.
    expect(body.lines).toHaveLength(1);
    expect(body.lines[0]!.text).toMatch(/^o+$/);
    expect(body.text).toBe(body.lines[0]!.text);
    const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: Array<{ id: string }> };
    expect(models.data.map((m) => m.id)).toContain('ppocr-v5-server');
  });
});
