import { readdir, stat } from 'node:fs/promises';
import path from 'node:path';

/**
 * Bytes of the regular files under `dir`, subfolders included; 0 when it does
 * not exist. Dot files (a pull's lock) are bookkeeping, not data.
 */
export async function directorySize(dir: string): Promise<number> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  let total = 0;
  for (const entry of entries) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) total += await directorySize(full);
    else if (entry.isFile() && !entry.name.startsWith('.')) total += (await stat(full)).size;
  }
  return total;
}
