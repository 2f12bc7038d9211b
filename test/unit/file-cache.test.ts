import { mkdtemp, readFile, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { DirectoryFileStore } from '../../src/core/files/directory.js';
import { SpeechJobs } from '../../src/http/speech-jobs.js';
import type { PreparedSpeech } from '../../src/core/tasks/speak.js';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-cache-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

const types = { wav: 'audio/wav', png: 'image/png' };

describe('DirectoryFileStore', () => {
  it('writes under a random name and serves exactly its own names', async () => {
    const cache = new DirectoryFileStore(dir, { ttlMs: 60_000, maxBytes: 1e6, types });
    const file = await cache.put(Buffer.from('RIFF....'), 'wav');
    expect(file.name).toMatch(/^[0-9a-f]{32}\.wav$/);
    expect(file.contentType).toBe('audio/wav');
    expect(await readFile(path.join(dir, file.name), 'utf8')).toBe('RIFF....');
    expect((await cache.get(file.name))?.size).toBe(8);
    // Names it never wrote, traversal and look-alikes are not found.
    await writeFile(path.join(dir, 'other.wav'), 'x');
    for (const name of ['other.wav', '../etc/passwd', '..%2Fx', file.name.toUpperCase(), `${file.name.slice(0, -4)}.png`, `/${file.name}`, `${file.name}/`, '']) {
      expect(await cache.get(name)).toBeUndefined();
    }
  });

  it('expires files after the TTL and removes them from disk', async () => {
    const cache = new DirectoryFileStore(dir, { ttlMs: 30, maxBytes: 1e6, types });
    const file = await cache.put(Buffer.alloc(10), 'png');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await cache.get(file.name)).toBeUndefined();
    expect(await readdir(dir)).toEqual([]);
  });

  it('removes the oldest files beyond the size cap', async () => {
    const cache = new DirectoryFileStore(dir, { ttlMs: 60_000, maxBytes: 25, types });
    const first = await cache.put(Buffer.alloc(10), 'wav');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const second = await cache.put(Buffer.alloc(10), 'wav');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const third = await cache.put(Buffer.alloc(10), 'wav');
    expect(await cache.get(first.name)).toBeUndefined();
    expect(await cache.get(second.name)).toBeDefined();
    expect(await cache.get(third.name)).toBeDefined();
    expect((await readdir(dir)).sort()).toEqual([second.name, third.name].sort());
  });

  it("serves another process's files, and sweeps only half-written files whose writer is long gone", async () => {
    const file = await new DirectoryFileStore(dir, { ttlMs: 60_000, maxBytes: 1e6, types }).put(Buffer.alloc(3), 'wav');
    const writing = `.${'a'.repeat(32)}.wav.part`;
    const abandoned = `.${'b'.repeat(32)}.wav.part`;
    await writeFile(path.join(dir, writing), 'partial');
    await writeFile(path.join(dir, abandoned), 'partial');
    const hourAgo = new Date(Date.now() - 3_600_000);
    await utimes(path.join(dir, abandoned), hourAgo, hourAgo);
    const other = new DirectoryFileStore(dir, { ttlMs: 60_000, maxBytes: 1e6, types });
    expect((await other.get(file.name))?.size).toBe(3);
    const own = await other.put(Buffer.alloc(1), 'wav');
    expect((await readdir(dir)).sort()).toEqual([writing, file.name, own.name].sort());
  });

  it('expires by mtime, whichever process wrote the file', async () => {
    const file = await new DirectoryFileStore(dir, { ttlMs: 60_000, maxBytes: 1e6, types }).put(Buffer.alloc(3), 'wav');
    const other = new DirectoryFileStore(dir, { ttlMs: 60_000, maxBytes: 1e6, types });
    const described = await other.get(file.name);
    expect(described?.expiresAt).toBeGreaterThan(Date.now() + 59_000);
    const twoMinutesAgo = new Date(Date.now() - 120_000);
    await utimes(path.join(dir, file.name), twoMinutesAgo, twoMinutesAgo);
    expect(await other.get(file.name)).toBeUndefined();
    expect(await readdir(dir)).toEqual([]);
  });

  it('keeps one size cap for every process writing to the folder', async () => {
    const options = { ttlMs: 60_000, maxBytes: 15, types };
    const first = await new DirectoryFileStore(dir, options).put(Buffer.alloc(10), 'wav');
    await new Promise((resolve) => setTimeout(resolve, 5));
    const second = await new DirectoryFileStore(dir, options).put(Buffer.alloc(10), 'wav');
    expect(await readdir(dir)).toEqual([second.name]);
    expect(first.name).not.toBe(second.name);
  });

  it('sweeps side by side with another process removing the same files', async () => {
    const old = new Date(Date.now() - 120_000);
    const names = Array.from({ length: 40 }, (_, i) => `${i.toString(16).padStart(32, '0')}.wav`);
    for (const name of names) {
      await writeFile(path.join(dir, name), 'x');
      await utimes(path.join(dir, name), old, old);
    }
    const [a, b] = [new DirectoryFileStore(dir, { ttlMs: 60_000, maxBytes: 1e6, types }), new DirectoryFileStore(dir, { ttlMs: 60_000, maxBytes: 1e6, types })];
    await Promise.all([a.sweep(), b.sweep(), a.sweep()]);
    expect(await readdir(dir)).toEqual([]);
  });
});

describe('SpeechJobs', () => {
  const speech = () => {
    const job = { released: 0, release: () => void job.released++ };
    return job as unknown as PreparedSpeech & { released: number };
  };

  it('hands a job out once per token', () => {
    const jobs = new SpeechJobs(60_000, 4);
    const token = jobs.create({ speech: speech(), format: 'wav' });
    expect(token).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(jobs.claim(token)?.format).toBe('wav');
    expect(jobs.claim(token)).toBeUndefined();
    expect(jobs.claim('00000000-0000-4000-8000-000000000000')).toBeUndefined();
  });

  it('expires unclaimed jobs and releases their model', async () => {
    const jobs = new SpeechJobs(20, 4);
    const parked = speech();
    const token = jobs.create({ speech: parked, format: 'mp3' });
    await new Promise((resolve) => setTimeout(resolve, 40));
    expect(jobs.claim(token)).toBeUndefined();
    expect(parked.released).toBe(1);
  });

  it('refuses more pending jobs than its limit with a 503', () => {
    const jobs = new SpeechJobs(60_000, 2);
    jobs.create({ speech: speech(), format: 'wav' });
    jobs.create({ speech: speech(), format: 'wav' });
    expect(() => jobs.create({ speech: speech(), format: 'wav' })).toThrow(expect.objectContaining({ status: 503 }));
    jobs.close();
  });
});
