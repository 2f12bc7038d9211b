import { existsSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readdir, realpath, rename, rm, stat, symlink, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { writeCatalog } from '../helpers/hf-mirror.js';
import { WHISPER_FILES, tinyWhisperModel } from '../fixtures/onnx/whisper.js';

/**
 * `lserve pull ./dir --kind K --id NAME` registers a model directory in place,
 * matched against the layouts of the catalog's entries of that kind; here the
 * synthetic Whisper folder (the onnx-community/whisper-base layout) against the
 * real models.json, and the ways a directory is refused.
 */

interface ListedRow {
  id: string;
  kind: string;
  backend: string;
  source: string;
  size_bytes: number;
  installed: boolean;
  files: Record<string, string>;
}

let tmp: string;
let home: string;
let whisper: string;
let env: NodeJS.ProcessEnv;

/** A fresh copy of the synthetic Whisper folder, to alter. */
async function whisperCopy(name: string): Promise<string> {
  const dir = path.join(tmp, name);
  await cp(whisper, dir, { recursive: true });
  return dir;
}

async function listed(): Promise<ListedRow[]> {
  const result = await runCli(['list', '--json'], { env });
  expect(result.code).toBe(0);
  return JSON.parse(result.stdout) as ListedRow[];
}

beforeAll(async () => {
  tmp = await realpath(await mkdtemp(path.join(os.tmpdir(), 'lserve-pull-dir-')));
  home = path.join(tmp, 'home');
  whisper = await tinyWhisperModel();
  env = { LSERVE_HOME: home, LSERVE_CATALOG: '' };
});

afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe('lserve pull <directory>', () => {
  it('registers a Whisper export directory in place, with every role of the whisper-base layout', async () => {
    const dir = await whisperCopy('my-whisper-export');
    const result = await runCli(['pull', dir, '--kind', 'asr', '--id', 'whisper-test'], { env });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(new RegExp(`^Registered whisper-test \\(asr, onnx, [\\d.]+ MB\\): ${dir}\\n`));
    // Every onnx-community Whisper export has this layout; the catalog's first (whisper-tiny) names it.
    expect(result.stdout).toContain('Layout: whisper-tiny (as in onnx-community/whisper-tiny)');
    expect(result.stdout).toMatch(/ {2}decoder +onnx\/decoder_model_merged\.onnx\n/);
    expect(result.stdout).toContain('The files are used in place: keep the directory where it is.');

    const row = (await listed()).find((r) => r.id === 'whisper-test');
    const files = Object.fromEntries(Object.entries(WHISPER_FILES).map(([role, rel]) => [role, path.join(dir, rel)]));
    let size = 0;
    for (const file of Object.values(files)) size += (await stat(file)).size;
    expect(row).toMatchObject({ kind: 'asr', backend: 'onnx', source: 'local', installed: true, size_bytes: size });
    expect(row!.files).toEqual(files);
    expect(Object.keys(row!.files).sort()).toEqual(['config', 'decoder', 'encoder', 'generation_config', 'preprocessor_config', 'tokenizer']);
    // Referenced, not copied: the store holds only the manifest.
    expect(await readdir(path.join(home, 'models', 'whisper-test'))).toEqual(['manifest.json']);
  });

  it('derives the id from the directory name, and accepts symlinks that stay inside the directory', async () => {
    const dir = await whisperCopy('Whisper Tiny (export)');
    await mkdir(path.join(dir, 'blobs'));
    await rename(path.join(dir, 'tokenizer.json'), path.join(dir, 'blobs', 'tok'));
    await symlink(path.join('blobs', 'tok'), path.join(dir, 'tokenizer.json'));
    const result = await runCli(['pull', dir, '--kind', 'asr', '--quiet'], { env });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const row = (await listed()).find((r) => r.id === 'whisper-tiny-export-');
    expect(row?.files.tokenizer).toBe(path.join(dir, 'blobs', 'tok'));
  });

  it('picks the layout that uses the most of the directory: external weights make it a large-v3-turbo export', async () => {
    const dir = await whisperCopy('large-export');
    await writeFile(path.join(dir, 'onnx/encoder_model.onnx_data'), Buffer.alloc(16));
    const result = await runCli(['pull', dir, '--kind', 'asr', '--id', 'large-test'], { env });
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('Layout: whisper-large-v3-turbo (as in onnx-community/whisper-large-v3-turbo)');
    expect((await listed()).find((r) => r.id === 'large-test')!.files).toHaveProperty('encoder_data', path.join(dir, 'onnx/encoder_model.onnx_data'));
    await runCli(['rm', 'large-test'], { env });
  });

  it('says which files of the closest layout are missing', async () => {
    const dir = await whisperCopy('incomplete');
    await rm(path.join(dir, WHISPER_FILES.decoder));
    await rm(path.join(dir, WHISPER_FILES.generation_config));
    const result = await runCli(['pull', dir, '--kind', 'asr', '--id', 'incomplete'], { env });
    expect(result.code).toBe(2);
    expect(result.stdout).toBe('');
    expect(result.stderr).toContain(`${dir} does not have the layout of any asr model in the catalog`);
    expect(result.stderr).toContain('Closest: whisper-tiny (onnx-community/whisper-tiny), which needs onnx/decoder_model_merged.onnx, generation_config.json (missing)');
    expect((await listed()).some((r) => r.id === 'incomplete')).toBe(false);
  });

  it('refuses files that resolve outside the directory through a symlink', async () => {
    const outside = path.join(tmp, 'secret.json');
    await writeFile(outside, '{"not":"a tokenizer"}');
    const dir = await whisperCopy('escaping-file');
    await rm(path.join(dir, 'tokenizer.json'));
    await symlink(outside, path.join(dir, 'tokenizer.json'));
    const file = await runCli(['pull', dir, '--kind', 'asr', '--id', 'escaping-file'], { env });
    expect(file.code).toBe(2);
    expect(file.stderr).toContain(`${path.join(dir, 'tokenizer.json')} resolves to ${outside}, outside the directory; refusing to register`);

    // A whole subfolder linked from elsewhere is refused the same way.
    const linkedDir = await whisperCopy('escaping-folder');
    await rename(path.join(linkedDir, 'onnx'), path.join(tmp, 'elsewhere-onnx'));
    await symlink(path.join(tmp, 'elsewhere-onnx'), path.join(linkedDir, 'onnx'));
    const folder = await runCli(['pull', linkedDir, '--kind', 'asr', '--id', 'escaping-folder'], { env });
    expect(folder.code).toBe(2);
    expect(folder.stderr).toContain('outside the directory; refusing to register');
    const ids = (await listed()).map((r) => r.id);
    expect(ids).not.toContain('escaping-file');
    expect(ids).not.toContain('escaping-folder');
  });

  it('refuses a catalog layout whose paths leave the directory', async () => {
    const dir = await whisperCopy('dotdot');
    await writeFile(path.join(tmp, 'outside.onnx'), 'x');
    const catalog = await writeCatalog(await mkdtemp(path.join(tmp, 'catalog-')), [
      {
        id: 'sneaky-asr',
        kind: 'asr',
        backend: 'onnx',
        description: 'a layout with a path out of the folder',
        owned_by: 'test',
        license: 'mit',
        files: { tokenizer: { repo: 'test/sneaky', path: 'tokenizer.json' }, encoder: { repo: 'test/sneaky', path: '../outside.onnx' } },
      },
    ]);
    const result = await runCli(['pull', dir, '--kind', 'asr', '--id', 'dotdot'], { env: { ...env, LSERVE_CATALOG: catalog } });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("sneaky-asr's file '../outside.onnx' lies outside the directory");
    expect(existsSync(path.join(home, 'models', 'dotdot'))).toBe(false);
  });

  it('rejects --ctx-size, kinds without a directory layout, and catalog ids', async () => {
    const ctx = await runCli(['pull', whisper, '--kind', 'asr', '--id', 'x1', '--ctx-size', '2048'], { env });
    expect(ctx.code).toBe(2);
    expect(ctx.stderr).toContain('--ctx-size applies to a single-file (GGUF) text model, not to a model directory');

    const chat = await runCli(['pull', whisper, '--kind', 'chat', '--id', 'x2'], { env });
    expect(chat.code).toBe(2);
    expect(chat.stderr).toContain('No catalog model of kind chat is a multi-file export');

    const backend = await runCli(['pull', whisper, '--kind', 'asr', '--backend', 'llama', '--id', 'x3'], { env });
    expect(backend.code).toBe(2);
    expect(backend.stderr).toContain('No catalog model of kind asr (backend llama) is a multi-file export');

    const taken = await runCli(['pull', whisper, '--kind', 'asr', '--id', 'whisper-base'], { env });
    expect(taken.code).toBe(2);
    expect(taken.stderr).toContain("'whisper-base' is the name of catalog model 'whisper-base'; choose another id with --id");

    const noKind = await runCli(['pull', whisper], { env });
    expect(noKind.code).toBe(2);
    expect(noKind.stderr).toContain('--kind is required');

    const ids = (await listed()).map((r) => r.id);
    for (const id of ['x1', 'x2', 'x3', 'whisper-base']) expect(ids).not.toContain(id);
  });
});
