import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, readdir, realpath, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ModelList } from '../../src/api/models.js';
import { runCli } from '../helpers/cli.js';
import { startMirror, type Mirror } from '../helpers/hf-mirror.js';
import { startTestServer } from '../helpers/server.js';
import { writeProjectorGguf, writeTextModelGguf } from '../fixtures/gguf/mmproj.js';

/**
 * A GGUF chat model with its multimodal projector, as a user registers one:
 * `lserve pull ./model.gguf --kind chat --mmproj ./mmproj.gguf`, a projector
 * found beside the model, a projector with a URL, and the ways a pairing is
 * refused; then what `lserve list` and GET /v1/models say the model takes.
 * The files are GGUF headers with the metadata llama.cpp's converter writes
 * (test/fixtures/gguf/mmproj.ts): pairing reads headers, it loads nothing.
 */

interface ListedRow {
  id: string;
  kind: string;
  installed: boolean;
  files: Record<string, string>;
  input_modalities?: string[];
}

let tmp: string;
let home: string;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  tmp = await realpath(await mkdtemp(path.join(os.tmpdir(), 'lserve-pull-mmproj-')));
  home = path.join(tmp, 'home');
  env = { LSERVE_HOME: home, LSERVE_CATALOG: '' };
});

afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

/** A folder holding a text model of width 2048 and, named in `projectors`, projectors for it. */
async function folder(name: string, model: string, projectors: Record<string, Parameters<typeof writeProjectorGguf>[1]> = {}): Promise<string> {
  const dir = path.join(tmp, name);
  await mkdir(dir, { recursive: true });
  writeTextModelGguf(path.join(dir, model), 'qwen2vl', 2048);
  for (const [file, spec] of Object.entries(projectors)) writeProjectorGguf(path.join(dir, file), spec);
  return dir;
}

async function listed(...args: string[]): Promise<ListedRow[]> {
  const result = await runCli(['list', '--json', ...args], { env });
  expect(result.code).toBe(0);
  return JSON.parse(result.stdout) as ListedRow[];
}

describe('lserve pull <file.gguf> --mmproj', () => {
  it('registers the projector beside the model as role mmproj, with what it takes read from its header', async () => {
    const dir = await folder('explicit', 'vl-model-Q4_K_M.gguf', { 'proj-any-name.gguf': { vision: true, audio: true, width: 2048 } });
    const model = path.join(dir, 'vl-model-Q4_K_M.gguf');
    const projector = path.join(dir, 'proj-any-name.gguf');
    const result = await runCli(['pull', model, '--kind', 'chat', '--mmproj', projector], { env });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(`Registered vl-model-q4_k_m (chat, llama, `);
    expect(result.stdout).toContain(`  Projector: ${projector} (takes text, image, audio)`);
    expect(result.stdout).toContain('The files are used in place: keep them where they are.');

    const manifest = JSON.parse(await readFile(path.join(home, 'models', 'vl-model-q4_k_m', 'manifest.json'), 'utf8')) as {
      entry: { input: string[]; files: Record<string, unknown> };
      files: Record<string, { path: string }>;
    };
    expect(manifest.entry.input).toEqual(['image', 'audio']);
    expect(Object.keys(manifest.entry.files)).toEqual(['model', 'mmproj']);
    expect(manifest.files.mmproj!.path).toBe(projector);

    const row = (await listed()).find((r) => r.id === 'vl-model-q4_k_m');
    expect(row).toMatchObject({ kind: 'chat', files: { model, mmproj: projector }, input_modalities: ['text', 'image', 'audio'] });
    const table = await runCli(['list'], { env });
    expect(table.stdout).toMatch(/^vl-model-q4_k_m \* +chat\+image\+audio +llama /m);
  });

  it('refuses, as usage errors, a text model, a file that is not GGUF, a missing file and a projector for another width', async () => {
    const dir = await folder('refused', 'model.gguf', { 'mmproj-wide.gguf': { vision: true, width: 4096 } });
    const model = path.join(dir, 'model.gguf');
    writeTextModelGguf(path.join(dir, 'another-text-model.gguf'), 'llama', 2048);
    await writeFile(path.join(dir, 'notes.gguf'), 'not a gguf at all');
    const cases: [string, string][] = [
      [path.join(dir, 'another-text-model.gguf'), `${path.join(dir, 'another-text-model.gguf')} is a 'llama' model, not a multimodal projector`],
      [path.join(dir, 'notes.gguf'), `${path.join(dir, 'notes.gguf')} is not a GGUF file`],
      [path.join(dir, 'missing.gguf'), `No such file: ${path.join(dir, 'missing.gguf')}`],
      [path.join(dir, 'mmproj-wide.gguf'), "mmproj-wide.gguf was made for a text model of width 4096, and this model's width is 2048"],
    ];
    for (const [projector, message] of cases) {
      const result = await runCli(['pull', model, '--kind', 'chat', '--id', 'refused', '--mmproj', projector], { env });
      expect({ projector, code: result.code }).toEqual({ projector, code: 2 });
      expect(result.stderr).toContain(message);
    }
    expect((await listed()).some((r) => r.id === 'refused')).toBe(false);
  });

  it('refuses --mmproj for another kind, a directory, a catalog model, and a path beside a URL or a URL beside a path', async () => {
    const dir = await folder('misused', 'model.gguf', { 'mmproj-model.gguf': { vision: true, width: 2048 } });
    const model = path.join(dir, 'model.gguf');
    const projector = path.join(dir, 'mmproj-model.gguf');
    const cases: [string[], string][] = [
      [[model, '--kind', 'embedding'], '--mmproj applies to a GGUF chat model (--kind chat, backend llama), not to --kind embedding on backend llama'],
      [[model, '--kind', 'chat', '--backend', 'onnx'], '--mmproj applies to a GGUF chat model'],
      [[dir, '--kind', 'chat'], '--mmproj applies to a single GGUF chat model file, not to a model directory'],
      [['ppocr-v4-mobile'], "--mmproj applies only to your own GGUF chat models, not to catalog models: a catalog model's projector comes with it"],
      [['https://example.com/model.gguf', '--kind', 'chat'], '--mmproj beside a URL is the URL of its projector'],
    ];
    for (const [args, message] of cases) {
      const result = await runCli(['pull', ...args, '--mmproj', projector], { env });
      expect({ args, code: result.code }).toEqual({ args, code: 2 });
      expect(result.stderr).toContain(message);
    }
    const noProjector = await runCli(['pull', 'ppocr-v4-mobile', '--no-mmproj'], { env });
    expect(noProjector.code).toBe(2);
    expect(noProjector.stderr).toContain('--no-mmproj applies only to your own GGUF chat models, not to catalog models');
    const urlBesidePath = await runCli(['pull', model, '--kind', 'chat', '--mmproj', 'https://example.com/mmproj.gguf'], { env });
    expect(urlBesidePath.code).toBe(2);
    expect(urlBesidePath.stderr).toContain('--mmproj beside a local file is a local file; download the projector first');
  });
});

