import { createHash } from 'node:crypto';
import { stat } from 'node:fs/promises';
import type { InstalledModel } from './store.js';

/**
 * A stable sha256 for an installed model, for clients that tell models (and
 * copies of them) apart by digest, as Ollama's do:
 *
 * - when the store recorded every file's sha256 (a pull verified each), the
 *   file's own sha256 for a single-file model, and for several files the
 *   sha256 of their `role sha256` lines in role order: it changes exactly
 *   when the bytes do, and a copy of the model has the same one;
 * - otherwise (a registered local file, a bundled model: nothing hashed
 *   them, and hashing gigabytes for a listing is no option) the sha256 of
 *   the id, the total size and each file's modification time: it changes
 *   when a file is replaced in place.
 */
export async function modelDigest(installed: InstalledModel): Promise<string> {
  const roles = Object.keys(installed.files).sort();
  const recorded = installed.sha256;
  if (recorded && roles.every((role) => recorded[role])) {
    if (roles.length === 1) return recorded[roles[0]!]!;
    return sha256(roles.map((role) => `${role} ${recorded[role]}\n`).join(''));
  }
  const times = await Promise.all(roles.map(async (role) => `${role} ${(await stat(installed.files[role]!).catch(() => undefined))?.mtimeMs ?? 0}\n`));
  return sha256(`${installed.id}\n${installed.sizeBytes}\n${times.join('')}`);
}

/** When the model last changed: its installation, else (a bundled model) its newest file's modification. */
export async function modelModifiedAt(installed: InstalledModel): Promise<Date> {
  if (installed.installedAt) return new Date(installed.installedAt);
  const times = await Promise.all(Object.values(installed.files).map(async (file) => (await stat(file).catch(() => undefined))?.mtimeMs ?? 0));
  return new Date(Math.max(0, ...times));
}

function sha256(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
