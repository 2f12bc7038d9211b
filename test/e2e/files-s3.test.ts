import { GetObjectCommand, HeadObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { rm } from 'node:fs/promises';
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';
import { tinySdTurboModel } from '../fixtures/onnx/sd-turbo/index.js';
import { runCli } from '../helpers/cli.js';
import { startLocalS3, type LocalS3 } from '../helpers/local-s3.js';
import { spawnServe, type ServeProcess } from '../helpers/serve-process.js';
import { tempHome } from '../helpers/server.js';

/**
 * `lserve serve --files s3://bucket/prefix`: generated speech and images in
 * S3-compatible object storage (s3rver, in this process), found through the
 * standard AWS_* variables. Two replicas with different homes share the
 * prefix (one given the flag, one LSERVE_FILES): a file written through
 * one is served by the other with byte ranges, HEAD and revalidation as
 * from a directory; names outside the layout are 404s; files expire; a
 * storage that fails mid-transfer cuts the download, and one that is down
 * is a JSON 503 while the server keeps serving.
 */

const PREFIX = 'replicas/one';
const TEXT = 'The quick brown fox jumps over the lazy dog.';
/** Short enough to wait out; LastModified has whole seconds, so a file is served at least 3 s. */
const IMAGE_TTL_S = 4;

let s3: LocalS3;
const homes: string[] = [];
let a: ServeProcess;
let b: ServeProcess;

beforeAll(async () => {
  s3 = await startLocalS3();
  for (let i = 0; i < 2; i++) homes.push(await tempHome());
  for (const [folder, kind, id] of [
    [await syntheticPiperVoice(), 'tts', 'piper-test'],
    [await tinySdTurboModel(), 'image', 'sd-test'],
  ]) {
    const pulled = await runCli(['pull', folder!, '--kind', kind!, '--id', id!], { env: { LSERVE_HOME: homes[0] } });
    expect(pulled.code, pulled.stderr).toBe(0);
  }
  const env = { ...s3.env, LSERVE_IMAGE_CACHE_TTL: `${IMAGE_TTL_S}s` };
  a = await spawnServe(homes[0]!, ['--files', `s3://${s3.bucket}/${PREFIX}`], env);
  b = await spawnServe(homes[1]!, [], { ...env, LSERVE_FILES: `s3://${s3.bucket}/${PREFIX}/` });
});

afterAll(async () => {
  for (const server of [a, b]) {
    server?.child.kill('SIGTERM');
    await server?.exited;
  }
  for (const home of homes) await rm(home, { recursive: true, force: true });
  await s3?.destroy();
});

const object = async (key: string) => {
  const found = await s3.client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: key }));
  return { bytes: Buffer.from(await found.Body!.transformToByteArray()), etag: found.ETag };
};
const exists = (key: string) => s3.client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: key })).then(() => true, () => false);
const errorOf = async (res: Response) => ((await res.json()) as { error: { type: string; code: string; message: string } }).error;

/** One speech file, written through replica A. */
let name: string;
let whole: Buffer;
let etag: string;

