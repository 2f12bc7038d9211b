import path from 'node:path';
import { parseFilesUrl } from '../core/files/open.js';
import type { FilesLocation } from '../core/files/store.js';
import { CliError, EXIT_USAGE } from './errors.js';

/** `lserve serve --files-dir DIR` or `--files s3://…` (commander refuses both at once), checked before the server starts. */
export function filesLocation(flags: { filesDir?: string; files?: string }): FilesLocation | undefined {
  if (flags.filesDir) return { dir: path.resolve(flags.filesDir) };
  if (!flags.files) return undefined;
  try {
    return parseFilesUrl(flags.files);
  } catch (error) {
    throw new CliError(`--files: ${(error as Error).message}`, EXIT_USAGE);
  }
}