describe('a projector found beside the model', () => {
  it('is taken when named like one, saying which and how to choose another or none', async () => {
    const dir = await folder('beside', 'Qwen2-VL-2B-Instruct-Q4_K_M.gguf', {
      'mmproj-Qwen2-VL-2B-Instruct-f16.gguf': { vision: true, width: 2048 },
      'mmproj-Qwen2-VL-2B-Instruct-Q4_K_M.gguf': { vision: true, width: 2048 },
      'mmproj-Qwen2-VL-7B-Instruct-f16.gguf': { vision: true, width: 3584 },
    });
    const model = path.join(dir, 'Qwen2-VL-2B-Instruct-Q4_K_M.gguf');
    const result = await runCli(['pull', model, '--kind', 'chat', '--id', 'found'], { env });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain(
      'Taking the projector mmproj-Qwen2-VL-2B-Instruct-Q4_K_M.gguf: of the 3 beside the model, its name shares the most with the model\'s (also there: mmproj-Qwen2-VL-2B-Instruct-f16.gguf, mmproj-Qwen2-VL-7B-Instruct-f16.gguf).',
    );
    expect(result.stdout).toContain('--mmproj FILE pairs another projector; --no-mmproj registers the model without one (text only).');
    expect(result.stdout).toContain('(takes text, image)');
    expect((await listed()).find((r) => r.id === 'found')).toMatchObject({ files: { mmproj: path.join(dir, 'mmproj-Qwen2-VL-2B-Instruct-Q4_K_M.gguf') }, input_modalities: ['text', 'image'] });

    const plain = await runCli(['pull', model, '--kind', 'chat', '--id', 'text-only', '--no-mmproj'], { env });
    expect(plain.code).toBe(0);
    expect(plain.stdout).not.toContain('projector');
    const row = (await listed()).find((r) => r.id === 'text-only');
    expect(row).toMatchObject({ input_modalities: ['text'] });
    expect(row!.files.mmproj).toBeUndefined();

    // --mmproj names another: the one beside the model is not looked at.
    const chosen = await runCli(['pull', model, '--kind', 'chat', '--id', 'chosen', '--mmproj', path.join(dir, 'mmproj-Qwen2-VL-2B-Instruct-f16.gguf')], { env });
    expect(chosen.code).toBe(0);
    expect(chosen.stdout).not.toContain('Taking the projector');
    expect((await listed()).find((r) => r.id === 'chosen')!.files.mmproj).toBe(path.join(dir, 'mmproj-Qwen2-VL-2B-Instruct-f16.gguf'));
  });

  it('is passed over, saying why, when it is not one for this model; other kinds never look', async () => {
    const dir = await folder('unrelated', 'qwen3-4b.gguf', { 'mmproj-other-model.gguf': { vision: true, width: 4096 } });
    const result = await runCli(['pull', path.join(dir, 'qwen3-4b.gguf'), '--kind', 'chat', '--id', 'unrelated'], { env });
    expect(result.code).toBe(0);
    expect(result.stdout).toContain("Beside the model, passed over: mmproj-other-model.gguf was made for a text model of width 4096, and this model's width is 2048");
    expect(result.stdout).not.toContain('Taking the projector');
    expect((await listed()).find((r) => r.id === 'unrelated')!.files.mmproj).toBeUndefined();

    const embedding = await runCli(['pull', path.join(dir, 'qwen3-4b.gguf'), '--kind', 'embedding', '--id', 'embedder'], { env });
    expect(embedding.code).toBe(0);
    expect(embedding.stdout).not.toContain('projector');
    expect((await listed()).find((r) => r.id === 'embedder')).not.toHaveProperty('input_modalities');
  });
});

