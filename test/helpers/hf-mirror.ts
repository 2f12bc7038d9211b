import { createHash } from 'node:crypto';
import { createReadStream, statSync } from 'node:fs';
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';

/**
 * A local stand-in for the Hugging Face hub on 127.0.0.1: serves files the
 * test writes at `/<repo>/resolve/<revision>/<path>` the way the hub does
 * (Range requests, `x-linked-etag` with the sha256, an optional redirect to a
 * "CDN" path), and records every request so tests can assert on Range headers
 * and bytes sent. Hooks let a test cut a transfer midway or force a status.
 */

export interface MirrorFile {
  /** Serve `x-linked-etag: "<sha256>"` on the resolve response, as the hub does for LFS files. */
  linkedEtag?: boolean | string;
  /**
   * Answer the resolve URL with a 302 to a /cdn/ path (the hub's LFS redirect): on this server
   * (`true`), or on the server at this base URL (another origin, as the hub's CDN is; it must
   * serve the file too).
   */
  redirect?: boolean | string;
  /** Destroy the socket after this many body bytes, for the next `cutTimes` requests. */
  cutAfter?: number;
  cutTimes?: number;
  /** Send this many body bytes, then stall with the connection open (for abort and timeout tests). */
  stallAfter?: number;
  /** Ignore Range headers (answer 200 with the whole file). */
  ignoreRange?: boolean;
  /** Answer with this status and no body. */
  status?: number;
  /** Send the body at about this many bytes per second (for progress that can be watched). */
  bytesPerSecond?: number;
}

export interface MirrorRequest {
  url: string;
  range: string | undefined;
  /** The Authorization header the request carried. */
  authorization: string | undefined;
  status: number;
  bytesSent: number;
}

export interface Mirror {
  endpoint: string;
  dir: string;
  requests: MirrorRequest[];
  /** Writes a file the mirror serves; returns its sha256 and size. */
  put(repo: string, filePath: string, data: Buffer, options?: MirrorFile): Promise<{ sha256: string; size: number }>;
  /** Registers a file already on disk (large files for benchmarks). */
  putFile(repo: string, filePath: string, source: string, sha256: string, options?: MirrorFile): Promise<void>;
  configure(repo: string, filePath: string, options: MirrorFile): void;
  /** Body bytes sent for requests whose URL contains `fragment`. */
  bytesSent(fragment: string): number;
  close(): Promise<void>;
}

interface Served {
  file: string;
  sha256: string;
  options: MirrorFile;
}

