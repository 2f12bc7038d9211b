import { rename, rm, writeFile } from 'node:fs/promises';

/**
 * Writes a file whole or not at all: into `partial` beside it, then renamed
 * over it, so a reader never sees half a file and a failed write (disk full)
 * leaves nothing behind. `partial` defaults to a name of this process's own.
 */
export async function writeFileWhole(target: string, data: string | Uint8Array, partial = `${target}.${process.pid}.tmp`): Promise<void> {
  try {
    await writeFile(partial, data);
    await rename(partial, target);
  } catch (error) {
    await rm(partial, { force: true });
    throw error;
  }
}
