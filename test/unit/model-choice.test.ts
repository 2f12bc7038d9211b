import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Catalog, type CatalogEntry, type ModelKind } from '../../src/core/catalog.js';
import { aliasTable, NO_CHOICES, pickDefault, preferInt8, vendorName, type ModelChoices } from '../../src/core/model-choice.js';
import type { InstalledModel } from '../../src/core/store.js';
import { modelChoices } from '../../src/cli/model-choice-flags.js';

/** Which installed model serves a request that names none, and what the names apps hard-code stand for. */

const entry = (id: string, kind: ModelKind, aliases: string[] = []): CatalogEntry =>
  ({ id, kind, backend: 'x', description: id, aliases, owned_by: 'x', license: 'x', files: {}, defaults: {} }) as CatalogEntry;

const catalog = new Catalog([entry('big-asr', 'asr'), entry('small-asr', 'asr', ['asr:small']), entry('only-tts', 'tts')], { asr: ['big-asr', 'small-asr'] });

const installed = (id: string, kind: ModelKind, options: { size?: number; at?: string; files?: Record<string, string>; aliases?: string[] } = {}): InstalledModel => ({
  id,
  sizeBytes: options.size ?? 100,
  source: 'local',
  files: options.files ?? { model: `/m/${id}` },
  installedAt: options.at,
  entry: entry(id, kind, options.aliases),
});

const choices = (patch: Partial<ModelChoices>): ModelChoices => ({ ...NO_CHOICES, ...patch });

describe('the default of a kind', () => {
  const models = [
    installed('small-asr', 'asr', { size: 100, aliases: ['asr:small'] }),
    installed('big-asr', 'asr', { size: 10_000 }),
    installed('mine-old', 'asr', { at: '2026-01-01T00:00:00Z' }),
    installed('only-tts', 'tts'),
  ];

  it('is the chosen one (by id or alias), else the only one, else the catalog preference that fits the budget', () => {
    expect(pickDefault(models, 'asr', catalog, choices({ defaults: { asr: 'asr:small' } }), 1e9)).toMatchObject({ id: 'small-asr', how: 'chosen', installed: 3 });
    expect(pickDefault(models, 'tts', catalog, NO_CHOICES, 1e9)).toMatchObject({ id: 'only-tts', how: 'only', installed: 1 });
    expect(pickDefault(models, 'asr', catalog, NO_CHOICES, 1e9)).toMatchObject({ id: 'big-asr', how: 'preferred' });
    // The best one does not fit a 1 KB budget: the next preferred that does.
    expect(pickDefault(models, 'asr', catalog, NO_CHOICES, 1000)).toMatchObject({ id: 'small-asr', how: 'preferred' });
    // None fits: still the first preferred, rather than nothing.
    expect(pickDefault(models, 'asr', catalog, NO_CHOICES, 10)).toMatchObject({ id: 'big-asr' });
    expect(pickDefault(models, 'image', catalog, NO_CHOICES, 1e9)).toBeUndefined();
  });

  it('falls back to the most recent pull among models the catalog does not rank, and never picks a latent decoder', () => {
    const mine = [installed('mine-old', 'asr', { at: '2026-01-01T00:00:00Z' }), installed('mine-new', 'asr', { at: '2026-06-01T00:00:00Z' })];
    expect(pickDefault(mine, 'asr', catalog, NO_CHOICES, 1e9)).toMatchObject({ id: 'mine-new', how: 'latest' });
    const images = [installed('sd', 'image'), installed('tiny-vae', 'image', { files: { decoder_weights: '/m/w' } })];
    expect(pickDefault(images, 'image', catalog, NO_CHOICES, 1e9)).toMatchObject({ id: 'sd', how: 'only' });
  });

  it('a chosen model that is not installed is no pick', () => {
    expect(pickDefault(models, 'asr', catalog, choices({ defaults: { asr: 'not-here' } }), 1e9)?.how).not.toBe('chosen');
  });
});

describe('the int8 twin, for work a person waits on (a Realtime session\'s turns)', () => {
  const twins = new Catalog([entry('base', 'asr'), entry('base-q8', 'asr'), entry('small', 'asr'), entry('tts-q8', 'asr')], { asr: ['small', 'base', 'base-q8'] });
  const pick = (models: InstalledModel[], patch: Partial<ModelChoices> = {}) => {
    const found = pickDefault(models, 'asr', twins, choices(patch), 1e9)!;
    return preferInt8(found, models, twins).id;
  };

  it('replaces the default by its `-q8` entry where that is installed', () => {
    expect(pick([installed('base', 'asr'), installed('base-q8', 'asr')])).toBe('base-q8');
    // The catalog ranks the fp32 one first: it stays the default of the kind.
    expect(pickDefault([installed('base', 'asr'), installed('base-q8', 'asr')], 'asr', twins, NO_CHOICES, 1e9)?.id).toBe('base');
  });

  it('keeps the default when its twin is not installed, or the operator chose it', () => {
    expect(pick([installed('base', 'asr'), installed('small', 'asr')])).toBe('small');
    expect(pick([installed('small', 'asr'), installed('base-q8', 'asr')])).toBe('small');
    expect(pick([installed('base', 'asr'), installed('base-q8', 'asr')], { defaults: { asr: 'base' } })).toBe('base');
    // A twin of another kind is no twin.
    expect(preferInt8({ id: 'tts', kind: 'tts', how: 'only', installed: 1 }, [installed('tts', 'tts'), installed('tts-q8', 'asr')], twins).id).toBe('tts');
  });
});

