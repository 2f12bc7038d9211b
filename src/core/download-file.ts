import { createHash, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { rm, stat, statfs } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { StoreError } from './errors.js';
import { originOf } from './hub-auth.js';
import { formatBytes } from './units.js';

/**
 * Downloads one file over HTTP(S) into a `.part` file, resuming what is
 * already there with a Range request, hashing while streaming, and verifying
 * size and sha256 at the end. The `.part` file is kept on any failure except
 * a checksum mismatch, so the next attempt continues where this one stopped.
 */

export interface FileTransfer {
  url: string;
  /** Bytes are appended here; kept on failure so a later attempt resumes. */
  partPath: string;
  /** The file's name in messages. */
  label: string;
  expectedSize?: number;
  expectedSha256?: string;
  /** How to say where files come from when the network fails (e.g. the HF_ENDPOINT hint). */
  networkHint?: string;
  /** The hub: its token goes to URLs of its origin only, and its 401/403 answers say how to get access. */
  hub?: HubAccess;
  signal?: AbortSignal;
  /** Abort when no bytes arrive for this long (connect, headers and body). */
  idleTimeoutMs: number;
  onStart(info: { totalBytes: number | undefined; resumedFrom: number }): void;
  onData(receivedBytes: number): void;
}

export interface HubAccess {
  origin: string;
  /** Sent as a Bearer token on each hop to `origin`, dropped on a hop to any other (the CDN). */
  token: string | undefined;
  /** The message for a 401/403 from `origin` for `url`. */
  deniedHint(status: number, url: string): string;
}

export interface TransferResult {
  size: number;
  sha256: string;
  /** What the digest was checked against: the catalog, the server's ETag, or nothing. */
  verifiedWith: 'catalog' | 'etag' | null;
}

/** Error codes worth another attempt in the same pull (the `.part` file makes it a resume). */
export const TRANSIENT_CODES = new Set(['download_interrupted', 'network_timeout', 'http_5xx']);

const MAX_REDIRECTS = 10;

export async function transferFile(t: FileTransfer): Promise<TransferResult> {
  const idle = new IdleAbort(t.idleTimeoutMs, t.signal);
  const phase: Phase = { connected: false };
  try {
    // At most one restart: a server that answers a Range with the wrong offset gets a fresh download.
    for (let restart = 0; ; restart++) {
      const outcome = await attempt(t, idle, restart > 0, phase);
      if (outcome !== 'restart') return outcome;
    }
  } catch (error) {
    throw classify(error, t, idle, phase);
  } finally {
    idle.dispose();
  }
}

/** Whether a server answered: a failure before that is a connection that could not be made, not a download cut short. */
interface Phase {
  connected: boolean;
  /** The URL being fetched (a redirect's target after a redirect). */
  at?: string;
}

async function attempt(t: FileTransfer, idle: IdleAbort, restarted: boolean, phase: Phase): Promise<TransferResult | 'restart'> {
  let existing = await sizeOf(t.partPath);
  if (restarted || (t.expectedSize !== undefined && existing > t.expectedSize)) {
    await rm(t.partPath, { force: true });
    existing = 0;
  }
  const { response, linkedEtag } = await request(t, existing, idle, phase);
  phase.connected = true;
  let total: number | undefined;
  if (response.status === 416) {
    // Nothing past our offset: complete if the server's size (or the catalog's) matches what we have.
    await response.body?.cancel();
    const size = contentRangeTotal(response.headers.get('content-range')) ?? t.expectedSize;
    if (existing > 0 && size === existing) return finish(t, await hashFile(t.partPath), existing, linkedEtag);
    if (restarted) throw httpError(t, response);
    return 'restart';
  } else if (response.status === 206) {
    const range = parseContentRange(response.headers.get('content-range'));
    if (!range || range.start !== existing) {
      await response.body?.cancel();
      if (restarted) throw new StoreError(`${t.url} answered a resume request with an unexpected range ('${response.headers.get('content-range')}')`, 'bad_range');
      return 'restart';
    }
    total = range.total ?? addLength(existing, response.headers.get('content-length'));
  } else if (response.status === 200) {
    // A server that ignores Range sends the whole file: start over rather than append.
    existing = 0;
    total = addLength(0, response.headers.get('content-length'));
  } else {
    await response.body?.cancel();
    throw httpError(t, response);
  }
  if (!response.body) throw new StoreError(`${t.url} sent no body`, 'http_error');
  if (t.expectedSize !== undefined && total !== undefined && total !== t.expectedSize) {
    await response.body.cancel();
    await rm(t.partPath, { force: true });
    throw new StoreError(
      `Size mismatch for ${t.label}: the catalog says ${t.expectedSize} bytes but ${t.url} serves ${total} bytes`,
      'size_mismatch',
    );
  }
  await ensureSpace(t, (total ?? t.expectedSize ?? existing) - existing);

  const hash = existing > 0 ? await hashFile(t.partPath, existing) : createHash('sha256');
  idle.touch(); // hashing a large partial file is local work, not a stalled connection
  t.onStart({ totalBytes: total ?? t.expectedSize, resumedFrom: existing });
  let received = existing;
  const meter = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      received += chunk.length;
      idle.touch();
      t.onData(received);
      done(null, chunk);
    },
  });
  const body = Readable.fromWeb(response.body as NodeReadableStream<Uint8Array>);
  await pipeline(body, meter, createWriteStream(t.partPath, { flags: existing > 0 ? 'a' : 'w' }));
  if (total !== undefined && received !== total) {
    throw new StoreError(`Download of ${t.label} ended early at ${formatBytes(received)} of ${formatBytes(total)}.`, 'download_interrupted');
  }
  return finish(t, hash, received, linkedEtag);
}

