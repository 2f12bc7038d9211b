import { open, realpath } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeBase64Strict } from '../api/base64.js';
import { InvalidRequestError, PayloadTooLargeError, PermissionError } from '../core/errors.js';
import { fetchPublicUrl, type UrlPolicy } from './net/fetch-public.js';

/**
 * Request fields that name their payload instead of carrying it (`image_url`
 * for OCR, `audio` for transcription, `ref_audio`, `image`, `mask`): a data
 * URI (always), a local path or `file://` URL (only under the directories the
 * operator gave with `--allow-local-files`, after resolving symlinks), or an
 * http(s) URL (public addresses only unless `--allow-private-urls`; see
 * net/fetch-public.ts). Any web page can send requests to a server on
 * loopback, so neither files nor the private network are open by default,
 * whatever the bind address. No error quotes the bytes of what was read.
 */

export interface InputPolicy extends UrlPolicy {
  /** Real paths (symlinks resolved) of the directories whose files may be read; none by default. */
  localDirs: readonly string[];
}

/** Parses a comma-separated flag value. */
export function parseList(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

/** Resolves `--allow-local-files` directories once, at start: each must exist and be a directory. */
export async function resolveLocalDirs(dirs: readonly string[]): Promise<string[]> {
  return Promise.all(
    dirs.map(async (dir) => {
      const real = await realpath(path.resolve(dir)).catch(() => {
        throw new Error(`--allow-local-files: no such directory: ${dir}`);
      });
      return real;
    }),
  );
}

/** Decodes raw base64 (standard or URL-safe) or a `data:<type>;base64,` URI; bad input is a 400, never a mangled payload. */
export function decodeBase64Payload(value: string, param: string, mediaPrefix?: string): Buffer {
  let payload = value.trim();
  const match = /^data:([^;,]*)((?:;[^;,]*)*),/i.exec(payload);
  if (match) {
    const [, mime = '', params = ''] = match;
    if (!/;base64$/i.test(params)) throw new InvalidRequestError(`'${param}' data URI must be base64-encoded (data:<type>;base64,...)`, { param, code: 'invalid_base64' });
    if (mediaPrefix && mime && !mime.toLowerCase().startsWith(mediaPrefix)) {
      throw new InvalidRequestError(`'${param}' data URI has type '${mime}'; expected ${mediaPrefix}*`, { param, code: 'invalid_media_type' });
    }
    payload = payload.slice(match[0].length);
  }
  // Data URIs may wrap their base64 in lines.
  const compact = payload.replace(/\s+/g, '');
  if (compact.length === 0) throw new InvalidRequestError(`'${param}' is empty`, { param, code: 'empty_image' });
  const bytes = decodeBase64Strict(compact);
  if (!bytes) throw new InvalidRequestError(`'${param}' is not valid base64`, { param, code: 'invalid_base64' });
  return bytes;
}

/** Reads a data URI, local path or URL under the policy. */
export async function readRemoteInput(source: string, policy: InputPolicy, param: string, signal?: AbortSignal): Promise<Buffer> {
  if (/^data:/i.test(source)) return decodeBase64Payload(source, param);
  if (/^https?:\/\//i.test(source)) return fetchPublicUrl(source, policy, param, signal);
  if (/^file:/i.test(source)) {
    let file: string;
    try {
      file = fileURLToPath(source);
    } catch {
      throw new InvalidRequestError(`'${param}' is not a valid file URL`, { param, code: 'invalid_value' });
    }
    return readLocal(file, policy, param);
  }
  if (path.isAbsolute(source)) return readLocal(source, policy, param);
  throw new InvalidRequestError(`'${param}' must be a data URI, an http(s) URL or an absolute local path`, { param, code: 'invalid_value' });
}

function isUnder(file: string, dir: string): boolean {
  const rel = path.relative(dir, file);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

function localFilesForbidden(param: string): PermissionError {
  return new PermissionError(
    `'${param}': this server reads no local files outside the directories given with --allow-local-files DIR[,DIR] (none by default); send the bytes instead (multipart upload or a data URI).`,
    { param, code: 'local_files_forbidden' },
  );
}

async function readLocal(file: string, policy: InputPolicy, param: string): Promise<Buffer> {
  const under = (candidate: string) => policy.localDirs.some((dir) => isUnder(candidate, dir));
  if (policy.localDirs.length === 0) throw localFilesForbidden(param);
  let real: string;
  try {
    real = await realpath(file);
  } catch {
    // Whether a file outside the allowed directories exists is not told.
    if (!under(path.resolve(file))) throw localFilesForbidden(param);
    throw new InvalidRequestError(`'${param}': no such file: ${file}`, { param, code: 'file_not_found' });
  }
  if (!under(real)) throw localFilesForbidden(param);
  const handle = await open(real, 'r').catch(() => {
    throw new InvalidRequestError(`'${param}': cannot read ${file}`, { param, code: 'file_unreadable' });
  });
  try {
    // A directory on the way may have been swapped for a symlink since realpath: check what was opened.
    const opened = await realpath(`/proc/self/fd/${handle.fd}`).catch(() => real);
    if (!under(opened)) throw localFilesForbidden(param);
    const info = await handle.stat();
    if (!info.isFile()) throw new InvalidRequestError(`'${param}': not a regular file: ${file}`, { param, code: 'file_unreadable' });
    if (info.size > policy.maxBytes) throw new PayloadTooLargeError(`'${param}': file is ${info.size} bytes; the limit is ${policy.maxBytes}`, { param });
    return await handle.readFile();
  } finally {
    await handle.close();
  }
}
