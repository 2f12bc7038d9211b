import { randomBytes } from 'node:crypto';
import { mkdir, rm, truncate, writeFile } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, tempHome, type TestServer } from '../helpers/server.js';

/**
 * The served cache files (GET /v1/audio/files/:name, /v1/images/cache/:name)
 * when the disk changes under them: a file gone is a JSON 404, a file that
 * shrinks while it is sent cuts the connection (never a body shorter than its
 * Content-Length, which a keep-alive client would wait on), a client that
 * leaves mid-way is no error, and the server keeps serving through all of
 * it. The files are put in the audio cache's folder before the server first
 * uses it, so it adopts them as its own (as after a restart); no model needed.
 */

/** Far more than the socket buffers hold, so the server is still reading the file when the test shrinks it. */
const BIG_BYTES = 16 * 1024 * 1024;

let home: string;
let server: TestServer;
const names = { big: `${'b'.repeat(32)}.wav`, small: `${'c'.repeat(32)}.wav`, gone: `${'d'.repeat(32)}.wav` };
const small = randomBytes(5000);
const folder = () => path.join(home, 'cache', 'audio');
const fileUrl = (name: string) => `${server.url}/v1/audio/files/${name}`;

beforeAll(async () => {
  home = await tempHome();
  await mkdir(folder(), { recursive: true });
  await writeFile(path.join(folder(), names.big), Buffer.alloc(BIG_BYTES, 7));
  await writeFile(path.join(folder(), names.small), small);
  await writeFile(path.join(folder(), names.gone), small);
  server = await startTestServer({ home });
});

afterAll(async () => {
  await server?.stop();
  if (home) await rm(home, { recursive: true, force: true });
});

/** GET without reading the body: resolves with the response once its headers are in (the body then waits on backpressure). */
function openDownload(url: string): Promise<http.IncomingMessage> {
  return new Promise((resolve, reject) => http.get(url, resolve).on('error', reject));
}

/** Reads the rest of a response: the bytes received and whether it ended cleanly or was cut. */
function drain(res: http.IncomingMessage): Promise<{ bytes: number; cut: boolean }> {
  return new Promise((resolve) => {
    let bytes = 0;
    res.on('data', (chunk: Buffer) => (bytes += chunk.length));
    res.on('end', () => resolve({ bytes, cut: false }));
    res.on('error', () => resolve({ bytes, cut: true }));
    res.on('aborted', () => resolve({ bytes, cut: true }));
  });
}

async function expectSmallServed(): Promise<void> {
  const res = await fetch(fileUrl(names.small));
  expect(res.status).toBe(200);
  expect(Buffer.from(await res.arrayBuffer()).equals(small)).toBe(true);
}

describe('cache files when the disk changes under them', () => {
  it('serves an adopted file whole', async () => {
    await expectSmallServed();
  });

  it('answers a JSON 404 for a file removed from disk behind the cache, for GET and HEAD', async () => {
    await rm(path.join(folder(), names.gone));
    const res = await fetch(fileUrl(names.gone));
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.headers.get('cache-control')).toBeNull();
    expect(((await res.json()) as { error: { type: string; code: string } }).error).toMatchObject({ type: 'not_found_error', code: 'file_not_found' });
    expect((await fetch(fileUrl(names.gone), { method: 'HEAD' })).status).toBe(404);
    await expectSmallServed();
  });

  it('logs nothing when a client leaves mid-download', async () => {
    const res = await openDownload(fileUrl(names.big));
    expect(res.statusCode).toBe(200);
    res.destroy();
    await expectSmallServed();
    expect(server.logs.filter((line) => line.startsWith('error '))).toEqual([]);
  });

  it('cuts the connection when the file shrinks while it is being sent, logs it, and keeps serving', async () => {
    const res = await openDownload(fileUrl(names.big));
    expect(res.statusCode).toBe(200);
    expect(Number(res.headers['content-length'])).toBe(BIG_BYTES);
    await truncate(path.join(folder(), names.big), 1000);
    const started = Date.now();
    const { bytes, cut } = await drain(res);
    expect(cut).toBe(true);
    expect(bytes).toBeLessThan(BIG_BYTES);
    // Cut at once, not by the server's 5 s keep-alive timeout ending a connection the client still waits on.
    expect(Date.now() - started).toBeLessThan(4000);
    await expectSmallServed();
    expect(server.logs.some((line) => line.includes('shrank on disk while it was being sent'))).toBe(true);
  });
});