async function finish(t: FileTransfer, hash: Hash, size: number, linkedEtag: string | undefined): Promise<TransferResult> {
  const actual = hash.digest('hex');
  if (t.expectedSize !== undefined && size !== t.expectedSize) {
    await rm(t.partPath, { force: true });
    throw new StoreError(`Size mismatch for ${t.label}: expected ${t.expectedSize} bytes, got ${size}`, 'size_mismatch');
  }
  const expected = t.expectedSha256 ?? linkedEtag;
  if (expected !== undefined && expected !== actual) {
    // A corrupt file cannot be resumed into a good one: drop it so the next pull starts clean.
    await rm(t.partPath, { force: true });
    throw new StoreError(
      `Checksum mismatch for ${t.label} (${t.url}): expected sha256 ${expected}, got ${actual}. The damaged download was deleted; nothing was installed.`,
      'checksum_mismatch',
    );
  }
  return { size, sha256: actual, verifiedWith: t.expectedSha256 ? 'catalog' : linkedEtag ? 'etag' : null };
}

/**
 * GET with redirects followed by hand, so the Hugging Face hop's
 * `x-linked-etag` (the LFS sha256, absent from the CDN's answer) is seen, and
 * the hub's token goes only to the hub: by origin (scheme, host and port, as
 * the Fetch standard and curl decide), so neither another host (the CDN, a
 * subdomain) nor plain http on the same host ever receives it.
 */
async function request(t: FileTransfer, offset: number, idle: IdleAbort, phase: Phase): Promise<{ response: Response; linkedEtag: string | undefined }> {
  // identity: a compressed body would break Range offsets and the size check.
  const common: Record<string, string> = { 'accept-encoding': 'identity', 'user-agent': 'lserve' };
  if (offset > 0) common.range = `bytes=${offset}-`;
  let current = t.url;
  let linkedEtag: string | undefined;
  for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
    const toHub = t.hub?.token !== undefined && originOf(current) === t.hub.origin;
    const headers = toHub ? { ...common, authorization: `Bearer ${t.hub!.token}` } : common;
    phase.at = current;
    const response = await fetch(current, { headers, redirect: 'manual', signal: idle.signal });
    idle.touch();
    linkedEtag ??= sha256Etag(response.headers.get('x-linked-etag'));
    const location = response.headers.get('location');
    if (response.status >= 300 && response.status < 400 && location) {
      await response.body?.cancel();
      current = new URL(location, current).toString();
      continue;
    }
    return { response, linkedEtag: linkedEtag ?? sha256Etag(response.headers.get('etag')) };
  }
  throw new StoreError(`Too many redirects downloading ${t.url}`, 'http_error');
}

