import { createReadStream } from 'node:fs';
import type { Response } from 'express';
import type { FileCache } from '../core/file-cache.js';
import { NotFoundError } from '../core/errors.js';

/**
 * Answers GET <prefix>/:name from a FileCache: the bytes with their type and
 * length, cacheable until the file expires; any name the cache did not write
 * (or that expired) is a 404.
 */
export async function sendCachedFile(res: Response, cache: FileCache, name: string, what: string): Promise<void> {
  const file = await cache.get(name);
  if (!file) throw new NotFoundError(`No ${what} named '${name}': it expired or was never written by this server.`, { code: 'file_not_found' });
  const maxAge = Math.max(0, Math.floor((file.expiresAt - Date.now()) / 1000));
  res.status(200).set({
    'Content-Type': file.contentType,
    'Content-Length': String(file.size),
    'Cache-Control': `private, max-age=${maxAge}, immutable`,
  });
  await new Promise<void>((resolve, reject) => {
    const stream = createReadStream(file.path);
    stream.on('error', reject);
    res.on('close', resolve);
    stream.pipe(res);
  });
}
