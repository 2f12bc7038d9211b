import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors.js';
import { findProjector, modelWidth, pairProjector, readProjector } from '../../src/core/projector.js';
import { writeProjectorGguf, writeTextModelGguf } from '../fixtures/gguf/mmproj.js';

/** Reading llama.cpp projectors' GGUF headers, pairing them with a model, and finding one beside it. */

let dir: string;
const at = (name: string) => path.join(dir, name);

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-projector-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The StoreError a call fails with. */
async function failure(call: Promise<unknown>): Promise<StoreError> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(StoreError);
  return error as StoreError;
}

describe('readProjector', () => {
  it('reads what a projector adds from its encoder flags, and the width it feeds', async () => {
    writeProjectorGguf(at('vision.gguf'), { vision: true, width: 2048 });
    writeProjectorGguf(at('audio.gguf'), { audio: true, width: 2048 });
    writeProjectorGguf(at('omni.gguf'), { vision: true, audio: true, width: 2048, visionType: 'qwen2.5vl_merger', audioType: 'qwen2a' });
    writeProjectorGguf(at('legacy.gguf'), { vision: true });
    expect(await readProjector(at('vision.gguf'))).toMatchObject({ file: at('vision.gguf'), input: ['image'], width: 2048 });
    expect((await readProjector(at('audio.gguf'))).input).toEqual(['audio']);
    expect((await readProjector(at('omni.gguf'))).input).toEqual(['image', 'audio']);
    expect((await readProjector(at('legacy.gguf'))).width).toBeUndefined();
  });

  it('does not count a text-to-speech speaker encoder as audio input', async () => {
    writeProjectorGguf(at('spk.gguf'), { audio: true, audioType: 'qwen3tts_spkenc' });
    const error = await failure(readProjector(at('spk.gguf')));
    expect(error.code).toBe('invalid_mmproj');
    expect(error.message).toContain('no vision or audio encoder for chat input');
  });

  it('refuses a text model, a file that is not GGUF (without quoting its bytes) and a missing file', async () => {
    writeTextModelGguf(at('text.gguf'), 'qwen2', 2048);
    const text = await failure(readProjector(at('text.gguf')));
    expect(text).toMatchObject({ code: 'invalid_mmproj', message: `${at('text.gguf')} is a 'qwen2' model, not a multimodal projector (its GGUF metadata has no clip encoder keys)` });
    await writeFile(at('secret.gguf'), 'SECRET-TOKEN bytes');
    const junk = await failure(readProjector(at('secret.gguf'), 'the projector'));
    expect(junk.message).toBe('the projector is not a GGUF file (or it is damaged)');
    expect(junk.message).not.toContain('SECR');
    expect((await failure(readProjector(at('nowhere.gguf')))).message).toBe(`No such file: ${at('nowhere.gguf')}`);
    expect((await failure(readProjector(dir))).message).toBe(`Not a regular file: ${dir}`);
  });
});

describe('pairProjector', () => {
  it("refuses a projector made for another width than the model's, and takes one of the same or an unknown width", async () => {
    writeTextModelGguf(at('model-2048.gguf'), 'llama', 2048);
    writeTextModelGguf(at('model-1536.gguf'), 'qwen2', 1536);
    expect(await modelWidth(at('model-2048.gguf'))).toBe(2048);
    expect((await pairProjector(at('model-2048.gguf'), at('vision.gguf'))).input).toEqual(['image']);
    const error = await failure(pairProjector(at('model-1536.gguf'), at('vision.gguf')));
    expect(error.message).toBe('vision.gguf was made for a text model of width 2048, and this model\'s width is 1536: llama.cpp refuses to load such a pair. Pass the projector published with this model.');
    expect((await pairProjector(at('model-1536.gguf'), at('legacy.gguf'))).input).toEqual(['image']);
    await writeFile(at('unreadable.gguf'), 'not a header');
    expect(await modelWidth(at('unreadable.gguf'))).toBeUndefined();
    expect((await pairProjector(at('unreadable.gguf'), at('vision.gguf'))).input).toEqual(['image']);
  });
});

