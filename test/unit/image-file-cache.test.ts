import { mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DirectoryFileStore } from '../../src/core/files/directory.js';

/** The directory store behind /v1/images/cache (and /v1/audio/files): own names only, TTL, size cap. */

let dir: string;
const types = { png: 'image/png' };

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-file-cache-'));
});

afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('DirectoryFileStore', () => {
  it('evicts the oldest files beyond the cap, but never the file just written', async () => {
    const cache = new DirectoryFileStore(path.join(dir, 'cap'), { ttlMs: 60_000, maxBytes: 10, types });
    const a = await cache.put(new Uint8Array(6), 'png');
    const b = await cache.put(new Uint8Array(4), 'png');
    expect(await cache.get(a.name)).toBeDefined();
    const c = await cache.put(new Uint8Array(5), 'png');
    expect(await cache.get(a.name)).toBeUndefined();
    expect(await cache.get(b.name)).toBeDefined();
    const big = await cache.put(new Uint8Array(50), 'png');
    expect(await cache.get(big.name)).toMatchObject({ size: 50, contentType: 'image/png' });
    expect(await cache.get(c.name)).toBeUndefined();
  });

  it('serves only its own names, forgets expired files, and adopts files of an earlier run', async () => {
    const folder = path.join(dir, 'ttl');
    const cache = new DirectoryFileStore(folder, { ttlMs: 50, maxBytes: 1e6, types });
    const file = await cache.put(new Uint8Array([1, 2, 3]), 'png');
    for (const name of ['..', `../${file.name}`, file.name.toUpperCase(), `${file.name.slice(0, -3)}jpg`, 'x.png', `/${file.name}`]) {
      expect(await cache.get(name), name).toBeUndefined();
    }
    // A half-written file from a writer that died long ago; one being written now would be left alone.
    const part = path.join(folder, `.${'a'.repeat(32)}.png.part`);
    await writeFile(part, 'half');
    await utimes(part, new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));
    const later = new DirectoryFileStore(folder, { ttlMs: 60_000, maxBytes: 1e6, types });
    expect(await later.get(file.name)).toMatchObject({ size: 3 });
    await later.sweep();
    expect((await readdir(folder)).some((n) => n.endsWith('.part'))).toBe(false);
    await new Promise((r) => setTimeout(r, 60));
    expect(await cache.get(file.name)).toBeUndefined();
  });
});
