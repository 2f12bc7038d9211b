import path from 'node:path';
import { DirectoryFileStore } from './directory.js';
import type { FilesLocation, FileStores } from './store.js';

/** The file stores of a location; the S3 SDK is loaded only when one is used. */
export async function openFileStores(location: FilesLocation, log: (message: string) => void): Promise<FileStores> {
  if ('s3' in location) throw new Error('object storage comes next');
  return {
    open: (kind, options) => new DirectoryFileStore(path.join(location.dir, kind), options),
    close: async () => {},
  };
}
