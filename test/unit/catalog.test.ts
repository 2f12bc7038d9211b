import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Catalog, CatalogError, DEFAULT_CATALOG_PATH, inputModalities, isBundled } from '../../src/core/catalog.js';
import { fileUrl } from '../../src/core/download.js';
import { localFileNames } from '../../src/core/store.js';

const entry = (id: string, extra: object = {}) => ({
  id,
  kind: 'chat',
  backend: 'llama',
  description: `model ${id}`,
  owned_by: 'test',
  license: 'mit',
  files: { model: { repo: 'org/repo', path: `${id}.gguf` } },
  ...extra,
});

describe('the shipped models.json', () => {
  const catalog = Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH));

  it('parses, with unique ids and aliases', () => {
    expect(catalog.entries.length).toBeGreaterThan(5);
    const names = catalog.entries.flatMap((e) => [e.id, ...e.aliases]);
    expect(new Set(names).size).toBe(names.length);
  });

  it('gives every entry to pull a size to show: exact when every file lists one, else an estimate', () => {
    for (const e of catalog.entries) {
      if (isBundled(e)) continue; // sized from its installed package
      const exact = Object.values(e.files).every((f) => f.size !== undefined);
      expect({ id: e.id, shown: exact || e.approx_size !== undefined }).toEqual({ id: e.id, shown: true });
      // An estimate beside exact sizes would only hide them.
      if (exact) expect(e.approx_size, e.id).toBeUndefined();
    }
  });

  it('gives every remote file a download URL, and no two files of a model the same local path', () => {
    for (const e of catalog.entries) {
      if (isBundled(e)) continue;
      for (const spec of Object.values(e.files)) expect(fileUrl(spec)).toMatch(/^https:\/\//);
      const names = Object.values(localFileNames(e));
      expect(new Set(names).size, e.id).toBe(names.length);
    }
  });

  it('has speech, synthesis and image models, including the three TTS modes under their spec names', () => {
    expect(catalog.get('whisper-base')).toMatchObject({ kind: 'asr', backend: 'onnx', defaults: { sample_rate: 16000 } });
    expect(catalog.get('zipformer-en-streaming')).toMatchObject({ kind: 'asr-stream', files: { encoder: {}, decoder: {}, joiner: {}, tokens: {} } });
    expect(catalog.get('sd-turbo')).toMatchObject({ kind: 'image' });
    for (const mode of ['customvoice', 'voicedesign', 'voiceclone']) {
      const tts = catalog.get(`vendor3-tts-${mode}`);
      expect(tts?.id).toBe(`qwen3-tts-${mode}`);
      expect(tts).toMatchObject({ kind: 'tts', defaults: { sample_rate: 24000 } });
      expect((tts!.defaults.languages as string[]).length).toBe(10);
    }
    expect(catalog.get('qwen3-tts-customvoice')!.defaults.speakers).toContain('Vivian');
  });

  it('has vision and audio chat models, each with the projector published beside it (role mmproj) and what it takes', () => {
    const multimodal: [string, string[]][] = [
      ['gemma-3-4b-it', ['image']],
      ['qwen2.5-vl-3b', ['image']],
      ['smolvlm2-2.2b', ['image']],
      ['smolvlm2-500m', ['image']],
      ['ultravox-v0.5-1b', ['audio']],
      ['qwen2.5-omni-3b', ['image', 'audio']],
    ];
    for (const [id, input] of multimodal) {
      const e = catalog.get(id)!;
      expect(e, id).toMatchObject({ kind: 'chat', backend: 'llama', input });
      expect(Object.keys(e.files), id).toEqual(['model', 'mmproj']);
      expect(e.files.mmproj!.repo, id).toBe(e.files.model!.repo);
      expect(e.files.mmproj!.path, id).toMatch(/^mmproj-[\w.-]+\.gguf$/);
      expect(inputModalities(e)).toEqual(['text', ...input]);
    }
    expect(inputModalities(catalog.get('qwen3-0.6b')!)).toEqual(['text']);
    expect(inputModalities(catalog.get('whisper-base')!)).toBeUndefined();
  });

  it('uses nested local paths for exports whose files share a name', () => {
    const names = localFileNames(catalog.get('sd-turbo')!);
    expect(names.unet).toBe('unet/model.onnx');
    expect(names.vae_decoder).toBe('vae_decoder/model.onnx');
    expect(localFileNames(catalog.get('whisper-base')!).encoder).toBe('encoder_model.onnx');
  });

  it('builds Hugging Face URLs against HF_ENDPOINT at call time', () => {
    const saved = process.env.HF_ENDPOINT;
    try {
      process.env.HF_ENDPOINT = 'https://mirror.example/';
      const spec = catalog.get('zipformer-en-streaming')!.files.tokens!;
      expect(fileUrl(spec)).toBe(
        'https://mirror.example/csukuangfj/sherpa-onnx-streaming-zipformer-en-2023-06-26/resolve/6037ea07e3abfe599ad00d418968bcf9656e7472/tokens.txt',
      );
      delete process.env.HF_ENDPOINT;
      expect(fileUrl({ repo: 'a/b', path: 'dir/x y.onnx' })).toBe('https://huggingface.co/a/b/resolve/main/dir/x%20y.onnx');
    } finally {
      if (saved === undefined) delete process.env.HF_ENDPOINT;
      else process.env.HF_ENDPOINT = saved;
    }
  });
});

