import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, realpathSync } from 'node:fs';
import { copyFile, mkdir, rename, rm, symlink } from 'node:fs/promises';
import path from 'node:path';

/**
 * llama.cpp's CPU code comes in variants, one library per instruction-set
 * level (libggml-cpu-haswell.so … libggml-cpu-sapphirerapids.so); ggml loads
 * every variant in the addon's folder, asks each how well it fits this CPU
 * (from CPUID) and keeps the best. CPUID is what a virtual machine claims,
 * not what it runs: when AMX is refused (amx.ts), the addon is loaded from a
 * view of its folder without the AMX variants, so ggml picks the best of the
 * others.
 */

/**
 * The variants built with AMX (AMX_TILE, AMX_INT8 in ggml/src/CMakeLists.txt
 * of the llama.cpp that node-llama-cpp bundles; test/e2e/amx-refused.test.ts
 * checks this list against it).
 */
export const AMX_VARIANTS: readonly string[] = ['sapphirerapids'];

const VARIANT_FILE = /^libggml-cpu-(.+)\.so$/;

/**
 * The path of `addon` (llama-addon.node) in a folder holding what its own
 * folder holds, linked, but the AMX variants; made under `home`'s llama/
 * folder once, and found there afterwards.
 */
export async function withoutAmxVariants(addon: string, home: string): Promise<string> {
  const source = path.dirname(realpathSync(addon));
  const view = path.join(home, 'llama', `noamx-${createHash('sha256').update(source).digest('hex').slice(0, 12)}`);
  const entries = readdirSync(source).filter((name) => !AMX_VARIANTS.includes(VARIANT_FILE.exec(name)?.[1] ?? ''));
  if (entries.every((name) => existsSync(path.join(view, name)))) return path.join(view, path.basename(addon));
  const work = `${view}.tmp-${process.pid}`;
  await rm(work, { recursive: true, force: true });
  await mkdir(work, { recursive: true });
  for (const name of entries) {
    // node-llama-cpp reads the build description beside the addon; the rest is linked.
    if (name.endsWith('.json')) await copyFile(path.join(source, name), path.join(work, name));
    else await symlink(realpathSync(path.join(source, name)), path.join(work, name));
  }
  await rm(view, { recursive: true, force: true });
  await rename(work, view).catch(async (error: unknown) => {
    await rm(work, { recursive: true, force: true });
    // Another runner put the same view in place first.
    if (!existsSync(path.join(view, path.basename(addon)))) throw error;
  });
  return path.join(view, path.basename(addon));
}

/** The CPU variant ggml loaded into this process (from /proc/self/maps: Linux), if any. */
export function loadedVariant(): string | undefined {
  try {
    const maps = readFileSync('/proc/self/maps', 'utf8');
    return /libggml-cpu-([^/\s]+)\.so$/m.exec(maps)?.[1];
  } catch {
    return undefined;
  }
}
