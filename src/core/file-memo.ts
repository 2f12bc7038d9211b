import { stat } from 'node:fs/promises';
import path from 'node:path';

/**
 * `read`, remembered per file while its size and modification time stay the
 * same, for at most `limit` files (the oldest forgotten first). A missing
 * file, or one `read` fails on, is undefined.
 */
export function fileMemo<T>(read: (file: string) => Promise<T | undefined>, limit: number): (file: string) => Promise<T | undefined> {
  const memo = new Map<string, { key: string; value: Promise<T | undefined> }>();
  return async (file) => {
    const absolute = path.resolve(file);
    const info = await stat(absolute).catch(() => undefined);
    if (!info?.isFile()) return undefined;
    const key = `${info.size}:${info.mtimeMs}`;
    const hit = memo.get(absolute);
    if (hit?.key === key) return hit.value;
    const value = read(absolute).catch(() => undefined);
    memo.delete(absolute);
    memo.set(absolute, { key, value });
    while (memo.size > limit) memo.delete(memo.keys().next().value!);
    return value;
  };
}
