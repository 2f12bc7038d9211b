import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, stat, utimes, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Catalog } from '../../src/core/catalog.js';
import { pullModel, pullUrl, type PullEvent } from '../../src/core/download.js';
import { StoreError } from '../../src/core/errors.js';
import { ModelStore } from '../../src/core/store.js';
import { sha256Of, startMirror, testBytes, type Mirror } from '../helpers/hf-mirror.js';

const REPO = 'test-org/tiny-model';

/** A lock file as a holder killed a minute ago left it: its heartbeat (mtime) stopped then. */
async function writeStaleLock(file: string, content: string): Promise<void> {
  await writeFile(file, content);
  const then = new Date(Date.now() - 60_000);
  await utimes(file, then, then);
}

function entry(id: string, files: Record<string, object>, extra: object = {}) {
  return { id, kind: 'asr', backend: 'onnx', description: `test model ${id}`, owned_by: 'test', license: 'mit', files, ...extra };
}

describe('pullModel against a local hub mirror', () => {
  let mirror: Mirror;
  let home: string;
  const savedEndpoint = process.env.HF_ENDPOINT;
  const big = testBytes(300_000, 7);
  const small = testBytes(5_000, 3);
  let bigSha = '';

  beforeAll(async () => {
    mirror = await startMirror();
    process.env.HF_ENDPOINT = `${mirror.endpoint}/`; // trailing slash must be tolerated
    bigSha = sha256Of(big);
  });
  afterAll(async () => {
    await mirror.close();
    if (savedEndpoint === undefined) delete process.env.HF_ENDPOINT;
    else process.env.HF_ENDPOINT = savedEndpoint;
  });
  beforeEach(async () => {
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-dl-'));
    mirror.requests.length = 0;
  });
  afterEach(async () => {
    await rm(home, { recursive: true, force: true });
  });

  const storeWith = (...models: object[]) => new ModelStore(home, Catalog.parse({ version: 1, models }));

  it('downloads every file, reports progress, verifies x-linked-etag and installs atomically', async () => {
    await mirror.put(REPO, 'onnx/model.onnx', big, { linkedEtag: true, redirect: true });
    await mirror.put(REPO, 'tokens.txt', small);
    const store = storeWith(entry('tiny', { model: { repo: REPO, path: 'onnx/model.onnx' }, tokens: { repo: REPO, path: 'tokens.txt', size: small.length } }));
    const events: PullEvent[] = [];
    const result = await pullModel(store, 'tiny', { onProgress: (e) => events.push(e) });

    expect(result.alreadyInstalled).toBe(false);
    expect(result.downloadedBytes).toBe(big.length + small.length);
    const starts = events.filter((e) => e.type === 'file-start');
    expect(starts.map((e) => e.file)).toEqual(['model.onnx', 'tokens.txt']);
    const progress = events.filter((e) => e.type === 'progress' && e.file === 'model.onnx');
    expect(progress.length).toBeGreaterThan(1);
    expect(progress.at(-1)).toMatchObject({ receivedBytes: big.length, totalBytes: big.length, resumedFrom: 0, role: 'model' });
    const done = events.filter((e) => e.type === 'file-done');
    expect(done[0]).toMatchObject({ file: 'model.onnx', sha256: bigSha, verifiedWith: 'etag' });
    expect(done[1]).toMatchObject({ file: 'tokens.txt', verifiedWith: null });
    // The redirect hop was followed to the "CDN".
    expect(mirror.requests.some((r) => r.url.startsWith('/cdn/'))).toBe(true);

    const listed = await store.list();
    expect(listed.map((m) => m.id)).toEqual(['tiny']);
    expect(listed[0]!.sizeBytes).toBe(big.length + small.length);
    expect(await readFile(result.model.files.model!)).toEqual(big);
    const manifest = JSON.parse(await readFile(path.join(home, 'models/tiny/manifest.json'), 'utf8'));
    expect(manifest.files.model).toMatchObject({ name: 'model.onnx', size: big.length, sha256: bigSha });
    expect(manifest.files.tokens.sha256).toBe(sha256Of(small));
    expect(existsSync(store.partialDir('tiny'))).toBe(false);

    // A second pull is a no-op.
    mirror.requests.length = 0;
    const again = await pullModel(store, 'tiny');
    expect(again.alreadyInstalled).toBe(true);
    expect(mirror.requests).toHaveLength(0);
  });

  it('resumes an interrupted transfer with a Range request without re-sending bytes', async () => {
    await mirror.put(REPO, 'resume.bin', big, { linkedEtag: true, cutAfter: 120_000, cutTimes: 1 });
    const store = storeWith(entry('resumable', { model: { repo: REPO, path: 'resume.bin' } }));

    const first = await pullModel(store, 'resumable', { retries: 0 }).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(StoreError);
    expect((first as StoreError).code).toBe('download_interrupted');
    // Bytes were kept: the message says so, and that a rerun resumes.
    expect((first as StoreError).message).toMatch(/The 120 kB downloaded so far are kept: run the pull again to resume\.$/);
    expect(await store.list()).toEqual([]);
    const part = path.join(store.partialDir('resumable'), 'resume.bin.part');
    const kept = (await stat(part)).size;
    expect(kept).toBe(120_000);

    const events: PullEvent[] = [];
    await pullModel(store, 'resumable', { onProgress: (e) => events.push(e) });
    const second = mirror.requests[1]!;
    expect(second.range).toBe(`bytes=${kept}-`);
    expect(second.status).toBe(206);
    expect(second.bytesSent).toBe(big.length - kept);
    expect(mirror.bytesSent('resume.bin')).toBe(big.length);
    expect(events.find((e) => e.type === 'file-start')).toMatchObject({ resumedFrom: kept, totalBytes: big.length });
    const installed = await store.resolve('resumable');
    expect(sha256Of(await readFile(installed!.files.model!))).toBe(bigSha);
  });

  it('retries a transient interruption within one pull, resuming from the partial file', async () => {
    await mirror.put(REPO, 'flaky.bin', big, { cutAfter: 50_000, cutTimes: 1 });
    const store = storeWith(entry('flaky', { model: { repo: REPO, path: 'flaky.bin', sha256: bigSha } }));
    const events: PullEvent[] = [];
    await pullModel(store, 'flaky', { onProgress: (e) => events.push(e), retries: 1 });
    expect(events.some((e) => e.type === 'retry')).toBe(true);
    expect(mirror.requests.map((r) => r.range)).toEqual([undefined, 'bytes=50000-']);
    expect(mirror.bytesSent('flaky.bin')).toBe(big.length);
  });

  it('restarts from zero when the server ignores Range', async () => {
    await mirror.put(REPO, 'norange.bin', big, { ignoreRange: true });
    const store = storeWith(entry('norange', { model: { repo: REPO, path: 'norange.bin', sha256: bigSha } }));
    await mkdir(store.partialDir('norange'), { recursive: true });
    await writeFile(path.join(store.partialDir('norange'), 'norange.bin.part'), big.subarray(0, 1000));
    await pullModel(store, 'norange');
    expect(mirror.requests[0]!.range).toBe('bytes=1000-');
    expect(mirror.requests[0]!.status).toBe(200);
    expect(sha256Of(await readFile((await store.resolve('norange'))!.files.model!))).toBe(bigSha);
  });

  it('treats a 416 on a complete part file as done', async () => {
    await mirror.put(REPO, 'complete.bin', small, { linkedEtag: true });
    const store = storeWith(entry('complete', { model: { repo: REPO, path: 'complete.bin' } }));
    await mkdir(store.partialDir('complete'), { recursive: true });
    await writeFile(path.join(store.partialDir('complete'), 'complete.bin.part'), small);
    const result = await pullModel(store, 'complete');
    expect(mirror.requests[0]!.status).toBe(416);
    expect(result.downloadedBytes).toBe(0);
    expect(await store.resolve('complete')).toBeDefined();
  });

  it('rejects a sha256 mismatch and installs nothing', async () => {
    await mirror.put(REPO, 'bad.bin', small);
    const wrong = 'a'.repeat(64);
    const store = storeWith(entry('bad', { model: { repo: REPO, path: 'bad.bin', sha256: wrong } }));
    const error = (await pullModel(store, 'bad').catch((e: unknown) => e)) as StoreError;
    expect(error).toBeInstanceOf(StoreError);
    expect(error.code).toBe('checksum_mismatch');
    expect(error.message).toContain('bad.bin');
    expect(error.message).toContain(wrong);
    expect(error.message).toContain(sha256Of(small));
    expect(await store.list()).toEqual([]);
    expect(existsSync(path.join(home, 'models/bad'))).toBe(false);
    expect(existsSync(path.join(store.partialDir('bad'), 'bad.bin.part'))).toBe(false);
  });

  it('rejects a file whose x-linked-etag does not match its content', async () => {
    await mirror.put(REPO, 'etag.bin', small, { linkedEtag: 'b'.repeat(64) });
    const store = storeWith(entry('etag', { model: { repo: REPO, path: 'etag.bin' } }));
    await expect(pullModel(store, 'etag')).rejects.toMatchObject({ code: 'checksum_mismatch' });
    expect(await store.resolve('etag')).toBeUndefined();
  });

  it('checks the catalog size against the server', async () => {
    await mirror.put(REPO, 'sized.bin', small);
    const store = storeWith(entry('sized', { model: { repo: REPO, path: 'sized.bin', size: small.length + 1 } }));
    await expect(pullModel(store, 'sized')).rejects.toMatchObject({ code: 'size_mismatch' });
  });

  it('reports a 404 naming the URL', async () => {
    const store = storeWith(entry('missing', { model: { repo: REPO, path: 'nope.onnx' } }));
    const error = (await pullModel(store, 'missing').catch((e: unknown) => e)) as StoreError;
    expect(error.code).toBe('http_404');
    expect(error.message).toContain(`${mirror.endpoint}/${REPO}/resolve/main/nope.onnx`);
  });

  it('reports other HTTP statuses naming the URL', async () => {
    await mirror.put(REPO, 'gated.bin', small, { status: 403 });
    const store = storeWith(entry('gated', { model: { repo: REPO, path: 'gated.bin' } }));
    await expect(pullModel(store, 'gated')).rejects.toThrow(/HTTP 403.*gated\.bin/);
  });

  it('reports an unreachable endpoint and mentions HF_ENDPOINT', async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const { port } = closed.address() as AddressInfo;
    await new Promise<void>((r) => closed.close(() => r()));
    const store = storeWith(entry('offline', { model: { repo: REPO, path: 'x.bin' } }));
    process.env.HF_ENDPOINT = `http://127.0.0.1:${port}`;
    try {
      const error = (await pullModel(store, 'offline').catch((e: unknown) => e)) as StoreError;
      expect(error.code).toBe('network_unreachable');
      expect(error.message).toContain(`Could not connect to http://127.0.0.1:${port}: connection refused (ECONNREFUSED)`);
      expect(error.message).toContain(`http://127.0.0.1:${port}/${REPO}/resolve/main/x.bin`);
      expect(error.message).toContain('HF_ENDPOINT');
      // Nothing came, so nothing is kept and nothing is promised.
      expect(error.message).not.toMatch(/interrupted|resume/i);
      expect(existsSync(store.partialDir('offline'))).toBe(false);
    } finally {
      process.env.HF_ENDPOINT = mirror.endpoint;
    }
  });

  it('names close matches for an unknown id and refuses bundled models', async () => {
    const store = storeWith(entry('whisper-base', { model: { repo: REPO, path: 'w.onnx' } }), {
      ...entry('ocr-bundled', { det: { npm: 'lserve-no-such-package/det.onnx' } }),
      kind: 'ocr',
    });
    await expect(pullModel(store, 'whisper-bas')).rejects.toMatchObject({ code: 'unknown_model', message: expect.stringContaining("'whisper-base'") });
    await expect(pullModel(store, 'ocr-bundled')).rejects.toMatchObject({ code: 'bundled', message: expect.stringContaining('bundled') });
  });

  it('lets one of two concurrent pulls download while the other waits', async () => {
    await mirror.put(REPO, 'shared.bin', big, { linkedEtag: true });
    const store = storeWith(entry('shared', { model: { repo: REPO, path: 'shared.bin' } }));
    const events: PullEvent[] = [];
    // Either pull may take the lock first: the other one waits.
    const onProgress = (e: PullEvent) => events.push(e);
    const [a, b] = await Promise.all([pullModel(store, 'shared', { onProgress }), pullModel(store, 'shared', { onProgress })]);
    expect(mirror.requests).toHaveLength(1);
    expect([a.alreadyInstalled, b.alreadyInstalled].sort()).toEqual([false, true]);
    expect(events.some((e) => e.type === 'waiting')).toBe(true);
    expect(sha256Of(await readFile((await store.resolve('shared'))!.files.model!))).toBe(bigSha);
  });

  it('takes over the lock of a dead process once its heartbeat is stale', async () => {
    await mirror.put(REPO, 'stale.bin', small);
    const store = storeWith(entry('stale', { model: { repo: REPO, path: 'stale.bin' } }));
    const dead = spawnSync(process.execPath, ['-e', '']).pid!;
    await mkdir(store.partialDir('stale'), { recursive: true });
    await writeStaleLock(path.join(store.partialDir('stale'), '.lock'), `${dead} gone\n`);
    await pullModel(store, 'stale');
    expect(await store.resolve('stale')).toBeDefined();
  });

  it('refuses to remove a model whose pull lock a live process holds, but not for a stale lock', async () => {
    const store = storeWith(entry('locked', { model: { repo: REPO, path: 'locked.bin' } }));
    const staging = store.partialDir('locked');
    await mkdir(staging, { recursive: true });
    await writeFile(path.join(staging, 'locked.bin.part'), small);
    // This test process stands in for a running pull: its pid is alive.
    await writeFile(path.join(staging, '.lock'), `${process.pid} running\n`);
    await expect(store.remove('locked')).rejects.toMatchObject({
      code: 'pull_in_progress',
      message: `a pull of 'locked' is running (pid ${process.pid}); stop it (Ctrl-C) or wait for it to finish, then run \`lserve rm locked\` again`,
    });
    expect(existsSync(path.join(staging, 'locked.bin.part'))).toBe(true);

    // A pull killed outright (SIGKILL, a second Ctrl-C) leaves its lock behind, its heartbeat stopped.
    const dead = spawnSync(process.execPath, ['-e', '']).pid!;
    await writeStaleLock(path.join(staging, '.lock'), `${dead} gone\n`);
    // Not installed, but the partial download was there to remove.
    expect(await store.remove('locked')).toBe('partial');
    expect(existsSync(staging)).toBe(false);
    // An empty staging directory is nothing: removed, and said so.
    await mkdir(staging, { recursive: true });
    expect(await store.remove('locked')).toBe('none');
    expect(existsSync(staging)).toBe(false);
  });

  it('stops a pull whose lock another pull took over (its heartbeat had stalled), leaving that pull its files', async () => {
    await mirror.put(REPO, 'taken.bin', big, { stallAfter: 100_000 });
    const store = storeWith(entry('taken', { model: { repo: REPO, path: 'taken.bin' } }));
    const lockFile = path.join(store.partialDir('taken'), '.lock');
    const other = `${process.pid} the-other-pull -\n`;
    const pulling = pullModel(store, 'taken', {
      onProgress: (e) => {
        // As a waiting pull does once it judged this one's heartbeat stale.
        if (e.type === 'progress' && e.receivedBytes === 100_000) void writeFile(lockFile, other);
      },
    });
    const error = (await pulling.catch((e: unknown) => e)) as StoreError;
    expect(error.code).toBe('pull_lock_lost');
    expect(error.message).toContain("The pull of 'taken' stopped");
    expect(await readFile(lockFile, 'utf8')).toBe(other);
  });

  it('leaves the part file when aborted, so a rerun resumes', async () => {
    await mirror.put(REPO, 'abort.bin', big, { stallAfter: 100_000 });
    const store = storeWith(entry('abortable', { model: { repo: REPO, path: 'abort.bin', sha256: bigSha } }));
    const controller = new AbortController();
    const error = (await pullModel(store, 'abortable', {
      signal: controller.signal,
      onProgress: (e) => {
        // Abort while the server stalls, once the received bytes have had time to reach the disk.
        if (e.type === 'progress' && e.receivedBytes === 100_000) setTimeout(() => controller.abort(), 100);
      },
    }).catch((e: unknown) => e)) as StoreError;
    expect(error.code).toBe('aborted');
    const kept = (await stat(path.join(store.partialDir('abortable'), 'abort.bin.part'))).size;
    expect(kept).toBe(100_000);
    mirror.configure(REPO, 'abort.bin', {});
    await pullModel(store, 'abortable');
    expect(mirror.requests.at(-1)!.range).toBe(`bytes=${kept}-`);
    expect(mirror.bytesSent('abort.bin')).toBe(big.length);
  });

  it('gives up on a stalled connection with a timeout error', async () => {
    await mirror.put(REPO, 'stall.bin', big, { stallAfter: 10_000 });
    const store = storeWith(entry('stalled', { model: { repo: REPO, path: 'stall.bin' } }));
    const error = (await pullModel(store, 'stalled', { idleTimeoutMs: 300, retries: 0 }).catch((e: unknown) => e)) as StoreError;
    expect(error.code).toBe('network_timeout');
    expect(error.message).toContain('stall.bin');
    expect(error.message).toContain('HF_ENDPOINT');
  });

  it('keeps repo-relative paths when file names collide', async () => {
    await mirror.put(REPO, 'unet/model.onnx', small);
    await mirror.put(REPO, 'vae_decoder/model.onnx', big);
    const store = storeWith(entry('collide', { unet: { repo: REPO, path: 'unet/model.onnx' }, vae: { repo: REPO, path: 'vae_decoder/model.onnx' } }));
    const { model } = await pullModel(store, 'collide');
    expect(model.files.unet).toBe(path.join(home, 'models/collide/unet/model.onnx'));
    expect(model.files.vae).toBe(path.join(home, 'models/collide/vae_decoder/model.onnx'));
    expect((await stat(model.files.vae!)).size).toBe(big.length);
  });

  it('pulls a URL as a user model with a synthesized entry', async () => {
    await mirror.put('direct', 'files/My-Model.gguf', small);
    const store = storeWith();
    const url = `${mirror.endpoint}/direct/resolve/main/files/My-Model.gguf`;
    const { model } = await pullUrl(store, url, { kind: 'chat' });
    expect(model).toMatchObject({ id: 'my-model', source: 'url', entry: { kind: 'chat', backend: 'llama', files: { model: { url } } } });
    const [listed] = await store.list();
    expect(listed).toMatchObject({ id: 'my-model', source: 'url', sizeBytes: small.length });
    await expect(pullUrl(store, 'ftp://example/x.gguf', { kind: 'chat' })).rejects.toMatchObject({ code: 'invalid_url' });
  });
});

