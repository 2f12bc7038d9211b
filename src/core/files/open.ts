import path from 'node:path';
import { DirectoryFileStore } from './directory.js';
import type { FilesLocation, FileStores } from './store.js';

/**
 * `--files s3://bucket/prefix` as a location. The prefix is the operator's,
 * but it still never climbs: segments are plain names, no `.` or `..`.
 */
export function parseFilesUrl(url: string): FilesLocation {
  const match = /^s3:\/\/([^/]+)(?:\/(.*))?$/.exec(url.trim());
  if (!match) throw new Error(`expected s3://bucket or s3://bucket/prefix, got '${url}' (a directory goes to --files-dir)`);
  const bucket = match[1]!;
  if (!/^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$/.test(bucket)) throw new Error(`'${bucket}' is not a bucket name (3-63 lowercase letters, digits, '.', '-', '_')`);
  const segments = (match[2] ?? '').split('/').filter(Boolean);
  for (const segment of segments) {
    if (segment === '.' || segment === '..' || !/^[A-Za-z0-9._-]+$/.test(segment)) throw new Error(`'${segment}' is not allowed in the key prefix (letters, digits, '.', '-', '_')`);
  }
  return { s3: { bucket, prefix: segments.join('/') } };
}

/** The file stores of a location; the S3 SDK is loaded only when one is used. */
export async function openFileStores(location: FilesLocation, log: (message: string) => void): Promise<FileStores> {
  if ('s3' in location) {
    const { openS3FileStores } = await import('./s3.js');
    return openS3FileStores(location.s3, log);
  }
  return {
    open: (kind, options) => new DirectoryFileStore(path.join(location.dir, kind), options),
    close: async () => {},
  };
}