/** An ETag that is a bare sha256 (Hugging Face LFS files); others (git blob ids, weak tags) say nothing. */
function sha256Etag(value: string | null): string | undefined {
  const tag = value?.replace(/^W\//, '').replace(/"/g, '').trim().toLowerCase();
  return tag && /^[0-9a-f]{64}$/.test(tag) ? tag : undefined;
}

function parseContentRange(value: string | null): { start: number; total: number | undefined } | undefined {
  const match = /^bytes (\d+)-\d+\/(\d+|\*)$/.exec(value?.trim() ?? '');
  if (!match) return undefined;
  return { start: Number(match[1]), total: match[2] === '*' ? undefined : Number(match[2]) };
}

function contentRangeTotal(value: string | null): number | undefined {
  const match = /\/(\d+)$/.exec(value?.trim() ?? '');
  return match ? Number(match[1]) : undefined;
}

function addLength(offset: number, contentLength: string | null): number | undefined {
  const n = contentLength === null ? NaN : Number(contentLength);
  return Number.isFinite(n) ? offset + n : undefined;
}

async function sizeOf(file: string): Promise<number> {
  try {
    return (await stat(file)).size;
  } catch {
    return 0;
  }
}

/** sha256 state over the first `length` bytes of a file (the part already downloaded). */
async function hashFile(file: string, length?: number): Promise<Hash> {
  const hash = createHash('sha256');
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      done();
    },
  });
  await pipeline(createReadStream(file, length === undefined ? {} : { end: length - 1 }), sink);
  return hash;
}

async function ensureSpace(t: FileTransfer, needed: number): Promise<void> {
  if (needed <= 0) return;
  let free: number;
  try {
    const fs = await statfs(path.dirname(t.partPath));
    free = fs.bavail * fs.bsize;
  } catch {
    return; // statfs unsupported here: ENOSPC during the write still reports it
  }
  if (free < needed) throw diskFull(t, needed, free);
}

function diskFull(t: FileTransfer, needed?: number, free?: number): StoreError {
  const amounts = needed !== undefined && free !== undefined ? ` (needs ${formatBytes(needed)} more, ${formatBytes(free)} free)` : '';
  return new StoreError(
    `Not enough disk space to download ${t.label} into ${path.dirname(t.partPath)}${amounts}. Free some space (or set LSERVE_HOME to another disk) and run the pull again.`,
    'disk_full',
  );
}

/** The error for a final answer that is not the file; `response.url` is the hop that gave it (never quoted: a CDN's is signed). */
function httpError(t: FileTransfer, response: Response): StoreError {
  const { status } = response;
  if (status === 404) return new StoreError(`Not found (HTTP 404): ${t.url}`, 'http_404');
  if (status === 401 || status === 403) {
    const fromHub = t.hub !== undefined && originOf(response.url) === t.hub.origin;
    const hint = fromHub ? t.hub!.deniedHint(status, response.url) : 'the file may be gated or private';
    return new StoreError(`Access denied (HTTP ${status}) for ${t.url}: ${hint}`, `http_${status}`);
  }
  return new StoreError(`HTTP ${status} from ${t.url}`, status >= 500 ? 'http_5xx' : 'http_error');
}

const UNREACHABLE = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'ETIMEDOUT', 'UND_ERR_CONNECT_TIMEOUT']);
/** A connection that broke: worth another attempt. */
const BROKEN = new Set(['ECONNRESET', 'UND_ERR_SOCKET', 'EPIPE']);

/** What a connection failure code means, in words. */
const CONNECT_FAILURES: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ENOTFOUND: 'no such host',
  EAI_AGAIN: 'the host name could not be resolved',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ETIMEDOUT: 'connection timed out',
  UND_ERR_CONNECT_TIMEOUT: 'connection timed out',
  ECONNRESET: 'connection reset',
  UND_ERR_SOCKET: 'connection closed',
  EPIPE: 'connection closed',
};