describe('ModelStore user models', () => {
  let home: string;
  beforeEach(async () => {
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-store-'));
  });
  afterEach(async () => {
    await rm(home, { recursive: true, force: true });
  });

  it('registers a local file in place and removes it without touching the file', async () => {
    const store = new ModelStore(home, Catalog.parse({ version: 1, models: [entry('taken', { model: { repo: REPO, path: 'x' } })] }));
    const file = path.join(home, 'My Model.Q4.gguf');
    await writeFile(file, testBytes(1234));
    const model = await store.registerLocal(file, { kind: 'chat' });
    expect(model).toMatchObject({ id: 'my-model.q4', source: 'local', sizeBytes: 1234, files: { model: file }, entry: { backend: 'llama' } });
    expect((await store.list()).map((m) => m.id)).toEqual(['my-model.q4']);
    await expect(store.registerLocal(file, { kind: 'chat', id: 'taken' })).rejects.toMatchObject({ code: 'id_taken' });
    await expect(store.registerLocal(path.join(home, 'nope.gguf'), { kind: 'chat' })).rejects.toMatchObject({ code: 'file_not_found' });

    expect(await store.remove('my-model.q4')).toBe('installed');
    expect(await store.list()).toEqual([]);
    expect(existsSync(file)).toBe(true);
    expect(await store.remove('my-model.q4')).toBe('none');
  });
});