describe('findProjector', () => {
  it("takes the projector whose name shares the most with the model's, passing over those that are not for it", async () => {
    const folder = await mkdtemp(path.join(dir, 'beside-'));
    const model = path.join(folder, 'Qwen2.5-VL-3B-Instruct-Q4_K_M.gguf');
    writeTextModelGguf(model, 'qwen2vl', 2048);
    writeProjectorGguf(path.join(folder, 'mmproj-Qwen2.5-VL-3B-Instruct-f16.gguf'), { vision: true, width: 2048 });
    writeProjectorGguf(path.join(folder, 'mmproj-Qwen2.5-VL-3B-Instruct-Q8_0.gguf'), { vision: true, width: 2048 });
    writeProjectorGguf(path.join(folder, 'mmproj-Qwen2.5-VL-7B-Instruct-Q8_0.gguf'), { vision: true, width: 3584 });
    writeProjectorGguf(path.join(folder, 'other.gguf'), { vision: true, width: 2048 }); // not named like a projector
    let found = await findProjector(model);
    expect(found.chosen?.file).toBe(path.join(folder, 'mmproj-Qwen2.5-VL-3B-Instruct-Q8_0.gguf'));
    expect(found.candidates.map((c) => path.basename(c))).toEqual([
      'mmproj-Qwen2.5-VL-3B-Instruct-Q8_0.gguf',
      'mmproj-Qwen2.5-VL-3B-Instruct-f16.gguf',
      'mmproj-Qwen2.5-VL-7B-Instruct-Q8_0.gguf',
    ]);
    expect(found.skipped).toEqual([]);

    // The 7B model: its own projector is the closest name; the 3B ones are of another width.
    const big = path.join(folder, 'Qwen2.5-VL-7B-Instruct-Q4_K_M.gguf');
    writeTextModelGguf(big, 'qwen2vl', 3584);
    found = await findProjector(big);
    expect(path.basename(found.chosen!.file)).toBe('mmproj-Qwen2.5-VL-7B-Instruct-Q8_0.gguf');

    // A text model of another width beside them takes none, and says why each was passed over.
    const text = path.join(folder, 'qwen3-4b-Q4_K_M.gguf');
    writeTextModelGguf(text, 'qwen3', 2560);
    found = await findProjector(text);
    expect(found.chosen).toBeUndefined();
    expect(found.skipped.map((s) => s.reason)).toContain("mmproj-Qwen2.5-VL-3B-Instruct-Q8_0.gguf was made for a text model of width 2048, and this model's width is 2560");
  });

  it('knows the names llama.cpp and users give projectors, and passes over a file so named that is none', async () => {
    const folder = await mkdtemp(path.join(dir, 'names-'));
    const model = path.join(folder, 'gemma-3-4b-it-Q4_K_M.gguf');
    writeTextModelGguf(model, 'gemma3', 2560);
    for (const name of ['gemma-3-4b-it-mmproj-f16.gguf', 'gemma-3-4b-it.mmproj.gguf', 'mmproj-model-f16.gguf', 'mmproj.gguf']) {
      writeProjectorGguf(path.join(folder, name), { vision: true, width: 2560, visionType: 'gemma3' });
    }
    writeTextModelGguf(path.join(folder, 'gemma-3-4b-it-Q4_K_M-mmproj.gguf'), 'gemma3', 2560); // named like one, but a text model
    const found = await findProjector(model);
    expect(found.candidates.map((c) => path.basename(c)).sort()).toEqual(
      ['gemma-3-4b-it-Q4_K_M-mmproj.gguf', 'gemma-3-4b-it-mmproj-f16.gguf', 'gemma-3-4b-it.mmproj.gguf', 'mmproj-model-f16.gguf', 'mmproj.gguf'].sort(),
    );
    expect(path.basename(found.candidates[0]!)).toBe('gemma-3-4b-it-Q4_K_M-mmproj.gguf');
    expect(found.skipped[0]!.reason).toContain("is a 'gemma3' model, not a multimodal projector");
    expect(path.basename(found.chosen!.file)).toBe('gemma-3-4b-it-mmproj-f16.gguf');
  });

  it('finds nothing beside a model with no projector', async () => {
    const folder = await mkdtemp(path.join(dir, 'alone-'));
    writeTextModelGguf(path.join(folder, 'model.gguf'), 'llama', 2048);
    expect(await findProjector(path.join(folder, 'model.gguf'))).toEqual({ candidates: [], skipped: [] });
  });
});
