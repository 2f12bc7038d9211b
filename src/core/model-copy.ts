import { link, mkdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import { InvalidRequestError } from './errors.js';
import { STORE_ID } from './store-paths.js';
import type { InstalledModel, Manifest, ModelStore } from './store.js';

/**
 * A model installed again under another name (Ollama's `POST /api/copy`,
 * `ollama cp`): a model of its own in the store, with a manifest like a
 * registered file's, so it persists across restarts, is listed, resolves
 * by its name everywhere, and is deleted alone.
 *
 * Nothing is copied byte by byte. Files the store holds (a pulled model's,
 * under `models/<id>/`) are hard-linked into the new model's folder, so
 * deleting either model leaves the other whole; where the file system
 * refuses a hard link, and for files the store only references (a user's
 * own file or folder, a bundled model's npm files), the new manifest
 * references the same path, as a registration does.
 */

/** The store id a copy's name becomes: Ollama's `:latest` dropped, a tag joined with `-` (api/ollama/names.ts reads it back), lower case. */
export function copyId(name: string): string {
  const bare = name.endsWith(':latest') ? name.slice(0, -':latest'.length) : name;
  return bare.replace(':', '-').toLowerCase();
}

/**
 * Installs `source` again as `id`. The caller checked that `id` names no
 * other model; an id the store cannot hold (a path, a separator) is a 400
 * naming `param`.
 */
export async function copyModel(store: ModelStore, source: InstalledModel, id: string, param = 'destination'): Promise<InstalledModel> {
  if (!STORE_ID.test(id) || id.includes('..') || !/^[a-z0-9]/.test(id)) {
    throw new InvalidRequestError(`'${id}' cannot name a model: use letters, digits, '.', '_' and '-' (and one ':tag').`, { param, code: 'invalid_value' });
  }
  const sourceDir = source.source === 'bundled' ? undefined : store.modelDir(source.id);
  const targetDir = store.modelDir(id);
  const files: Manifest['files'] = {};
  try {
    for (const [role, file] of Object.entries(source.files)) {
      const sha256 = source.sha256?.[role];
      const size = (await stat(file)).size;
      const relative = sourceDir ? path.relative(sourceDir, file) : '';
      const owned = relative !== '' && !relative.startsWith('..') && !path.isAbsolute(relative);
      if (owned && (await hardLink(file, path.join(targetDir, relative)))) {
        files[role] = { name: relative.split(path.sep).join('/'), size, ...(sha256 ? { sha256 } : {}) };
      } else {
        files[role] = { name: path.basename(file), size, path: file, ...(sha256 ? { sha256 } : {}) };
      }
    }
    const entry = { ...source.entry, id, aliases: [], description: `Copy of ${source.id}: ${source.entry.description}` };
    await store.writeManifest(id, { id, source: source.source === 'url' ? 'url' : 'local', installedAt: new Date().toISOString(), entry, files });
  } catch (error) {
    await rm(targetDir, { recursive: true, force: true });
    throw error;
  }
  return (await store.resolve(id))!;
}

async function hardLink(from: string, to: string): Promise<boolean> {
  try {
    await mkdir(path.dirname(to), { recursive: true });
    await link(from, to);
    return true;
  } catch {
    return false;
  }
}
