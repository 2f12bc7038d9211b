import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, runCli } from '../helpers/cli.js';
import { startMirror, testBytes, writeCatalog, type Mirror } from '../helpers/hf-mirror.js';

/** `lserve pull | list | rm` as a user runs them, against a local hub mirror and a test catalog. */

const REPO = 'test-org/speech';

interface ListedRow {
  id: string;
  kind: string;
  backend: string;
  source: string;
  size_bytes: number | null;
  installed: boolean;
  status: string;
  path: string | null;
  files: Record<string, string>;
}

describe('lserve pull / list / rm', () => {
  let mirror: Mirror;
  let dir: string;
  let home: string;
  let catalog: string;
  let env: NodeJS.ProcessEnv;
  const encoder = testBytes(400_000, 11);
  const tokens = testBytes(2_000, 5);

  beforeAll(async () => {
    mirror = await startMirror();
    dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-cli-store-'));
    home = path.join(dir, 'home');
    await mirror.put(REPO, 'onnx/encoder.onnx', encoder, { linkedEtag: true, redirect: true });
    const tok = await mirror.put(REPO, 'tokens.txt', tokens);
    await mirror.put(REPO, 'stall.onnx', encoder, { stallAfter: 150_000 });
    // Cut off after 100 kB more on the first try and on both retries (each resuming) of one pull: 300 kB kept.
    await mirror.put(REPO, 'cut.onnx', encoder, { cutAfter: 100_000, cutTimes: 3 });
    catalog = await writeCatalog(dir, [
      {
        id: 'tiny-asr',
        kind: 'asr',
        backend: 'onnx',
        description: 'tiny test ASR',
        aliases: ['tiny'],
        owned_by: 'test',
        license: 'mit',
        files: { encoder: { repo: REPO, path: 'onnx/encoder.onnx' }, tokens: { repo: REPO, path: 'tokens.txt', sha256: tok.sha256, size: tok.size } },
        defaults: { sample_rate: 16000 },
      },
      {
        id: 'tiny-tts',
        kind: 'tts',
        backend: 'onnx',
        description: 'never pulled',
        owned_by: 'test',
        license: 'mit',
        files: { model: { repo: REPO, path: 'tts.onnx', size: 1234 } },
      },
      {
        id: 'cut-off',
        kind: 'asr',
        backend: 'onnx',
        description: 'connection cut midway',
        owned_by: 'test',
        license: 'mit',
        files: { model: { repo: REPO, path: 'cut.onnx', size: encoder.length } },
      },
      {
        id: 'stalling',
        kind: 'asr',
        backend: 'onnx',
        description: 'server stalls midway',
        owned_by: 'test',
        license: 'mit',
        approx_size: 5_000_000,
        files: { model: { repo: REPO, path: 'stall.onnx' } },
      },
    ]);
    env = { HF_ENDPOINT: mirror.endpoint, LSERVE_HOME: home, LSERVE_CATALOG: catalog };
  });
  afterAll(async () => {
    await mirror.close();
    await rm(dir, { recursive: true, force: true });
  });

  const listJson = async (...args: string[]): Promise<ListedRow[]> => {
    const result = await runCli(['list', '--json', ...args], { env });
    expect(result.code).toBe(0);
    return JSON.parse(result.stdout) as ListedRow[];
  };

  it('pulls a catalog model by alias with plain progress lines when piped', async () => {
    const result = await runCli(['pull', 'tiny'], { env });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('Downloading encoder.onnx (400 kB)');
    expect(result.stdout).toMatch(/encoder\.onnx +\d+% +[\d.]+ kB\/400 kB/);
    expect(result.stdout).toContain('encoder.onnx  done  400 kB  sha256 verified (hub ETag)');
    expect(result.stdout).toContain('tokens.txt  done  2.0 kB  sha256 verified');
    expect(result.stdout).toContain(`Pulled tiny-asr (asr, 402 kB) into ${path.join(home, 'models', 'tiny-asr')}`);
    expect(result.stdout).not.toMatch(/\x1b\[/); // no escape codes in a pipe

    const again = await runCli(['pull', 'tiny-asr'], { env });
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('tiny-asr is already installed');
  });

  it('lists installed models as JSON and as an aligned table, and the catalog with --all', async () => {
    const installed = await listJson();
    const row = installed.find((r) => r.id === 'tiny-asr');
    expect(row).toMatchObject({
      kind: 'asr',
      backend: 'onnx',
      source: 'catalog',
      size_bytes: encoder.length + tokens.length,
      installed: true,
      status: 'installed',
      path: path.join(home, 'models', 'tiny-asr'),
      files: { encoder: path.join(home, 'models', 'tiny-asr', 'encoder.onnx'), tokens: path.join(home, 'models', 'tiny-asr', 'tokens.txt') },
    });
    expect(installed.some((r) => r.id === 'tiny-tts')).toBe(false);

    const all = await listJson('--all');
    expect(all.find((r) => r.id === 'tiny-tts')).toMatchObject({ installed: false, status: 'not pulled', size_bytes: 1234, size_exact: true, path: null });
    // A file without an exact size: the entry's estimate, marked as one.
    expect(all.find((r) => r.id === 'stalling')).toMatchObject({ size_bytes: 5_000_000, size_exact: false });

    const table = await runCli(['list', '--all'], { env });
    expect(table.code).toBe(0);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^ID +KIND +BACKEND +SIZE +SOURCE +LICENSE +STATUS$/);
    expect(lines.find((l) => l.startsWith('tiny-tts'))).toMatch(/tiny-tts +tts +onnx +1\.2 kB +catalog +mit +not pulled/);
    expect(lines.find((l) => l.startsWith('tiny-asr'))).toMatch(/tiny-asr \* +asr +onnx +402 kB +catalog +mit +installed/);
    expect(lines.find((l) => l.startsWith('stalling'))).toMatch(/stalling +asr +onnx +~5\.0 MB +catalog/);
    // The last line explains the default marker; above it the columns line up: STATUS starts at the same offset on every line.
    expect(lines.at(-1)).toMatch(/^\* the default of its kind/);
    const offsets = new Set(lines.slice(0, -1).map((l) => l.search(/(STATUS|installed|not pulled|bundled)$/)));
    expect(offsets.size).toBe(1);
  });

  it('honours --catalog as well as LSERVE_CATALOG', async () => {
    const result = await runCli(['--catalog', catalog, 'list', '--all', '--json'], { env: { HF_ENDPOINT: mirror.endpoint, LSERVE_HOME: home } });
    expect(result.code).toBe(0);
    expect((JSON.parse(result.stdout) as ListedRow[]).map((r) => r.id)).toContain('tiny-tts');
  });

  it('removes models, and fails for ones that are not installed', async () => {
    const removed = await runCli(['rm', 'tiny-asr'], { env });
    expect(removed.code).toBe(0);
    expect(removed.stdout).toContain('Removed tiny-asr');
    expect(existsSync(path.join(home, 'models', 'tiny-asr'))).toBe(false);
    expect((await listJson()).some((r) => r.id === 'tiny-asr')).toBe(false);

    const again = await runCli(['rm', 'tiny-asr'], { env });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("'tiny-asr' is not installed");
  });

  it('rm of a model never installed is an error, for a catalog id (even with an empty staging directory left behind) and for an unknown name', async () => {
    // What a failed pull of an older version left: an empty models/.partial/<id>/.
    await mkdir(path.join(home, 'models', '.partial', 'tiny-tts'), { recursive: true });
    for (const name of ['tiny-tts', 'no-such-model']) {
      const result = await runCli(['rm', name], { env });
      expect(result.code, name).toBe(1);
      expect(result.stdout, name).toBe('');
      expect(result.stderr, name).toBe(`lserve: '${name}' is not installed (run \`lserve list\` to see installed models)\n`);
    }
    expect(existsSync(path.join(home, 'models', '.partial', 'tiny-tts'))).toBe(false);
  });

  it('registers a local file with --kind and unregisters it without deleting it', async () => {
    const file = path.join(dir, 'My-Chat.gguf');
    await writeFile(file, tokens);
    const missingKind = await runCli(['pull', file], { env });
    expect(missingKind.code).toBe(2);
    expect(missingKind.stderr).toContain('--kind is required');

    const result = await runCli(['pull', file, '--kind', 'chat', '--id', 'mine'], { env });
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('Registered mine (chat, llama');
    expect(await listJson()).toContainEqual(expect.objectContaining({ id: 'mine', source: 'local', path: file, installed: true }));

    const removed = await runCli(['rm', 'mine'], { env });
    expect(removed.stdout).toContain('Unregistered mine');
    expect(existsSync(file)).toBe(true);
  });

  it('stores --ctx-size for your own file as its context_size, and refuses it for catalog models', async () => {
    const file = path.join(dir, 'embedder.gguf');
    await writeFile(file, tokens);
    const result = await runCli(['pull', file, '--kind', 'embedding', '--id', 'sized', '--ctx-size', '2048'], { env });
    expect(result.code).toBe(0);
    const manifest = JSON.parse(await readFile(path.join(home, 'models', 'sized', 'manifest.json'), 'utf8')) as { entry: { defaults: unknown } };
    expect(manifest.entry.defaults).toEqual({ context_size: 2048 });
    expect((await runCli(['pull', file, '--kind', 'embedding', '--id', 'bad', '--ctx-size', 'big'], { env })).code).toBe(2);
    const catalogModel = await runCli(['pull', 'tiny-asr', '--ctx-size', '2048'], { env });
    expect(catalogModel.code).toBe(2);
    expect(catalogModel.stderr).toContain('--ctx-size and --default apply only to your own files');
    expect((await runCli(['pull', 'tiny-asr', '--default', 'steps=2'], { env })).code).toBe(2);
    const textDefault = await runCli(['pull', file, '--kind', 'embedding', '--id', 'bad', '--default', 'steps=2'], { env });
    expect(textDefault.code).toBe(2);
    expect(textDefault.stderr).toContain('--default applies to image models (--kind image)');
    await runCli(['rm', 'sized'], { env });
  });

  it('pulls a URL as a user model', async () => {
    const url = `${mirror.endpoint}/${REPO}/resolve/main/tokens.txt`;
    const result = await runCli(['pull', url, '--kind', 'tts', '--id', 'from-url', '--quiet'], { env });
    expect(result.code).toBe(0);
    expect(result.stdout).toBe('');
    expect(await listJson()).toContainEqual(expect.objectContaining({ id: 'from-url', kind: 'tts', source: 'url', size_bytes: tokens.length }));
  });

  it('exits 1 for an unknown model (with suggestions), as every command does; 2 for bad flags and a bad --kind', async () => {
    const unknown = await runCli(['pull', 'tiny-as'], { env });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("Unknown model 'tiny-as'. Did you mean 'tiny-asr'");
    expect((await runCli(['list', '--bogus'], { env })).code).toBe(2);
    expect((await runCli(['pull'], { env })).code).toBe(2);
    expect((await runCli(['pull', 'tiny-asr', '--kind', 'chat'], { env })).code).toBe(2);
    const badKind = await runCli(['pull', `${mirror.endpoint}/x.gguf`, '--kind', 'poem'], { env });
    expect(badKind.code).toBe(2);
    expect(badKind.stderr).toContain('--kind must be one of');
  });

  it('exits 1 saying it could not connect, naming the URL and HF_ENDPOINT, when the endpoint refuses; it promises no resume and leaves no staging directory', async () => {
    const closed = http.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const { port } = closed.address() as AddressInfo;
    await new Promise<void>((r) => closed.close(() => r()));
    const result = await runCli(['pull', 'tiny-tts'], { env: { ...env, HF_ENDPOINT: `http://127.0.0.1:${port}` } });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`lserve: Could not connect to http://127.0.0.1:${port}: connection refused (ECONNREFUSED)`);
    expect(result.stderr).toContain(`http://127.0.0.1:${port}/${REPO}/resolve/main/tts.onnx`);
    expect(result.stderr).toContain(`Models are downloaded from http://127.0.0.1:${port} (HF_ENDPOINT)`);
    expect(result.stderr).not.toMatch(/interrupted|resume/i);
    expect(existsSync(path.join(home, 'models', '.partial', 'tiny-tts'))).toBe(false);
  });

  it('a download cut off midway keeps its bytes and says that a rerun resumes; rm then removes the partial download', async () => {
    const result = await runCli(['pull', 'cut-off'], { env });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^lserve: Download of cut\.onnx (from .* was interrupted \(.*\)|ended early at 300 kB of 400 kB)\. The 300 kB downloaded so far are kept: run the pull again to resume\.$/m);
    expect(await sizeOf(path.join(home, 'models', '.partial', 'cut-off', 'cut.onnx.part'))).toBe(300_000);
    const removed = await runCli(['rm', 'cut-off'], { env });
    expect(removed.code).toBe(0);
    expect(removed.stdout).toBe('Removed the partial download of cut-off (300 kB); it was never installed\n');
    expect(existsSync(path.join(home, 'models', '.partial', 'cut-off'))).toBe(false);
  });

  /** Bytes the mirror sends of stall.onnx before it stalls with the connection open. */
  const STALL_AFTER = 150_000;
  const stallingPartial = () => path.join(home, 'models', '.partial', 'stalling');
  const stallingPart = () => path.join(stallingPartial(), 'stall.onnx.part');

  interface RunningPull {
    child: ChildProcess;
    output(): { stdout: string; stderr: string };
    exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  }

  /**
   * Starts `lserve pull stalling` from scratch and resolves once it is parked on the stalled
   * connection: its first progress line is out and all STALL_AFTER bytes are in the .part file.
   * The progress line alone is not enough: it is printed as a chunk passes through the hashing
   * transform, before the file stream has written it, and an abort drops chunks still queued for
   * the file, so the .part can still be empty or short then.
   */
  const startStallingPull = async (): Promise<RunningPull> => {
    await rm(stallingPartial(), { recursive: true, force: true });
    const child = spawn(process.execPath, [BIN, 'pull', 'stalling'], { env: { ...process.env, NO_COLOR: '1', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
    const pull: RunningPull = { child, output: () => ({ stdout, stderr }), exited };
    let gone = false;
    void exited.then(() => (gone = true));
    try {
      const deadline = Date.now() + 20_000;
      for (;;) {
        if (gone) throw new Error(`the pull exited before stalling:\n${stdout}${stderr}`);
        if (/stall\.onnx +\d+%/.test(stdout) && (await sizeOf(stallingPart())) === STALL_AFTER) return pull;
        if (Date.now() > deadline) throw new Error(`the pull did not stall with ${STALL_AFTER} bytes on disk:\n${stdout}${stderr}`);
        await sleep(20);
      }
    } catch (error) {
      child.kill('SIGKILL');
      await exited;
      throw error;
    }
  };

  /** Sends one SIGINT (a single Ctrl-C) and waits for the pull to exit. */
  const interrupt = async (pull: RunningPull) => {
    // Exactly once: a second SIGINT reaching the CLI after its handler ran kills it by signal (code null).
    pull.child.kill('SIGINT');
    return pull.exited;
  };

  it('on Ctrl-C keeps the partial download, says a rerun resumes, and exits 130', async () => {
    const pull = await startStallingPull();
    expect(await interrupt(pull)).toEqual({ code: 130, signal: null });
    expect(pull.output().stderr).toMatch(/Interrupted\. The 150 kB downloaded so far are kept; run `lserve pull stalling` again to resume\./);
    expect(await sizeOf(stallingPart())).toBe(STALL_AFTER);
    const all = await listJson('--all');
    expect(all.find((r) => r.id === 'stalling')).toMatchObject({ installed: false, status: 'partial' });
  });

  it('on SIGTERM (docker stop, a service manager) stops the same way, releasing its lock, and exits 143', async () => {
    const pull = await startStallingPull();
    expect(existsSync(path.join(stallingPartial(), '.lock'))).toBe(true);
    pull.child.kill('SIGTERM');
    expect(await pull.exited).toEqual({ code: 143, signal: null });
    expect(pull.output().stderr).toMatch(/Interrupted.*run `lserve pull stalling` again to resume/);
    expect(await sizeOf(stallingPart())).toBe(STALL_AFTER);
    // Released, not left for the next pull to find stale.
    expect(existsSync(path.join(stallingPartial(), '.lock'))).toBe(false);
  });

  it('refuses to rm a model while a pull of it runs, and removes it once the pull stopped', async () => {
    const pull = await startStallingPull();
    let exit: Awaited<RunningPull['exited']> | undefined;
    try {
      const refused = await runCli(['rm', 'stalling'], { env });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain(`a pull of 'stalling' is running (pid ${pull.child.pid})`);
      expect(refused.stderr).toContain('then run `lserve rm stalling` again');
      expect(refused.stdout).toBe('');
      expect(await sizeOf(stallingPart())).toBe(STALL_AFTER);
    } finally {
      // Stop the pull even when an assertion above failed, so no process outlives the test.
      exit = await interrupt(pull);
    }
    expect(exit).toEqual({ code: 130, signal: null });

    const removed = await runCli(['rm', 'stalling'], { env });
    expect(removed.stderr).toBe('');
    expect(removed.code).toBe(0);
    expect(removed.stdout).toBe('Removed the partial download of stalling (150 kB); it was never installed\n');
    expect(existsSync(stallingPartial())).toBe(false);
  });
});

/** A file's size, 0 while it does not exist yet. */
async function sizeOf(file: string): Promise<number> {
  try {
    return (await stat(file)).size;
  } catch {
    return 0;
  }
}