describe('speech files in object storage', () => {
  it('writes <prefix>/audio/<name>, and both replicas serve it whole and answer HEAD', async () => {
    const res = await fetch(`${a.url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'piper-test', input: TEXT, voice: 'lessac' }) });
    expect(res.status).toBe(200);
    const { audio_url } = (await res.json()) as { audio_url: string };
    expect(audio_url).toMatch(/^\/v1\/audio\/files\/[0-9a-f]{32}\.wav$/);
    name = audio_url.slice(audio_url.lastIndexOf('/') + 1);
    ({ bytes: whole, etag } = await object(`${PREFIX}/audio/${name}`) as { bytes: Buffer; etag: string });
    expect(whole.subarray(0, 4).toString()).toBe('RIFF');
    for (const server of [a, b]) {
      const file = await fetch(`${server.url}${audio_url}`);
      expect(file.status).toBe(200);
      expect(file.headers.get('content-type')).toBe('audio/wav');
      expect(file.headers.get('etag')).toBe(etag);
      expect(file.headers.get('accept-ranges')).toBe('bytes');
      expect(file.headers.get('cache-control')).toMatch(/^private, max-age=\d+, immutable$/);
      expect(Buffer.from(await file.arrayBuffer()).equals(whole)).toBe(true);
    }
    const head = await fetch(`${b.url}${audio_url}`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.headers.get('content-length')).toBe(String(whole.length));
    expect(head.headers.get('etag')).toBe(etag);
    expect((await head.arrayBuffer()).byteLength).toBe(0);
  });

  it('answers byte ranges with 206 and exactly those bytes, several ranges with the whole file, and 416 past the end', async () => {
    const url = `${b.url}/v1/audio/files/${name}`;
    const size = whole.length;
    for (const [range, start, end] of [
      ['bytes=0-43', 0, 43],
      ['bytes=1000-4999', 1000, 4999],
      ['bytes=-100', size - 100, size - 1],
      [`bytes=${size - 5}-${size + 1000}`, size - 5, size - 1],
    ] as const) {
      const res = await fetch(url, { headers: { range } });
      expect(res.status, range).toBe(206);
      expect(res.headers.get('content-range')).toBe(`bytes ${start}-${end}/${size}`);
      expect(Number(res.headers.get('content-length'))).toBe(end - start + 1);
      expect(Buffer.from(await res.arrayBuffer()).equals(whole.subarray(start, end + 1)), range).toBe(true);
    }
    const several = await fetch(url, { headers: { range: 'bytes=0-9,1000-1009' } });
    expect(several.status).toBe(200);
    expect(Buffer.from(await several.arrayBuffer()).equals(whole)).toBe(true);
    const past = await fetch(url, { headers: { range: `bytes=${size}-` } });
    expect(past.status).toBe(416);
    expect(past.headers.get('content-range')).toBe(`bytes */${size}`);
    expect(past.headers.get('etag')).toBeNull();
    expect(await errorOf(past)).toMatchObject({ type: 'invalid_request_error', code: 'range_not_satisfiable' });
    const headRange = await fetch(url, { method: 'HEAD', headers: { range: 'bytes=10-19' } });
    expect(headRange.status).toBe(206);
    expect(headRange.headers.get('content-range')).toBe(`bytes 10-19/${size}`);
  });

  it("revalidates with the object's ETag and LastModified: 304, 412, and a stale If-Range gets the whole file", async () => {
    const url = `${b.url}/v1/audio/files/${name}`;
    // As a browser revalidates (fetch alone adds Cache-Control: no-cache to a conditional request).
    const fresh = await fetch(url, { headers: { 'cache-control': 'max-age=0', 'if-none-match': etag } });
    expect(fresh.status).toBe(304);
    expect(fresh.headers.get('etag')).toBe(etag);
    const lastModified = fresh.headers.get('last-modified')!;
    expect((await fetch(url, { headers: { 'cache-control': 'max-age=0', 'if-modified-since': lastModified } })).status).toBe(304);
    const changed = await fetch(url, { headers: { 'cache-control': 'max-age=0', 'if-none-match': '"other"' } });
    expect(changed.status).toBe(200);
    await changed.arrayBuffer();
    const failed = await fetch(url, { headers: { 'if-match': '"other"' } });
    expect(failed.status).toBe(412);
    expect((await errorOf(failed)).code).toBe('precondition_failed');
    expect((await fetch(url, { headers: { 'if-match': etag, range: 'bytes=0-9' } })).status).toBe(206);
    const stale = await fetch(url, { headers: { range: 'bytes=0-9', 'if-range': '"other"' } });
    expect(stale.status).toBe(200);
    expect(Buffer.from(await stale.arrayBuffer()).length).toBe(whole.length);
  });

  it('reaches no object outside <prefix>/<kind>/<32 hex>.<ext>: traversal, encoded separators and look-alikes are 404s', async () => {
    for (const key of ['secret.wav', 'replicas/secret.wav', `${PREFIX}/secret.wav`, `${PREFIX}/audio/secret.wav`, `${PREFIX}/audio/${'A'.repeat(32)}.wav`, `${PREFIX}/images/${'e'.repeat(32)}.wav`]) {
      await s3.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: key, Body: 'secret' }));
    }
    const paths = [
      ...['..%2Fsecret.wav', '..%2F..%2Fsecret.wav', '..%2F..%2F..%2Fsecret.wav', 'secret.wav', `${'A'.repeat(32)}.wav`, '%2Freplicas%2Fsecret.wav', `..%2Fimages%2F${'e'.repeat(32)}.wav`, `${name}%2F`].map((n) => `/v1/audio/files/${n}`),
      `/v1/images/cache/${'e'.repeat(32)}.wav`,
      `/v1/images/cache/..%2Faudio%2F${name}`,
    ];
    for (const path of paths) {
      const res = await fetch(`${a.url}${path}`);
      expect(res.status, path).toBe(404);
      expect((await errorOf(res)).type).toBe('not_found_error');
    }
  });
});

describe('image cache URLs in object storage', () => {
  it('writes <prefix>/images/<name>, served by both replicas until it expires, then deleted', async () => {
    const res = await fetch(`${a.url}/v1/images/generations`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'sd-test', prompt: 'a red fox', size: '64x64' }) });
    expect(res.status).toBe(200);
    const written = Date.now();
    const url = ((await res.json()) as { data: Array<{ url: string }> }).data[0]!.url;
    const path = new URL(url).pathname;
    expect(path).toMatch(/^\/v1\/images\/cache\/[0-9a-f]{32}\.png$/);
    const key = `${PREFIX}/images/${path.slice(path.lastIndexOf('/') + 1)}`;
    const { bytes } = await object(key);
    for (const server of [a, b]) {
      const image = await fetch(`${server.url}${path}`);
      expect(image.status).toBe(200);
      expect(image.headers.get('content-type')).toBe('image/png');
      expect(Buffer.from(await image.arrayBuffer()).equals(bytes)).toBe(true);
    }
    await new Promise((resolve) => setTimeout(resolve, written + IMAGE_TTL_S * 1000 + 500 - Date.now()));
    expect((await fetch(`${b.url}${path}`)).status).toBe(404);
    expect(await exists(key)).toBe(false);
  });
});

/** GET without reading the body: resolves once the headers are in (the body then waits on backpressure). */
function openDownload(url: string): Promise<http.IncomingMessage> {
  return new Promise((resolve, reject) => http.get(url, resolve).on('error', reject));
}

describe('when the storage fails', () => {
  it('cuts the download when the storage fails mid-body, logs it, and keeps serving', async () => {
    const big = `${'f'.repeat(32)}.wav`;
    const size = 16 * 1024 * 1024;
    await s3.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: `${PREFIX}/audio/${big}`, Body: Buffer.alloc(size, 7) }));
    const res = await openDownload(`${a.url}/v1/audio/files/${big}`);
    expect(res.statusCode).toBe(200);
    expect(Number(res.headers['content-length'])).toBe(size);
    s3.cutConnections();
    const { bytes, cut } = await new Promise<{ bytes: number; cut: boolean }>((resolve) => {
      let received = 0;
      res.on('data', (chunk: Buffer) => (received += chunk.length));
      res.on('end', () => resolve({ bytes: received, cut: false }));
      res.on('error', () => resolve({ bytes: received, cut: true }));
      res.on('aborted', () => resolve({ bytes: received, cut: true }));
    });
    expect(cut).toBe(true);
    expect(bytes).toBeLessThan(size);
    expect((await fetch(`${a.url}/v1/audio/files/${name}`)).status).toBe(200);
    expect(a.log()).toContain(`error GET /v1/audio/files/${big}`);
  });

  it('answers a JSON 503 while the storage is down, for files and for new speech, keeps serving, and recovers', async () => {
    await s3.stop();
    try {
      for (const method of ['GET', 'HEAD']) {
        const res = await fetch(`${b.url}/v1/audio/files/${name}`, { method });
        expect(res.status, method).toBe(503);
        if (method === 'GET') expect(await errorOf(res)).toMatchObject({ type: 'server_error', code: 'storage_unavailable' });
      }
      const speech = await fetch(`${a.url}/v1/audio/speech`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'piper-test', input: 'Hello.' }) });
      expect(speech.status).toBe(503);
      expect((await errorOf(speech)).code).toBe('storage_unavailable');
      expect((await fetch(`${a.url}/health`)).status).toBe(200);
      expect((await fetch(`${b.url}/v1/models`)).status).toBe(200);
    } finally {
      await s3.start();
    }
    const back = await fetch(`${b.url}/v1/audio/files/${name}`);
    expect(back.status).toBe(200);
    expect(Buffer.from(await back.arrayBuffer()).equals(whole)).toBe(true);
  });
});

describe('lserve serve --files', () => {
  it('refuses a location that is not s3://bucket[/prefix], a prefix that climbs, and --files with --files-dir (exit 2)', async () => {
    for (const [args, message] of [
      [['--files', '/srv/files'], '--files-dir'],
      [['--files', 's3://Bad_Bucket'], 'bucket name'],
      [['--files', 's3://bucket/a/../b'], "'..'"],
      [['--files', 's3://bucket', '--files-dir', '/tmp'], 'cannot be used with'],
    ] as const) {
      const result = await runCli(['serve', '--port', '0', ...args], { env: { LSERVE_HOME: homes[1] } });
      expect(result.code, args.join(' ')).toBe(2);
      expect(result.stderr).toContain(message);
    }
  });
});
