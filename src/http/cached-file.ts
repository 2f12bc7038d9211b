import type { ReadStream } from 'node:fs';
import type { Request, Response } from 'express';
import send from 'send';
import type { FileCache } from '../core/file-cache.js';
import { type LserveError, NotFoundError, PreconditionFailedError, RangeNotSatisfiableError, ServerError } from '../core/errors.js';

/** What `send` sets (or this module asks it to set) for a file; an error answer drops them. */
const FILE_HEADERS = ['Content-Type', 'Content-Length', 'Content-Range', 'Cache-Control', 'ETag', 'Last-Modified', 'Accept-Ranges'];

/** The part of send's http-errors error this module reads. */
interface SendError {
  status?: number;
  headers?: Record<string, string>;
}

/**
 * Answers GET and HEAD <prefix>/:name from a FileCache through `send`, the
 * module behind express.static and res.sendFile: byte ranges (206, and 416
 * past the end; several ranges get the whole file), conditional requests
 * (ETag / Last-Modified → 304, If-Match → 412), HEAD. Media players need the
 * ranges: Safari plays no <audio> without them, and seeking asks for them.
 * (res.sendFile would take its ETag switch from the app, where ETags are off
 * so that JSON answers are not hashed.)
 *
 * Only a name the cache wrote (and that has not expired) reaches `send`, and
 * `send` gets it relative to the cache's folder, refusing dotfiles and
 * directories: nothing else on disk can be reached. The type is the cache's,
 * never sniffed; the file is cacheable until it expires. Errors are the API's
 * JSON errors. A file that fails or shrinks once its bytes are under way cuts
 * the connection, so the client sees a broken download, never a short file
 * with a Content-Length it will wait on.
 */
export async function sendCachedFile(req: Request, res: Response, cache: FileCache, name: string, what: string): Promise<void> {
  const missing = () => new NotFoundError(`No ${what} named '${name}': it expired or was never written by this server.`, { code: 'file_not_found' });
  const file = await cache.get(name);
  if (!file) throw missing();
  const maxAge = Math.max(0, Math.floor((file.expiresAt - Date.now()) / 1000));
  await new Promise<void>((resolve, reject) => {
    const fail = (error: LserveError) => {
      reject(error);
      if (res.headersSent) res.destroy();
      else for (const header of FILE_HEADERS) res.removeHeader(header);
    };
    const transfer = send(req, file.name, { root: cache.dir, dotfiles: 'deny', index: false, cacheControl: false });
    // Emitted once the file is found, before send's own headers (which keep these).
    transfer.on('headers', () => {
      res.set({ 'Content-Type': file.contentType, 'Cache-Control': `private, max-age=${maxAge}, immutable`, 'X-Content-Type-Options': 'nosniff' });
    });
    transfer.on('directory', () => fail(missing()));
    transfer.on('stream', (body: ReadStream) => {
      const length = Number(res.getHeader('Content-Length'));
      // Registered before send pipes the file, so it runs before the pipe ends the response.
      body.once('end', () => {
        if (body.bytesRead < length) fail(new ServerError(`The ${what} '${name}' shrank on disk while it was being sent.`));
      });
    });
    transfer.on('error', (error: SendError) => {
      if (error.status === 412) return fail(new PreconditionFailedError(`The ${what} '${name}' does not match the request's If-Match or If-Unmodified-Since.`));
      if (error.status === 416) {
        const range = error.headers?.['Content-Range'] ?? '';
        fail(new RangeNotSatisfiableError(`The requested byte range is not within the ${what} (${range.slice(range.indexOf('/') + 1)} bytes).`));
        if (!res.headersSent) res.set('Content-Range', range);
        return;
      }
      // 404: gone from disk behind the cache. 400/403 (a bad or dotted path) cannot come from a name the cache wrote.
      if (error.status !== undefined && error.status < 500) return fail(missing());
      fail(new ServerError(`The ${what} '${name}' could not be read.`, { cause: error }));
    });
    res.once('close', () => resolve());
    transfer.pipe(res);
  });
}
