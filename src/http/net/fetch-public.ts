import { lookup } from 'node:dns/promises';
import http from 'node:http';
import https from 'node:https';
import { BlockList, isIP } from 'node:net';
import { pinnedLookup } from './pinned-fetch.js';
import { InvalidRequestError, PayloadTooLargeError, PermissionError } from '../../core/errors.js';
import { isNonPublicAddress } from './ip-ranges.js';

/**
 * GET of a client-named http(s) URL that cannot be turned against the
 * machine or its network (SSRF): the name is resolved once, every address is
 * checked, the connection goes to the checked address (a second DNS answer
 * cannot swap it for 127.0.0.1), and each redirect hop is checked the same
 * way. Bounded in bytes, redirects, idle time and total time. Errors name the
 * URL the client gave and never quote the body that came back.
 */

export interface UrlPolicy {
  /**
   * Non-public addresses a URL may reach: `true` any (`--allow-private-urls`),
   * or entries of host names, IP addresses and CIDR ranges; none by default.
   */
  allowPrivate: boolean | readonly string[];
  /** Largest body read, in bytes (larger → 413). */
  maxBytes: number;
}

export const URL_LIMITS = {
  redirects: 5,
  /** No byte for this long (connecting included) ends the fetch. */
  idleMs: 10_000,
  /** The whole fetch, redirects included. */
  totalMs: 30_000,
} as const;

const PRIVATE_FLAG = '--allow-private-urls';

interface PrivateAllowList {
  names: Set<string>;
  ranges: BlockList;
}

const compiled = new WeakMap<readonly string[], PrivateAllowList>();

/** Parses the allowlist once: `host.name`, `10.1.2.3`, `10.0.0.0/8`, `fd00::/8`. */
function allowList(entries: readonly string[]): PrivateAllowList {
  let list = compiled.get(entries);
  if (list) return list;
  list = { names: new Set(), ranges: new BlockList() };
  for (const raw of entries) {
    const entry = raw.trim().toLowerCase().replace(/^\[|\]$/g, '');
    const [address = '', prefix] = entry.split('/');
    const family = isIP(address);
    if (prefix !== undefined) {
      const bits = Number(prefix);
      if (!family || !Number.isInteger(bits) || bits < 0 || bits > (family === 4 ? 32 : 128)) throw new Error(`'${raw}' is not a CIDR range`);
      list.ranges.addSubnet(address, bits, family === 4 ? 'ipv4' : 'ipv6');
    } else if (family) list.ranges.addAddress(address, family === 4 ? 'ipv4' : 'ipv6');
    else list.names.add(entry);
  }
  compiled.set(entries, list);
  return list;
}

/** Throws unless `entries` are valid allowlist entries (for the CLI to check its flag at start). */
export function checkPrivateAllowList(entries: readonly string[]): void {
  allowList(entries);
}

function privateAllowed(policy: UrlPolicy, hostname: string, address: string): boolean {
  if (policy.allowPrivate === true) return true;
  if (policy.allowPrivate === false || policy.allowPrivate.length === 0) return false;
  const list = allowList(policy.allowPrivate);
  return list.names.has(hostname) || list.ranges.check(address, isIP(address) === 4 ? 'ipv4' : 'ipv6');
}

/** Resolves the URL's host once and returns the first address the policy lets it reach. */
export async function checkedAddress(url: URL, policy: UrlPolicy, param: string): Promise<{ address: string; family: number }> {
  const hostname = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  let candidates: Array<{ address: string; family: number }>;
  if (isIP(hostname)) candidates = [{ address: hostname, family: isIP(hostname) }];
  else {
    try {
      candidates = await lookup(hostname, { all: true, verbatim: true });
    } catch {
      throw new InvalidRequestError(`'${param}': cannot resolve the host of ${url.href}`, { param, code: 'fetch_failed' });
    }
  }
  const usable = candidates.find((c) => !isNonPublicAddress(c.address) || privateAllowed(policy, hostname, c.address));
  if (!usable) {
    throw new PermissionError(`'${param}': ${url.host} is a local or private address; URL inputs reach public addresses only unless the server runs with ${PRIVATE_FLAG}.`, {
      param,
      code: 'private_url_forbidden',
    });
  }
  return usable;
}

function get(url: URL, target: { address: string; family: number }, signal: AbortSignal): Promise<http.IncomingMessage> {
  const client = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const request = client.get(url, { lookup: pinnedLookup(target), signal, agent: false, headers: { 'user-agent': 'lserve', accept: '*/*' } }, resolve);
    request.setTimeout(URL_LIMITS.idleMs, () => request.destroy(new Error(`no answer for ${URL_LIMITS.idleMs / 1000} s`)));
    request.on('error', reject);
  });
}

async function readBody(response: http.IncomingMessage, url: URL, policy: UrlPolicy, param: string): Promise<Buffer> {
  const tooLarge = () => new PayloadTooLargeError(`'${param}': ${url.href} is larger than the ${policy.maxBytes}-byte limit`, { param });
  const declared = Number(response.headers['content-length']);
  if (Number.isFinite(declared) && declared > policy.maxBytes) {
    response.destroy();
    throw tooLarge();
  }
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of response as AsyncIterable<Buffer>) {
    total += chunk.length;
    if (total > policy.maxBytes) {
      response.destroy();
      throw tooLarge();
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, total);
}

/** Fetches `source` under the policy (see the module comment). */
export async function fetchPublicUrl(source: string, policy: UrlPolicy, param: string, signal?: AbortSignal): Promise<Buffer> {
  const deadline = AbortSignal.timeout(URL_LIMITS.totalMs);
  const combined = signal ? AbortSignal.any([signal, deadline]) : deadline;
  const failed = (url: URL, why: string) => new InvalidRequestError(`'${param}': could not fetch ${url.href}: ${why}`, { param, code: 'fetch_failed' });
  let url = new URL(source);
  for (let hop = 0; hop <= URL_LIMITS.redirects; hop++) {
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw failed(url, 'only http and https URLs are fetched');
    const target = await checkedAddress(url, policy, param);
    let response: http.IncomingMessage;
    try {
      response = await get(url, target, combined);
    } catch (error) {
      signal?.throwIfAborted();
      throw failed(url, deadline.aborted ? `took longer than ${URL_LIMITS.totalMs / 1000} s` : (error as Error).message);
    }
    const status = response.statusCode ?? 0;
    const location = response.headers.location;
    if (status >= 300 && status < 400 && location) {
      response.destroy();
      url = new URL(location, url);
      continue;
    }
    if (status < 200 || status >= 300) {
      response.destroy();
      throw failed(url, `HTTP ${status}`);
    }
    try {
      return await readBody(response, url, policy, param);
    } catch (error) {
      if (error instanceof PayloadTooLargeError) throw error;
      signal?.throwIfAborted();
      throw failed(url, deadline.aborted ? `took longer than ${URL_LIMITS.totalMs / 1000} s` : (error as Error).message);
    }
  }
  throw failed(url, `more than ${URL_LIMITS.redirects} redirects`);
}