describe('Catalog.parse', () => {
  it('names the broken entry in the error', () => {
    const broken = { ...entry('broken-one'), kind: 'poetry' };
    expect(() => Catalog.parse({ version: 1, models: [entry('fine'), broken] })).toThrow(CatalogError);
    expect(() => Catalog.parse({ version: 1, models: [entry('fine'), broken] })).toThrow(/'broken-one'/);
    const noSource = entry('no-source', { files: { model: { size: 3 } } });
    expect(() => Catalog.parse({ version: 1, models: [noSource] })).toThrow(/'no-source'[\s\S]*exactly one source/);
    const badSha = entry('bad-sha', { files: { model: { repo: 'a/b', path: 'x', sha256: 'abc' } } });
    expect(() => Catalog.parse({ version: 1, models: [badSha] })).toThrow(/'bad-sha'[\s\S]*64 lowercase hex/);
  });

  it('rejects an alias that names another model', () => {
    const models = [entry('alpha', { aliases: ['shared'] }), entry('beta', { aliases: ['shared'] })];
    expect(() => Catalog.parse({ version: 1, models })).toThrow("'shared' names both 'alpha' and 'beta'");
    expect(() => Catalog.parse({ version: 1, models: [entry('alpha'), entry('beta', { aliases: ['alpha'] })] })).toThrow(/'alpha' names both/);
  });

  it('takes `input` only on a chat model with a projector, and only image or audio', () => {
    const files = { model: { repo: 'org/repo', path: 'vl.gguf' }, mmproj: { repo: 'org/repo', path: 'mmproj-vl.gguf' } };
    const parse = (e: object) => Catalog.parse({ version: 1, models: [e] });
    expect(parse(entry('vl', { files, input: ['image', 'audio'] })).get('vl')!.input).toEqual(['image', 'audio']);
    expect(() => parse(entry('no-projector', { input: ['image'] }))).toThrow(/'no-projector'[\s\S]*`input` belongs to a chat model with a projector/);
    expect(() => parse(entry('not-chat', { kind: 'asr', files, input: ['audio'] }))).toThrow(/'not-chat'[\s\S]*`input` belongs to a chat model/);
    expect(() => parse(entry('video', { files, input: ['video'] }))).toThrow(/'video'/);
  });

  it('rejects an unknown version', () => {
    expect(() => Catalog.parse({ version: 2, models: [] })).toThrow(CatalogError);
  });

  it('finds models by id or alias and suggests close ids', () => {
    const catalog = Catalog.parse({
      version: 1,
      models: [entry('whisper-base', { aliases: ['whisper:base'] }), entry('whisper-small'), entry('qwen3-0.6b'), entry('sd-turbo')],
    });
    expect(catalog.get('whisper:base')?.id).toBe('whisper-base');
    expect(catalog.get('nope')).toBeUndefined();
    expect(catalog.suggest('whisper')).toEqual(['whisper-base', 'whisper-small']);
    expect(catalog.suggest('whisper-bas')[0]).toBe('whisper-base');
    expect(catalog.suggest('qwen3-06b')).toContain('qwen3-0.6b');
    expect(catalog.suggest('zzzzzzzzzz')).toEqual([]);
  });
});