export function sha256Of(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

export async function startMirror(): Promise<Mirror> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-mirror-'));
  const files = new Map<string, Served>();
  const requests: MirrorRequest[] = [];
  const key = (repo: string, filePath: string) => `/${repo}/resolve/main/${filePath}`;

  const server = http.createServer((req, res) => {
    const url = decodeURIComponent((req.url ?? '/').split('?')[0]!);
    const record: MirrorRequest = { url, range: req.headers.range, authorization: req.headers.authorization, status: 0, bytesSent: 0 };
    requests.push(record);
    // The hub's file listing of a repository (GET /api/models/<repo>/tree/main), from what the test put there.
    const tree = /^\/api\/models\/(.+)\/tree\/main$/.exec(url);
    if (tree) {
      const prefix = `/${tree[1]}/resolve/main/`;
      const listing = [...files.entries()].filter(([k]) => k.startsWith(prefix)).map(([k, f]) => ({ type: 'file', path: k.slice(prefix.length), size: statSync(f.file).size, oid: f.sha256, lfs: { oid: f.sha256, size: statSync(f.file).size } }));
      record.status = listing.length ? 200 : 404;
      res.writeHead(record.status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(listing.length ? listing : { error: 'Repository not found' }));
      return;
    }
    const cdn = url.startsWith('/cdn/');
    const served = files.get(cdn ? url.slice(4) : url);
    const send = (status: number, headers: Record<string, string | number> = {}) => {
      record.status = status;
      res.writeHead(status, headers);
    };
    if (!served) {
      send(404, { 'content-type': 'text/plain' });
      res.end('Entry not found');
      return;
    }
    const { options } = served;
    const etag = options.linkedEtag === true ? served.sha256 : options.linkedEtag || undefined;
    if (options.status) {
      send(options.status);
      res.end();
      return;
    }
    if (options.redirect && !cdn) {
      const base = typeof options.redirect === 'string' ? options.redirect : '';
      send(302, { location: `${base}/cdn${url}`, ...(etag ? { 'x-linked-etag': `"${etag}"` } : {}) });
      res.end();
      return;
    }
    void stat(served.file).then((info) => {
      const size = info.size;
      let start = 0;
      let status = 200;
      const headers: Record<string, string | number> = { 'content-type': 'application/octet-stream', 'accept-ranges': 'bytes' };
      if (etag && !options.redirect) headers['x-linked-etag'] = `"${etag}"`;
      const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
      if (range && !options.ignoreRange) {
        start = Number(range[1]);
        if (start >= size) {
          send(416, { 'content-range': `bytes */${size}` });
          res.end();
          return;
        }
        status = 206;
        headers['content-range'] = `bytes ${start}-${size - 1}/${size}`;
      }
      headers['content-length'] = size - start;
      send(status, headers);
      const cut = options.cutAfter !== undefined && (options.cutTimes ?? 1) > 0;
      if (cut) options.cutTimes = (options.cutTimes ?? 1) - 1;
      const stream = createReadStream(served.file, { start });
      stream.on('data', (chunk: Buffer | string) => {
        const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
        if (options.stallAfter !== undefined && record.bytesSent + buf.length >= options.stallAfter) {
          const keep = buf.subarray(0, options.stallAfter - record.bytesSent);
          record.bytesSent += keep.length;
          stream.destroy();
          res.write(keep);
          return;
        }
        if (cut && record.bytesSent + buf.length >= options.cutAfter!) {
          const keep = buf.subarray(0, options.cutAfter! - record.bytesSent);
          record.bytesSent += keep.length;
          stream.destroy();
          // Flush what we promised to cut at, then kill the connection mid-body.
          res.write(keep, () => setTimeout(() => res.socket?.destroy(), 20));
          return;
        }
        record.bytesSent += buf.length;
        if (options.bytesPerSecond) {
          stream.pause();
          res.write(buf);
          setTimeout(() => stream.resume(), (buf.length / options.bytesPerSecond) * 1000);
          return;
        }
        if (!res.write(buf)) {
          stream.pause();
          res.once('drain', () => stream.resume());
        }
      });
      stream.on('end', () => res.end());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    endpoint: `http://127.0.0.1:${port}`,
    dir,
    requests,
    async put(repo, filePath, data, options = {}) {
      const file = path.join(dir, repo, filePath);
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(file, data);
      const sha256 = sha256Of(data);
      files.set(key(repo, filePath), { file, sha256, options });
      return { sha256, size: data.length };
    },
    async putFile(repo, filePath, source, sha256, options = {}) {
      files.set(key(repo, filePath), { file: source, sha256, options });
    },
    configure(repo, filePath, options) {
      const served = files.get(key(repo, filePath));
      if (!served) throw new Error(`not served: ${repo}/${filePath}`);
      served.options = options;
    },
    bytesSent(fragment) {
      return requests.filter((r) => r.url.includes(fragment)).reduce((sum, r) => sum + r.bytesSent, 0);
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A catalog file (models.json shape) written to a temp dir, for Engine / CLI tests. */
export async function writeCatalog(dir: string, models: unknown[]): Promise<string> {
  const file = path.join(dir, 'models.json');
  await writeFile(file, JSON.stringify({ version: 1, models }, null, 2));
  return file;
}

/** Deterministic pseudo-random bytes (incompressible, so sizes and hashes are realistic). */
export function testBytes(size: number, seed = 1): Buffer {
  const out = Buffer.alloc(size);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < size; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}
