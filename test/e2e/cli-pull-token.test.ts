import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { BIN, runCli } from '../helpers/cli.js';
import { startMirror, testBytes, writeCatalog, type Mirror } from '../helpers/hf-mirror.js';

/**
 * `lserve pull` and `lserve serve` with a Hugging Face token for gated and
 * private models (`--hf-token-file`, HF_TOKEN), against a local hub and a
 * "CDN" on another origin, as a user runs them.
 */

const REPO = 'test-org/gated';
const FILE_TOKEN = 'hf_FromTheTokenFile';
const ENV_TOKEN = 'hf_FromTheEnvironment';

describe('pull and serve with a Hugging Face token', () => {
  let hub: Mirror;
  let cdn: Mirror;
  let dir: string;
  let tokenFile: string;
  let env: NodeJS.ProcessEnv;

  beforeAll(async () => {
    hub = await startMirror();
    cdn = await startMirror();
    dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-cli-token-'));
    const data = testBytes(20_000, 4);
    await hub.put(REPO, 'model.onnx', data, { linkedEtag: true, redirect: cdn.endpoint });
    await cdn.put(REPO, 'model.onnx', data);
    await hub.put(REPO, 'private.onnx', data, { status: 401 });
    await hub.put(REPO, 'forbidden.onnx', data, { status: 403 });
    const model = (id: string, file: string) => ({ id, kind: 'asr', backend: 'onnx', description: id, owned_by: 'test', license: 'other', files: { model: { repo: REPO, path: file } } });
    const catalog = await writeCatalog(dir, [model('gated', 'model.onnx'), model('served', 'model.onnx'), model('private', 'private.onnx'), model('forbidden', 'forbidden.onnx')]);
    tokenFile = path.join(dir, 'token');
    await writeFile(tokenFile, `  ${FILE_TOKEN}\n`);
    // HF_TOKEN empty: whatever the developer's shell has must not take part.
    env = { HF_ENDPOINT: hub.endpoint, LSERVE_HOME: path.join(dir, 'home'), LSERVE_CATALOG: catalog, HF_TOKEN: '' };
  });
  afterAll(async () => {
    await hub.close();
    await cdn.close();
    await rm(dir, { recursive: true, force: true });
  });
  beforeEach(() => {
    hub.requests.length = 0;
    cdn.requests.length = 0;
  });

  it('sends the --hf-token-file token (trimmed; it wins over HF_TOKEN) to the hub, and not to the CDN', async () => {
    const result = await runCli(['pull', 'gated', '--hf-token-file', tokenFile, '--quiet'], { env: { ...env, HF_TOKEN: ENV_TOKEN } });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(hub.requests.map((r) => r.authorization)).toEqual([`Bearer ${FILE_TOKEN}`]);
    expect(cdn.requests.map((r) => [r.status, r.authorization])).toEqual([[200, undefined]]);
  });

  it('exits 2 before any download when the token file cannot be used, never showing its content', async () => {
    const missing = path.join(dir, 'no-such-token');
    const unreadable = await runCli(['pull', 'private', '--hf-token-file', missing], { env });
    expect(unreadable.code).toBe(2);
    expect(unreadable.stderr).toBe(`lserve: --hf-token-file ${missing}: cannot read the file (ENOENT)\n`);

    const wrong = path.join(dir, 'wrong-token');
    await writeFile(wrong, `${FILE_TOKEN}\n${ENV_TOKEN}\n`);
    const invalid = await runCli(['pull', 'private', '--hf-token-file', wrong], { env });
    expect(invalid.code).toBe(2);
    expect(invalid.stderr).toContain(`--hf-token-file ${wrong} does not hold a Hugging Face token`);
    expect(invalid.stderr).not.toContain(FILE_TOKEN);
    expect(hub.requests).toHaveLength(0);
  });

  it('explains a 401 or 403: which model, how to give a token, where to accept the licence; never the token', async () => {
    const none = await runCli(['pull', 'private'], { env });
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("'private' is gated or private, and no Hugging Face token was given");
    expect(none.stderr).toContain(`accept its licence on ${hub.endpoint}/${REPO} `);
    expect(none.stderr).toContain('set HF_TOKEN, or pass --hf-token-file <path>');

    const forbidden = await runCli(['--verbose', 'pull', 'forbidden'], { env: { ...env, HF_TOKEN: ENV_TOKEN } });
    expect(forbidden.code).toBe(1);
    expect(hub.requests.at(-1)!.authorization).toBe(`Bearer ${ENV_TOKEN}`);
    expect(forbidden.stderr).toContain("the account of the Hugging Face token from HF_TOKEN has no access to 'forbidden'");
    expect(forbidden.stdout + forbidden.stderr).not.toContain(ENV_TOKEN);
  });

  it('serve --hf-token-file: an unreadable file exits 2; a readable one is used by POST /v1/models/pull', async () => {
    const missing = await runCli(['serve', '--port', '0', '--hf-token-file', path.join(dir, 'absent')], { env });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('cannot read the file (ENOENT)');

    const child = spawn(process.execPath, [BIN, 'serve', '--port', '0', '--no-ui', '--hf-token-file', tokenFile], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    let stderr = '';
    try {
      const base = await new Promise<string>((resolve, reject) => {
        child.stderr.on('data', (d: Buffer) => {
          stderr += d;
          const url = /lserve listening on (http:\/\/\S+)\/v1/.exec(stderr)?.[1];
          if (url) resolve(url);
        });
        void exited.then((code) => reject(new Error(`serve exited (${code}):\n${stderr}`)));
      });
      const res = await fetch(`${base}/v1/models/pull`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'served', stream: false }) });
      expect(res.status).toBe(200);
      expect(await res.json()).toMatchObject({ id: 'served', already_installed: false });
      expect(hub.requests.map((r) => r.authorization)).toEqual([`Bearer ${FILE_TOKEN}`]);
      expect(cdn.requests.map((r) => r.authorization)).toEqual([undefined]);
      expect(stderr).not.toContain(FILE_TOKEN);
    } finally {
      child.kill('SIGTERM');
      await exited;
    }
  });
});
