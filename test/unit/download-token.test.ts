import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { Catalog } from '../../src/core/catalog.js';
import { pullModel, pullUrl } from '../../src/core/download.js';
import { StoreError } from '../../src/core/errors.js';
import { readHubTokenFile, type HubToken } from '../../src/core/hub-auth.js';
import { ModelStore } from '../../src/core/store.js';
import { startMirror, testBytes, type Mirror } from '../helpers/hf-mirror.js';

/**
 * Gated and private models: the Hugging Face token goes to the hub endpoint's
 * origin only. The "CDN" is a second server on another port (another origin,
 * as cdn-lfs.hf.co is to huggingface.co): the token must never reach it.
 */

const REPO = 'test-org/gated-model';
const SECRET = 'hf_SecretTokenValue123';
const token: HubToken = { token: SECRET, from: '--hf-token-file /run/secrets/hf' };

describe('Hugging Face token', () => {
  let hub: Mirror;
  let cdn: Mirror;
  let home: string;
  const data = testBytes(50_000, 9);
  const saved = { endpoint: process.env.HF_ENDPOINT, token: process.env.HF_TOKEN };

  beforeAll(async () => {
    hub = await startMirror();
    cdn = await startMirror();
    process.env.HF_ENDPOINT = hub.endpoint;
    await hub.put(REPO, 'lfs.bin', data, { linkedEtag: true, redirect: cdn.endpoint });
    await cdn.put(REPO, 'lfs.bin', data);
    await hub.put(REPO, 'local.bin', data, { redirect: true });
    await hub.put(REPO, 'denied.bin', data, { status: 401 });
    await hub.put(REPO, 'forbidden.bin', data, { status: 403 });
    await hub.put(REPO, 'cdn-denied.bin', data, { redirect: cdn.endpoint });
    await cdn.put(REPO, 'cdn-denied.bin', data, { status: 403 });
  });
  afterAll(async () => {
    await hub.close();
    await cdn.close();
    for (const [name, value] of [['HF_ENDPOINT', saved.endpoint], ['HF_TOKEN', saved.token]] as const) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });
  beforeEach(async () => {
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-token-'));
    delete process.env.HF_TOKEN;
    hub.requests.length = 0;
    cdn.requests.length = 0;
  });
  afterEach(async () => {
    await rm(home, { recursive: true, force: true });
  });

  const storeFor = (file: string) =>
    new ModelStore(
      home,
      Catalog.parse({ version: 1, models: [{ id: 'gated', kind: 'asr', backend: 'onnx', description: 'gated', owned_by: 'test', license: 'other', files: { model: { repo: REPO, path: file } } }] }),
    );
  const denied = async (file: string, hfToken?: HubToken) => (await pullModel(storeFor(file), 'gated', { hfToken, retries: 0 }).catch((e: unknown) => e)) as StoreError;

  it('sends the token to the hub, and not to the CDN on another origin it redirects to', async () => {
    await pullModel(storeFor('lfs.bin'), 'gated', { hfToken: token });
    expect(hub.requests.map((r) => [r.url, r.authorization])).toEqual([[`/${REPO}/resolve/main/lfs.bin`, `Bearer ${SECRET}`]]);
    expect(cdn.requests.map((r) => [r.url, r.authorization, r.status])).toEqual([[`/cdn/${REPO}/resolve/main/lfs.bin`, undefined, 200]]);
  });

  it('keeps the token on a redirect within the hub origin', async () => {
    await pullModel(storeFor('local.bin'), 'gated', { hfToken: token });
    expect(hub.requests.map((r) => r.authorization)).toEqual([`Bearer ${SECRET}`, `Bearer ${SECRET}`]);
    expect(hub.requests[1]!.url).toBe(`/cdn/${REPO}/resolve/main/local.bin`);
  });

  it('reads HF_TOKEN (trimmed) when no token is given, and sends nothing without one', async () => {
    process.env.HF_TOKEN = `  ${SECRET}\n`;
    await pullModel(storeFor('lfs.bin'), 'gated');
    expect(hub.requests[0]!.authorization).toBe(`Bearer ${SECRET}`);

    delete process.env.HF_TOKEN;
    await rm(home, { recursive: true, force: true });
    hub.requests.length = 0;
    await pullModel(storeFor('lfs.bin'), 'gated');
    expect(hub.requests[0]!.authorization).toBeUndefined();
  });

  it('sends the token with a URL pull on the hub, and not with one elsewhere', async () => {
    const store = new ModelStore(home, Catalog.parse({ version: 1, models: [] }));
    await pullUrl(store, `${cdn.endpoint}/cdn/${REPO}/resolve/main/lfs.bin`, { kind: 'chat', id: 'elsewhere' }, { hfToken: token });
    expect(cdn.requests[0]!.authorization).toBeUndefined();
    await pullUrl(store, `${hub.endpoint}/${REPO}/resolve/main/lfs.bin`, { kind: 'chat', id: 'on-hub' }, { hfToken: token });
    expect(hub.requests[0]!.authorization).toBe(`Bearer ${SECRET}`);
    expect(cdn.requests[1]!.authorization).toBeUndefined();
  });

  it('on a 401 without a token names the model, the licence page and both ways to give one', async () => {
    const error = await denied('denied.bin');
    expect(error.code).toBe('http_401');
    expect(error.message).toContain(`Access denied (HTTP 401) for ${hub.endpoint}/${REPO}/resolve/main/denied.bin`);
    expect(error.message).toContain("'gated' is gated or private, and no Hugging Face token was given");
    expect(error.message).toContain(`accept its licence on ${hub.endpoint}/${REPO} `);
    expect(error.message).toContain('set HF_TOKEN, or pass --hf-token-file <path>');
    expect((await denied('forbidden.bin')).message).toContain('no Hugging Face token was given');
  });

  it('on a 401 or 403 with a token says where the token came from, never what it is', async () => {
    const refused = await denied('denied.bin', token);
    expect(refused.message).toContain("the hub did not accept the Hugging Face token from --hf-token-file /run/secrets/hf for 'gated'");
    const forbidden = await denied('forbidden.bin', token);
    expect(forbidden.code).toBe('http_403');
    expect(forbidden.message).toContain("the account of the Hugging Face token from --hf-token-file /run/secrets/hf has no access to 'gated'");
    expect(forbidden.message).toContain(`accept its licence on ${hub.endpoint}/${REPO} with that account`);
    for (const error of [refused, forbidden]) expect(error.message).not.toContain(SECRET);
  });

  it('keeps the generic message for a 403 from the CDN (a signed URL, not the token)', async () => {
    const error = await denied('cdn-denied.bin', token);
    expect(error.message).toBe(`Access denied (HTTP 403) for ${hub.endpoint}/${REPO}/resolve/main/cdn-denied.bin: the file may be gated or private`);
  });

  it('refuses an HF_TOKEN that no header can carry, without quoting it or sending anything', async () => {
    process.env.HF_TOKEN = `${SECRET} ${SECRET}`;
    const error = (await pullModel(storeFor('lfs.bin'), 'gated').catch((e: unknown) => e)) as StoreError;
    expect(error.code).toBe('invalid_hf_token');
    expect(error.message).toContain('HF_TOKEN does not hold a Hugging Face token');
    expect(error.message).not.toContain(SECRET);
    expect(hub.requests).toHaveLength(0);
  });

  it('reads a token file trimmed, and says why one cannot be used without showing its content', async () => {
    const file = path.join(home, 'token');
    await writeFile(file, `\n  ${SECRET}\r\n`);
    expect(await readHubTokenFile(file)).toEqual({ token: SECRET, from: `--hf-token-file ${file}` });

    const reasons: Array<[string | Buffer, string]> = [
      ['   \n', 'the file is empty'],
      [`${SECRET}\nsecond line ${SECRET}`, 'does not hold a Hugging Face token'],
      [Buffer.alloc(5000, 'a'), 'larger than 4096 bytes'],
    ];
    for (const [content, reason] of reasons) {
      await writeFile(file, content);
      const error = (await readHubTokenFile(file).catch((e: unknown) => e)) as StoreError;
      expect(error.code).toBe('invalid_hf_token');
      expect(error.message).toContain(reason);
      expect(error.message).not.toContain(SECRET);
      expect(error.message).not.toContain('aaaa');
    }
    await expect(readHubTokenFile(path.join(home, 'missing'))).rejects.toThrow(`--hf-token-file ${path.join(home, 'missing')}: cannot read the file (ENOENT)`);
    await expect(readHubTokenFile(home)).rejects.toThrow(`--hf-token-file ${home}: cannot read the file (EISDIR)`);
  });
});
