import { GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { S3FileStore } from '../../src/core/files/s3.js';
import type { FileStoreOptions } from '../../src/core/files/store.js';
import { startLocalS3, type LocalS3 } from '../helpers/local-s3.js';

/**
 * The object storage FileStore against s3rver (a local S3-compatible
 * server): keys, replicas sharing a prefix, byte ranges, expiry by
 * LastModified, the sweep, and names that must never reach a key. The HTTP
 * side (ranges, 304/412, outages) is in test/e2e/files-s3.test.ts.
 */

let s3: LocalS3;
let client: S3Client;
const logs: string[] = [];
const types = { wav: 'audio/wav', png: 'image/png' };
const options: FileStoreOptions = { ttlMs: 60_000, maxBytes: 1e6, types };
const store = (prefix: string, opts = options) => new S3FileStore(client, s3.bucket, prefix, opts, (m) => logs.push(m));

beforeAll(async () => {
  s3 = await startLocalS3();
  client = new S3Client({ endpoint: s3.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: s3.env.AWS_ACCESS_KEY_ID!, secretAccessKey: s3.env.AWS_SECRET_ACCESS_KEY! } });
});

afterAll(async () => {
  client?.destroy();
  await s3?.destroy();
});

const keys = async (prefix: string) => ((await s3.client.send(new ListObjectsV2Command({ Bucket: s3.bucket, Prefix: prefix }))).Contents ?? []).map((o) => o.Key).sort();
const exists = (key: string) => s3.client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: key })).then(() => true, () => false);
const read = async (stream: NodeJS.ReadableStream) => {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('S3FileStore', () => {
  it('writes <prefix>/<kind>/<random name> with its type, and another replica on the prefix serves it, whole and by range', async () => {
    const bytes = Buffer.from('RIFF0123456789abcdef');
    const file = await store('one/audio/').put(bytes, 'wav');
    expect(file.name).toMatch(/^[0-9a-f]{32}\.wav$/);
    const object = await s3.client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: `one/audio/${file.name}` }));
    expect(object.ContentType).toBe('audio/wav');
    expect(Buffer.from(await object.Body!.transformToByteArray()).equals(bytes)).toBe(true);

    const replica = store('one/audio/');
    const found = await replica.get(file.name);
    expect(found).toMatchObject({ name: file.name, size: bytes.length, contentType: 'audio/wav', etag: object.ETag });
    expect(found!.expiresAt).toBeGreaterThan(Date.now() + 55_000);
    expect((await read((await replica.open(found!))!)).equals(bytes)).toBe(true);
    expect((await read((await replica.open(found!, { start: 4, end: 9 }))!)).toString()).toBe('012345');
    // Another prefix, or another kind's types, is another store.
    expect(await store('two/audio/').get(file.name)).toBeUndefined();
    expect(await store('one/audio/', { ...options, types: { png: 'image/png' } }).get(file.name)).toBeUndefined();
  });

  it('never turns a name it did not write into a key: traversal and look-alikes are not found', async () => {
    const file = await store('one/audio/').put(Buffer.from('x'), 'wav');
    // Objects a request might try to reach around the layout.
    for (const key of ['one/secret.wav', 'one/audio/secret.wav', `one/audio/${'A'.repeat(32)}.wav`, `one/audio/${'a'.repeat(32)}.exe`]) {
      await s3.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: key, Body: 'secret' }));
    }
    const names = ['../secret.wav', 'secret.wav', `${'A'.repeat(32)}.wav`, `${'a'.repeat(32)}.exe`, `../audio/${file.name}`, `/${file.name}`, `${file.name}/`, file.name.toUpperCase(), '%2E%2E%2Fsecret.wav', ''];
    for (const name of names) expect(await store('one/audio/').get(name), name).toBeUndefined();
  });

  it('expires a file by its LastModified, deleting it when it is asked for', async () => {
    // LastModified has whole seconds: a TTL of 2.5 s is served at once and gone after 3.5 s.
    const short = store('expiry/', { ...options, ttlMs: 2500 });
    const file = await short.put(Buffer.from('soon gone'), 'png');
    expect(await short.get(file.name)).toBeDefined();
    await sleep(3500);
    expect(await short.get(file.name)).toBeUndefined();
    expect(await exists(`expiry/${file.name}`)).toBe(false);
  });

  it('sweeps expired objects and the oldest beyond the size cap, and leaves other keys under the prefix alone', async () => {
    const capped = store('cap/', { ...options, maxBytes: 25 });
    const foreign = 'cap/notes.txt';
    await s3.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: foreign, Body: 'x'.repeat(100) }));
    // LastModified has whole seconds: a second apart, the order is the storage's.
    const first = await capped.put(Buffer.alloc(10), 'wav');
    await sleep(1100);
    const second = await capped.put(Buffer.alloc(10), 'wav');
    await sleep(1100);
    const third = await capped.put(Buffer.alloc(10), 'wav');
    await capped.sweep(Date.now(), third.name);
    expect(await keys('cap/')).toEqual([foreign, `cap/${second.name}`, `cap/${third.name}`].sort());
    expect(await capped.get(first.name)).toBeUndefined();
    // Everything past its TTL goes, however small.
    await capped.sweep(Date.now() + 120_000);
    expect(await keys('cap/')).toEqual([foreign]);
    expect(logs).toEqual([]);
  });

  it('reports a storage it cannot reach as a 503, and a refused request as a 500', async () => {
    const file = await store('outage/').put(Buffer.from('x'), 'wav');
    const stranger = new S3Client({ endpoint: s3.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: 'UNKNOWN', secretAccessKey: 'x' } });
    await expect(new S3FileStore(stranger, s3.bucket, 'outage/', options, () => {}).put(Buffer.from('x'), 'wav')).rejects.toMatchObject({ status: 500, code: 'storage_error' });
    stranger.destroy();
    await s3.stop();
    try {
      await expect(store('outage/').get(file.name)).rejects.toMatchObject({ status: 503, code: 'storage_unavailable' });
      await expect(store('outage/').put(Buffer.from('x'), 'wav')).rejects.toMatchObject({ status: 503 });
    } finally {
      await s3.start();
    }
    expect(await store('outage/').get(file.name)).toBeDefined();
  });
});