/**
 * Turns fetch/stream/fs failures into StoreErrors that say what happened and
 * what to do. Whether a rerun resumes is the pull's to say (it knows what it
 * kept): nothing here promises it.
 */
function classify(error: unknown, t: FileTransfer, idle: IdleAbort, phase: Phase): unknown {
  if (error instanceof StoreError) return error;
  if (t.signal?.aborted) return new StoreError(`Download of ${t.label} was cancelled.`, 'aborted', error);
  const hint = t.networkHint ? ` ${t.networkHint}` : '';
  // A CDN's URL is signed: only its origin is named.
  const origin = originOf(phase.at ?? t.url) ?? t.url;
  if (idle.timedOut) {
    const what = phase.connected ? `no data from ${t.url} for ${Math.round(t.idleTimeoutMs / 1000)} s` : `${origin} did not answer within ${Math.round(t.idleTimeoutMs / 1000)} s (${t.url})`;
    return new StoreError(`Timed out: ${what}.${hint}`, 'network_timeout', error);
  }
  const code = errorCode(error);
  if (code === 'ENOSPC' || code === 'EDQUOT') return diskFull(t);
  if (!phase.connected && (code === undefined || UNREACHABLE.has(code) || BROKEN.has(code) || error instanceof TypeError)) {
    // Not one byte came: no server answered at that address.
    const reason = code === undefined ? innermostMessage(error) : `${CONNECT_FAILURES[code] ?? code.toLowerCase().replace(/_/g, ' ')} (${code})`;
    return new StoreError(
      `Could not connect to ${origin}: ${reason}; ${t.label} was not downloaded (${t.url}). Check your network connection.${hint}`,
      code !== undefined && BROKEN.has(code) ? 'download_interrupted' : 'network_unreachable',
      error,
    );
  }
  if (code && UNREACHABLE.has(code)) {
    return new StoreError(`Lost the connection to ${origin} (${code}) while downloading ${t.label}. Check your network connection.${hint}`, 'network_unreachable', error);
  }
  if (error instanceof TypeError || (code !== undefined && BROKEN.has(code))) {
    return new StoreError(`Download of ${t.label} from ${t.url} was interrupted (${code ?? (error as Error).message}).`, 'download_interrupted', error);
  }
  return error;
}

/** The message at the bottom of an error's cause chain (fetch's "fetch failed" says nothing; its cause does). */
function innermostMessage(error: unknown): string {
  let message = error instanceof Error ? error.message : String(error);
  for (let e: unknown = error, depth = 0; e && depth < 5; depth++) {
    if (e instanceof Error && e.message) message = e.message;
    e = typeof e === 'object' && 'cause' in e ? (e as { cause: unknown }).cause : undefined;
  }
  return message;
}

/** The errno-style code of an error or of its cause chain (undici wraps socket errors in `cause`). */
function errorCode(error: unknown): string | undefined {
  for (let e: unknown = error, depth = 0; e && depth < 5; depth++) {
    if (typeof e === 'object' && 'code' in e && typeof (e as { code: unknown }).code === 'string') return (e as { code: string }).code;
    e = typeof e === 'object' && 'cause' in e ? (e as { cause: unknown }).cause : undefined;
  }
  return undefined;
}

/** An abort signal that fires on the caller's abort or after `ms` without progress. */
class IdleAbort {
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  timedOut = false;
  private readonly onAbort = () => this.controller.abort(this.parent?.reason);

  constructor(
    private readonly ms: number,
    private readonly parent?: AbortSignal,
  ) {
    if (parent?.aborted) this.controller.abort(parent.reason);
    parent?.addEventListener('abort', this.onAbort, { once: true });
    this.touch();
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  touch(): void {
    // Re-arming a timer per chunk is costly at GB/s; refresh() reuses it.
    if (this.timer) {
      this.timer.refresh();
      return;
    }
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort(new Error('idle timeout'));
    }, this.ms);
    this.timer.unref();
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.parent?.removeEventListener('abort', this.onAbort);
  }
}
