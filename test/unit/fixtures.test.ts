import { execFile } from 'node:child_process';
import { statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Catalog, DEFAULT_CATALOG_PATH, MODEL_KINDS, type ModelKind } from '../../src/core/catalog.js';
import { ModelStore } from '../../src/core/store.js';
import { FIXTURE_MODELS } from '../fixtures/index.js';
import { WHISPER_FILES } from '../fixtures/onnx/whisper.js';

/**
 * `npm run fixtures -- DIR` (test/fixtures/index.ts) writes every synthetic
 * model into DIR and prints `<path> <kind>` per model; each line registers
 * with the store as `lserve pull <path> --kind <kind>` does. The models come
 * from test/.cache (hard links), so this stays fast.
 */

const ENTRY = fileURLToPath(new URL('../fixtures/index.ts', import.meta.url));
const TSX = path.join(path.dirname(createRequire(import.meta.url).resolve('tsx/package.json')), 'dist', 'cli.mjs');

let tmp: string;
let lines: Array<{ path: string; kind: ModelKind }>;

beforeAll(async () => {
  tmp = await mkdtemp(path.join(os.tmpdir(), 'lserve-fixtures-'));
  const { stdout } = await promisify(execFile)(process.execPath, [TSX, ENTRY, path.join(tmp, 'models')], { maxBuffer: 1 << 20 });
  lines = stdout
    .trimEnd()
    .split('\n')
    .map((line) => {
      const [file, kind, ...rest] = line.split(' ');
      expect(rest).toEqual([]);
      return { path: file!, kind: kind as ModelKind };
    });
});

afterAll(async () => {
  await rm(tmp, { recursive: true, force: true });
});

describe('npm run fixtures -- DIR', () => {
  it('prints one "<path> <kind>" line per synthetic model, each written into DIR', () => {
    expect(lines.map((l) => path.basename(l.path))).toEqual(FIXTURE_MODELS.map((m) => m.name));
    expect(lines.map((l) => l.kind)).toEqual(['chat', 'chat', 'chat', 'embedding', 'embedding', 'rerank', 'ocr', 'asr', 'asr', 'asr-stream', 'tts', 'tts', 'tts', 'tts', 'tts', 'tts', 'image', 'image', 'image', 'image']);
    for (const line of lines) {
      expect(MODEL_KINDS).toContain(line.kind);
      expect(path.dirname(line.path)).toBe(path.join(tmp, 'models'));
      expect(statSync(line.path).isFile() || statSync(line.path).isDirectory()).toBe(true);
    }
  });

  it('registers every printed model with the store, as `lserve pull <path> --kind <kind>` does', async () => {
    const catalog = Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH));
    const store = new ModelStore(path.join(tmp, 'home'), catalog);
    const layouts: Record<string, string> = {};
    for (const line of lines) {
      if (statSync(line.path).isDirectory()) {
        const { model, layout } = await store.registerDirectory(line.path, { kind: line.kind });
        layouts[model.id] = layout.id;
      } else {
        await store.registerLocal(line.path, { kind: line.kind });
      }
    }
    expect(layouts).toEqual({ 'synthetic-ppocr-v5': 'ppocr-v5-server', 'synthetic-whisper-tiny': 'whisper-tiny', 'synthetic-whisper-tiny-timestamped': 'whisper-tiny', 'synthetic-zipformer-streaming': 'zipformer-en-streaming',
      'synthetic-piper-voice': 'piper-en-lessac',
      // CustomVoice and VoiceDesign exports have the same files: the first layout wins, and config.json tells the modes apart.
      'synthetic-qwen3-tts-customvoice': 'qwen3-tts-customvoice',
      'synthetic-qwen3-tts-voicedesign': 'qwen3-tts-customvoice',
      'synthetic-qwen3-tts-base': 'qwen3-tts-voiceclone',
      'synthetic-qwen3-tts-customvoice-fp16-io': 'qwen3-tts-customvoice',
      'synthetic-qwen3-tts-plain': 'qwen3-tts-customvoice',
      'synthetic-sd-turbo': 'sd-turbo',
      'synthetic-sd-turbo-fused': 'sd-turbo',
      'synthetic-sd-turbo-diffusers': 'sd-turbo',
      'synthetic-taesd': 'taesd',
    });
    const installed = (await store.list()).filter((m) => m.source === 'local');
    expect(installed.map((m) => [m.id, m.entry.kind, m.entry.backend])).toEqual([
      ['synthetic-bge-embedding', 'embedding', 'llama'],
      ['synthetic-bge-reranker', 'rerank', 'llama'],
      ['synthetic-piper-voice', 'tts', 'sherpa'],
      ['synthetic-ppocr-v5', 'ocr', 'onnx'],
      ['synthetic-qwen3-chat', 'chat', 'llama'],
      ['synthetic-qwen3-chat-40k', 'chat', 'llama'],
      ['synthetic-qwen3-embedding', 'embedding', 'llama'],
      ['synthetic-qwen3-fim', 'chat', 'llama'],
      ['synthetic-qwen3-tts-base', 'tts', 'onnx'],
      ['synthetic-qwen3-tts-customvoice', 'tts', 'onnx'],
      ['synthetic-qwen3-tts-customvoice-fp16-io', 'tts', 'onnx'],
      ['synthetic-qwen3-tts-plain', 'tts', 'onnx'],
      ['synthetic-qwen3-tts-voicedesign', 'tts', 'onnx'],
      ['synthetic-sd-turbo', 'image', 'onnx'],
      ['synthetic-sd-turbo-diffusers', 'image', 'onnx'],
      ['synthetic-sd-turbo-fused', 'image', 'onnx'],
      ['synthetic-taesd', 'image', 'onnx'],
      ['synthetic-whisper-tiny', 'asr', 'onnx'],
      ['synthetic-whisper-tiny-timestamped', 'asr', 'onnx'],
      ['synthetic-zipformer-streaming', 'asr-stream', 'onnx'],
    ]);
    const whisper = installed.find((m) => m.id === 'synthetic-whisper-tiny')!;
    expect(Object.keys(whisper.files).sort()).toEqual(Object.keys(WHISPER_FILES).sort());
    // The registered directory keeps its catalog family's defaults, so it loads like the catalog model.
    expect(whisper.entry.defaults).toEqual(catalog.get('whisper-tiny')!.defaults);
  });

  it('lays the Whisper folder out exactly as the catalog’s whisper-base entry', () => {
    const entry = Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH)).get('whisper-base')!;
    expect(Object.fromEntries(Object.entries(entry.files).map(([role, spec]) => [role, spec.path]))).toEqual(WHISPER_FILES);
  });
});
