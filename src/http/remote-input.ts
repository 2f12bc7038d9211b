import { open, realpath } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { InvalidRequestError, PayloadTooLargeError, PermissionError } from '../core/errors.js';

/**
 * Request fields that name their payload instead of carrying it (`image_url`
 * for OCR, `audio` for transcription): a data URI, a local path, or an
 * http(s) URL. Paths and URLs let a client make the server read files and
 * open connections, so they are allowed by default only while the server is
 * bound to loopback (only local users can reach it). Otherwise, or whenever an
 * allowlist is given (`lserve serve --allow-remote-input`), each source must
 * match an entry: an absolute directory (files under it, after resolving
 * symlinks), an origin or URL prefix (`https://example.com/images/`), or `*`.
 */

export interface RemoteInputPolicy {
  /** Address the server is bound to. */
  host: string;
  /** Allowlist entries; undefined means the loopback-only default. */
  allow?: readonly string[];
  /** Largest payload read, in bytes. */
  maxBytes: number;
}

export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** Parses `--allow-remote-input` (comma-separated). */
export function parseAllowList(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

function allowed(policy: RemoteInputPolicy, check: (entry: string) => boolean): boolean {
  if (policy.allow === undefined) return isLoopbackHost(policy.host);
  return policy.allow.some((entry) => entry === '*' || check(entry));
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
  // Node's decoder skips characters outside the alphabet, so check it first.
  const compact = payload.replace(/\s+/g, '');
  if (compact.length === 0) throw new InvalidRequestError(`'${param}' is empty`, { param, code: 'empty_image' });
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(compact) || compact.replace(/=+$/, '').length % 4 === 1) {
    throw new InvalidRequestError(`'${param}' is not valid base64`, { param, code: 'invalid_base64' });
  }
  return Buffer.from(compact, /[-_]/.test(compact) ? 'base64url' : 'base64');
}

/** Reads a data URI, local path or URL under the policy. */
export async function readRemoteInput(source: string, policy: RemoteInputPolicy, param: string, signal?: AbortSignal): Promise<Buffer> {
  if (/^data:/i.test(source)) return decodeBase64Payload(source, param);
  if (/^https?:\/\//i.test(source)) return fetchUrl(source, policy, param, signal);
  if (/^file:\/\//i.test(source)) return readLocal(fileURLToPath(source), policy, param);
  if (path.isAbsolute(source)) return readLocal(source, policy, param);
  throw new InvalidRequestError(`'${param}' must be a data URI, an absolute local path or an http(s) URL`, { param, code: 'invalid_value' });
}

async function readLocal(file: string, policy: RemoteInputPolicy, param: string): Promise<Buffer> {
  let real: string;
  try {
    real = await realpath(file);
  } catch {
    // Same answer whether missing or forbidden would leak nothing more; a missing file is the client's error.
    if (!allowed(policy, (e) => path.isAbsolute(e) && isUnder(path.resolve(file), e))) throw forbidden(param, 'local paths');
    throw new InvalidRequestError(`'${param}': no such file: ${file}`, { param, code: 'file_not_found' });
  }
  if (!allowed(policy, (e) => path.isAbsolute(e) && isUnder(real, e))) throw forbidden(param, 'local paths');
  const handle = await open(real, 'r').catch(() => {
    throw new InvalidRequestError(`'${param}': cannot read ${file}`, { param, code: 'file_unreadable' });
  });
  try {
    const info = await handle.stat();
    if (!info.isFile()) throw new InvalidRequestError(`'${param}': not a regular file: ${file}`, { param, code: 'file_unreadable' });
    if (info.size > policy.maxBytes) throw new PayloadTooLargeError(`'${param}': file is ${info.size} bytes; the limit is ${policy.maxBytes}`, { param });
    return await handle.readFile();
  } finally {
    await handle.close();
  }
}

function isUnder(file: string, dir: string): boolean {
  const rel = path.relative(path.resolve(dir), file);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

function urlAllowed(url: URL, entry: string): boolean {
  if (path.isAbsolute(entry)) return false;
  // new URL() normalises 'https://a.com' to 'https://a.com/', so a prefix never matches 'https://a.com.evil'.
  if (/^https?:\/\//i.test(entry)) return url.href.startsWith(new URL(entry).href);
  return url.hostname.toLowerCase() === entry.toLowerCase();
}

async function fetchUrl(source: string, policy: RemoteInputPolicy, param: string, signal?: AbortSignal): Promise<Buffer> {
  let url = new URL(source);
  // Redirects are followed by hand so every hop is checked against the policy.
  for (let hop = 0; hop < 5; hop++) {
    if (!allowed(policy, (e) => urlAllowed(url, e))) throw forbidden(param, 'URLs');
    const timeout = AbortSignal.timeout(30_000);
    let response: Response;
    try {
      response = await fetch(url, { redirect: 'manual', signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
    } catch (error) {
      throw new InvalidRequestError(`'${param}': could not fetch ${url.href}: ${(error as Error).message}`, { param, code: 'fetch_failed' });
    }
    const location = response.headers.get('location');
    if (response.status >= 300 && response.status < 400 && location) {
      url = new URL(location, url);
      continue;
    }
    if (!response.ok || !response.body) throw new InvalidRequestError(`'${param}': fetching ${url.href} returned HTTP ${response.status}`, { param, code: 'fetch_failed' });
    const chunks: Uint8Array[] = [];
    let total = 0;
    for await (const chunk of response.body) {
      total += chunk.byteLength;
      if (total > policy.maxBytes) throw new PayloadTooLargeError(`'${param}': ${url.href} is larger than ${policy.maxBytes} bytes`, { param });
      chunks.push(chunk);
    }
    return Buffer.concat(chunks);
  }
  throw new InvalidRequestError(`'${param}': too many redirects`, { param, code: 'fetch_failed' });
}

function forbidden(param: string, what: string): PermissionError {
  return new PermissionError(
    `'${param}': reading ${what} is not allowed on this server (allowed only while bound to loopback, or when listed in --allow-remote-input)`,
    { param, code: 'remote_input_forbidden' },
  );
}
