import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { copyFile, mkdir, readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { addonDir, addonKey, addonSources, findThreadpoolAddon, publishAddonDir, type AddonSources } from './threadpool-addon.js';

/**
 * The threadpool addon as lserve ships it: compiled once per platform by
 * `npm run build:llama -- --ship` from the same sources and patch a local
 * build uses, and committed under prebuilds/<platform>-<arch>/ with a record
 * of what it was built from. A machine without a compiler gets it on the
 * first GGUF load by a copy into the lserve home beside links to the
 * installed prebuilt libraries (milliseconds), instead of staying on the
 * slower prebuilt addon. It applies only while node-llama-cpp's installed
 * binaries are the very ones it was linked against (the same key as a local
 * build); otherwise lserve builds its own or keeps the prebuilt binary.
 * lserve's own builds of some CPU variants (cpu-variant-build.ts) ship
 * beside it, and are installed with it in place of node-llama-cpp's.
 */

export const PREBUILDS = fileURLToPath(new URL('../../../prebuilds', import.meta.url));

export interface ShippedRecord {
  /** addonKey() of the sources it was built from. */
  key: string;
  nodeLlamaCpp: string;
  /** sha256 of llama-addon.node: a damaged or swapped file is not loaded. */
  sha256: string;
  /** sha256 of each libggml-cpu-<variant>.so shipped beside it, by variant. */
  cpuVariants: Record<string, string>;
  /** The compiler it and the variants were built with, and the newest glibc symbol version they need. */
  compiler: string;
  glibc: string;
  builtAt: string;
}

export function shippedDir(prebuilds = PREBUILDS): string {
  return path.join(prebuilds, `${process.platform}-${process.arch}`);
}

/** The shipped addon's record when one exists for this platform and matches the installed sources. */
export function shippedAddonFor(sources: AddonSources, prebuilds = PREBUILDS): ShippedRecord | undefined {
  try {
    const dir = shippedDir(prebuilds);
    const record = JSON.parse(readFileSync(path.join(dir, 'llama-addon.json'), 'utf8')) as ShippedRecord;
    if (record.key !== addonKey(sources) || !existsSync(path.join(dir, 'llama-addon.node'))) return undefined;
    return record;
  } catch {
    return undefined;
  }
}

/**
 * The threadpool addon for this install: one built or copied into the home
 * before, else the shipped one copied there now; undefined when neither applies.
 */
export async function threadpoolAddon(home: string, sources = addonSources(), prebuilds = PREBUILDS): Promise<string | undefined> {
  if (!sources || process.platform !== 'linux') return undefined;
  const found = findThreadpoolAddon(home, sources);
  if (found) return found;
  const record = shippedAddonFor(sources, prebuilds);
  if (!record) return undefined;
  // The addon and the CPU variants are installed together or not at all.
  const files = { 'llama-addon.node': record.sha256, ...Object.fromEntries(Object.entries(record.cpuVariants).map(([variant, sha256]) => [`libggml-cpu-${variant}.so`, sha256])) };
  for (const [name, sha256] of Object.entries(files)) {
    const shipped = path.join(shippedDir(prebuilds), name);
    if (!existsSync(shipped) || (await sha256File(shipped)) !== sha256) {
      console.warn(`llama.cpp: ${shipped} does not match its record (sha256); using the prebuilt binary`);
      return undefined;
    }
  }
  const finalDir = addonDir(home, record.key);
  const work = `${finalDir}.tmp-${process.pid}`;
  try {
    await mkdir(work, { recursive: true });
    for (const name of Object.keys(files)) await copyFile(path.join(shippedDir(prebuilds), name), path.join(work, name));
    const cpuVariants = Object.keys(record.cpuVariants);
    await publishAddonDir(work, finalDir, sources, { key: record.key, nodeLlamaCpp: record.nodeLlamaCpp, builtAt: record.builtAt, shipped: true, ...(cpuVariants.length > 0 && { cpuVariants }) });
  } catch (error) {
    await rm(work, { recursive: true, force: true });
    // Another lserve process may have put the same addon in place first.
    if (!findThreadpoolAddon(home, sources)) console.warn(`llama.cpp: could not install the shipped threadpool addon into ${finalDir} (${(error as Error).message}); using the prebuilt binary`);
  }
  return findThreadpoolAddon(home, sources);
}

export async function sha256File(file: string): Promise<string> {
  return createHash('sha256').update(await readFile(file)).digest('hex');
}