describe('lserve pull <url> --mmproj <url>', () => {
  let mirror: Mirror;
  const REPO = 'test-org/vl';

  beforeAll(async () => {
    mirror = await startMirror();
    const dir = await folder('hub', 'VL-Q8_0.gguf', { 'mmproj-VL-f16.gguf': { audio: true, width: 2048 } });
    await mirror.put(REPO, 'VL-Q8_0.gguf', await readFile(path.join(dir, 'VL-Q8_0.gguf')));
    await mirror.put(REPO, 'mmproj-VL-f16.gguf', await readFile(path.join(dir, 'mmproj-VL-f16.gguf')));
    await mirror.put(REPO, 'not-a-projector.gguf', await readFile(path.join(dir, 'VL-Q8_0.gguf')));
  });
  afterAll(async () => {
    await mirror.close();
  });

  it('downloads both files and reads what the model takes from the projector; a file that is none is refused and not kept', async () => {
    const url = (file: string) => `${mirror.endpoint}/${REPO}/resolve/main/${file}`;
    const refused = await runCli(['pull', url('VL-Q8_0.gguf'), '--kind', 'chat', '--id', 'vl-url', '--mmproj', url('not-a-projector.gguf')], { env });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain(`${url('not-a-projector.gguf')} is a 'qwen2vl' model, not a multimodal projector`);
    expect((await listed()).some((r) => r.id === 'vl-url')).toBe(false);
    const staged = path.join(home, 'models', '.partial', 'vl-url');
    expect(existsSync(path.join(staged, 'not-a-projector.gguf'))).toBe(false);
    expect(await readdir(staged)).toContain('VL-Q8_0.gguf'); // the model itself is kept for the next pull

    const result = await runCli(['pull', url('VL-Q8_0.gguf'), '--kind', 'chat', '--id', 'vl-url', '--mmproj', url('mmproj-VL-f16.gguf')], { env });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toContain('  Takes text, audio');
    expect((await listed()).find((r) => r.id === 'vl-url')).toMatchObject({
      files: { model: path.join(home, 'models', 'vl-url', 'VL-Q8_0.gguf'), mmproj: path.join(home, 'models', 'vl-url', 'mmproj-VL-f16.gguf') },
      input_modalities: ['text', 'audio'],
    });
  });
});

describe('GET /v1/models', () => {
  it("gives chat models llama.cpp's architecture.input_modalities, and other kinds none", async () => {
    const server = await startTestServer({ home });
    try {
      const list = (await (await fetch(`${server.url}/v1/models`)).json()) as ModelList;
      const byId = new Map(list.data.map((m) => [m.id, m]));
      expect(byId.get('vl-model-q4_k_m')!.architecture).toEqual({ input_modalities: ['text', 'image', 'audio'], output_modalities: ['text'] });
      expect(byId.get('text-only')!.architecture).toEqual({ input_modalities: ['text'], output_modalities: ['text'] });
      expect(byId.get('embedder')).not.toHaveProperty('architecture');
      const one = (await (await fetch(`${server.url}/v1/models/found`)).json()) as ModelList['data'][number];
      expect(one.architecture?.input_modalities).toEqual(['text', 'image']);
    } finally {
      await server.stop();
    }
  });

  it('lists the catalog\'s vision and audio models with what they take', async () => {
    const all = await runCli(['list', '--all', '--json'], { env });
    const rows = JSON.parse(all.stdout) as ListedRow[];
    expect(rows.find((r) => r.id === 'qwen2.5-omni-3b')).toMatchObject({ installed: false, input_modalities: ['text', 'image', 'audio'] });
    expect(rows.find((r) => r.id === 'qwen3-0.6b')).toMatchObject({ input_modalities: ['text'] });
    const table = await runCli(['list', '--all'], { env });
    expect(table.stdout).toMatch(/^gemma-3-4b-it +chat\+image +llama +~3\.\d GB/m);
    expect(table.stdout).toMatch(/^ultravox-v0\.5-1b +chat\+audio +llama /m);
  });
});
