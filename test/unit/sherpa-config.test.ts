import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { ENDPOINT_RULES, recognizerConfig } from '../../src/families/sherpa-streaming/streaming.js';
import { Catalog, DEFAULT_CATALOG_PATH } from '../../src/core/catalog.js';
import { ModelLoadError } from '../../src/core/errors.js';
import type { InstalledModel } from '../../src/core/store.js';

/** The sherpa-onnx OnlineRecognizer config built from a model's file roles and catalog defaults. */

const dir = mkdtempSync(path.join(os.tmpdir(), 'lserve-sherpa-config-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function model(roles: string[], defaults: Record<string, unknown> = {}): InstalledModel {
  const entry = Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH)).get('zipformer-en-streaming')!;
  const files: Record<string, string> = {};
  for (const role of roles) {
    files[role] = path.join(dir, `${role}.onnx`);
    writeFileSync(files[role]!, '');
  }
  return { id: 'm', entry: { ...entry, defaults: { ...entry.defaults, ...defaults } }, source: 'local', files, sizeBytes: 0 };
}

describe('recognizerConfig', () => {
  it('makes a transducer config with endpointing for encoder/decoder/joiner/tokens', () => {
    const m = model(['encoder', 'decoder', 'joiner', 'tokens']);
    expect(recognizerConfig(m, 2)).toEqual({
      featConfig: { sampleRate: 16000, featureDim: 80 },
      modelConfig: {
        transducer: { encoder: m.files.encoder, decoder: m.files.decoder, joiner: m.files.joiner },
        tokens: m.files.tokens,
        numThreads: 2,
        provider: 'cpu',
        debug: 0,
      },
      decodingMethod: 'greedy_search',
      enableEndpoint: true,
      rule1MinTrailingSilence: 2.4,
      rule2MinTrailingSilence: 1.2,
      rule3MinUtteranceLength: 20,
    });
    expect(ENDPOINT_RULES.rule2MinTrailingSilence).toBe(1.2);
  });

  it('makes a streaming paraformer config (greedy only) when there is no joiner', () => {
    const m = model(['encoder', 'decoder', 'tokens'], { decoding: 'modified_beam_search' });
    const config = recognizerConfig(m, 1);
    expect(config.modelConfig.paraformer).toEqual({ encoder: m.files.encoder, decoder: m.files.decoder });
    expect(config.modelConfig.transducer).toBeUndefined();
    expect(config.decodingMethod).toBe('greedy_search');
  });

  it('names the missing roles and files', () => {
    expect(() => recognizerConfig(model(['encoder', 'joiner', 'tokens']), 1)).toThrow(ModelLoadError);
    expect(() => recognizerConfig(model(['encoder', 'joiner', 'tokens']), 1)).toThrow(/Model 'm' .* no decoder file/);
    const m = model(['encoder', 'decoder', 'joiner', 'tokens']);
    rmSync(m.files.joiner!);
    expect(() => recognizerConfig(m, 1)).toThrow(/its joiner file .* is missing/);
  });
});
