import { open } from 'node:fs/promises';
import path from 'node:path';
import { InvalidRequestError, PayloadTooLargeError, PermissionError } from '../core/errors.js';
import { fetchPublicUrl } from '../http/net/fetch-public.js';
import { decodeBase64Payload } from '../http/remote-input.js';
import type { McpContext } from './context.js';

/**
 * A tool's payload (an image, audio) from exactly one of its three fields:
 * `<name>_base64` (raw base64 or a data URI), `<name>_url` (http(s), under the
 * server's URL rules: public addresses only unless --allow-private-urls; see
 * http/net/fetch-public.ts) or `<name>_path` (a local file; stdio only, where
 * the agent runs lserve as its own user). What is read is bounded; no error
 * quotes its bytes.
 */
export interface PayloadFields {
  base64?: string;
  url?: string;
  path?: string;
}

export async function readPayload(name: string, fields: PayloadFields, ctx: McpContext, signal: AbortSignal, mediaPrefix?: string): Promise<{ bytes: Buffer; param: string }> {
  const given = (['base64', 'url', 'path'] as const).filter((key) => fields[key] !== undefined);
  const names = ctx.localFiles ? `'${name}_base64', '${name}_url' or '${name}_path'` : `'${name}_base64' or '${name}_url'`;
  if (given.length === 0) throw new InvalidRequestError(`Give the ${name} as ${names}.`, { param: `${name}_base64`, code: 'missing_required_parameter' });
  if (given.length > 1) throw new InvalidRequestError(`Give exactly one of ${names}.`, { param: `${name}_${given[1]}`, code: 'invalid_value' });
  const key = given[0]!;
  const param = `${name}_${key}`;
  if (key === 'base64') return { bytes: decodeBase64Payload(fields.base64!, param, mediaPrefix), param };
  if (key === 'url') {
    if (!/^https?:\/\//i.test(fields.url!)) throw new InvalidRequestError(`'${param}' must be an http(s) URL.`, { param, code: 'invalid_value' });
    return { bytes: await fetchPublicUrl(fields.url!, ctx.urls, param, signal), param };
  }
  if (!ctx.localFiles) throw new PermissionError(`'${param}': this server reads no local files over HTTP; send '${name}_base64' or '${name}_url'.`, { param, code: 'local_files_forbidden' });
  return { bytes: await readLocalFile(fields.path!, param, ctx.urls.maxBytes), param };
}

async function readLocalFile(file: string, param: string, maxBytes: number): Promise<Buffer> {
  const resolved = path.resolve(file);
  const handle = await open(resolved, 'r').catch((error: NodeJS.ErrnoException) => {
    const why = error.code === 'ENOENT' ? 'no such file' : error.code === 'EACCES' ? 'permission denied' : error.code === 'EISDIR' ? 'is a directory' : 'cannot be read';
    throw new InvalidRequestError(`'${param}': ${resolved}: ${why}`, { param, code: 'file_not_found' });
  });
  try {
    const info = await handle.stat();
    if (!info.isFile()) throw new InvalidRequestError(`'${param}': not a regular file: ${resolved}`, { param, code: 'file_unreadable' });
    if (info.size > maxBytes) throw new PayloadTooLargeError(`'${param}': file is ${info.size} bytes; the limit is ${maxBytes}`, { param });
    return await handle.readFile();
  } finally {
    await handle.close();
  }
}