describe('names apps hard-code', () => {
  it('stand for their kind; chat families are marked; diarization is a 400', () => {
    expect(vendorName('whisper-1')).toEqual({ kind: 'asr', chat: false });
    expect(vendorName('gpt-4o-mini-tts')).toEqual({ kind: 'tts', chat: false });
    expect(vendorName('text-embedding-3-small')).toEqual({ kind: 'embedding', chat: false });
    expect(vendorName('gpt-image-1')).toEqual({ kind: 'image', chat: false });
    for (const name of ['gpt-4o-mini', 'gpt-5', 'chatgpt-4o-latest', 'o1', 'o3-mini', 'o4-mini', 'claude-sonnet-4-5']) expect(vendorName(name), name).toEqual({ kind: 'chat', chat: true });
    for (const name of ['qwen3-0.6b', 'o5', 'omni', 'whisper-base', 'gpt']) expect(vendorName(name), name).toBeUndefined();
    expect(() => vendorName('gpt-4o-transcribe-diarize')).toThrow(/diarization/);
  });

  it('are listed with the model they stand for now, never over an installed name; chat families only when they answer', () => {
    const models = [installed('small-asr', 'asr'), installed('tts-1', 'tts'), installed('chat-a', 'chat'), installed('chat-b', 'chat')];
    const picks = { asr: { id: 'small-asr', kind: 'asr' as const, how: 'only' as const, installed: 1 }, tts: { id: 'tts-1', kind: 'tts' as const, how: 'only' as const, installed: 1 }, chat: { id: 'chat-a', kind: 'chat' as const, how: 'preferred' as const, installed: 2 } };
    const table = aliasTable(models, picks, choices({ aliases: { mine: 'chat-b' } }));
    expect(table).toContainEqual({ alias: 'mine', model: 'chat-b' });
    expect(table).toContainEqual({ alias: 'whisper-1', model: 'small-asr' });
    expect(table.find((row) => row.alias === 'tts-1')).toBeUndefined();
    expect(table.find((row) => row.alias === 'text-embedding-3-small')).toBeUndefined();
    expect(table.find((row) => row.pattern)).toBeUndefined();
    expect(aliasTable(models, picks, choices({ vendorChat: true }))).toContainEqual({ alias: 'gpt-*', model: 'chat-a', pattern: true });
  });
});

describe('the flags', () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'lserve-aliases-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('read --default-model and LSERVE_DEFAULT_MODEL_<KIND> (the flag wins), --alias and --aliases (YAML or JSON; the flag wins)', () => {
    const yaml = path.join(dir, 'aliases.yaml');
    writeFileSync(yaml, 'gpt-4o-mini: qwen3-4b\nclaude-haiku-4-5: qwen3-0.6b\n');
    const parsed = modelChoices(
      { defaultModel: ['asr=whisper-base', 'asr-stream=zip'], alias: ['gpt-4o-mini=qwen3-0.6b'], aliases: yaml, aliasVendorChat: true },
      { LSERVE_DEFAULT_MODEL_ASR: 'whisper-tiny', LSERVE_DEFAULT_MODEL_TTS: 'piper-en-lessac' },
    );
    expect(parsed).toEqual({
      defaults: { asr: 'whisper-base', 'asr-stream': 'zip', tts: 'piper-en-lessac' },
      aliases: { 'gpt-4o-mini': 'qwen3-0.6b', 'claude-haiku-4-5': 'qwen3-0.6b' },
      vendorChat: true,
    });
    const json = path.join(dir, 'aliases.json');
    writeFileSync(json, '{"a": "b"}');
    expect(modelChoices({ aliases: json }, {}).aliases).toEqual({ a: 'b' });
  });

  it.each([
    [{ defaultModel: ['speech=whisper'] }, /no kind of model/],
    [{ defaultModel: ['asr'] }, /KIND=MODEL/],
    [{ alias: ['=x'] }, /NAME=MODEL/],
    [{ aliases: '/no/such/file.yaml' }, /--aliases/],
  ])('refuse %j', (flags, message) => {
    expect(() => modelChoices(flags, {})).toThrow(message);
  });
});
