import { finished, Transform, type Readable } from 'node:stream';
import type { Request, Response } from 'express';
import type { ByteRange, FileStore, StoredFile } from '../core/files/store.js';
import { type LserveError, NotFoundError, PreconditionFailedError, RangeNotSatisfiableError, ServerError } from '../core/errors.js';

/** What this module sets for a file; an error answer drops them. */
const FILE_HEADERS = ['ETag', 'Last-Modified', 'Accept-Ranges', 'Cache-Control', 'X-Content-Type-Options'];

/**
 * Answers GET and HEAD <prefix>/:name from a FileStore (a directory or
 * object storage) as `send` (express.static) answers for a file: byte
 * ranges (206, and 416 past the end; several or malformed ranges get the
 * whole file; If-Range), conditional requests (ETag / Last-Modified → 304,
 * If-Match / If-Unmodified-Since → 412), HEAD. Media players need the
 * ranges: Safari plays no <audio> without them, and seeking asks for them.
 * Ranges are parsed by range-parser (req.range) and freshness judged by
 * `fresh` (req.fresh), the modules behind send.
 *
 * Only a name the store wrote (and that has not expired) is looked up at
 * all. The type is the store's, never sniffed; the file is cacheable until
 * it expires. Errors are the API's JSON errors, a failing storage's
 * included, as long as no byte went out. A file that fails or comes up
 * short once its bytes are under way cuts the connection, so the client
 * sees a broken download, never a short file with a Content-Length it will
 * wait on.
 */
export async function sendCachedFile(req: Request, res: Response, store: FileStore, name: string, what: string): Promise<void> {
  const missing = () => new NotFoundError(`No ${what} named '${name}': it expired or was never written by this server.`, { code: 'file_not_found' });
  const refuse = (error: LserveError) => {
    for (const header of FILE_HEADERS) res.removeHeader(header);
    return error;
  };
  const file = await store.get(name);
  if (!file) throw missing();
  const maxAge = Math.max(0, Math.floor((file.expiresAt - Date.now()) / 1000));
  res.set({
    ETag: file.etag,
    'Last-Modified': file.lastModified.toUTCString(),
    'Accept-Ranges': 'bytes',
    'Cache-Control': `private, max-age=${maxAge}, immutable`,
    'X-Content-Type-Options': 'nosniff',
  });
  if (preconditionFailed(req, file)) throw refuse(new PreconditionFailedError(`The ${what} '${name}' does not match the request's If-Match or If-Unmodified-Since.`));
  // req.fresh compares If-None-Match / If-Modified-Since with the ETag and Last-Modified just set.
  if (req.fresh) {
    res.status(304).end();
    return;
  }
  const range = requestedRange(req, file);
  if (range === 'unsatisfiable') {
    const error = refuse(new RangeNotSatisfiableError(`The requested byte range is not within the ${what} (${file.size} bytes).`));
    res.set('Content-Range', `bytes */${file.size}`);
    throw error;
  }
  const length = range ? range.end - range.start + 1 : file.size;
  const answer = () => {
    res.status(range ? 206 : 200).set({ 'Content-Type': file.contentType, 'Content-Length': String(length) });
    if (range) res.set('Content-Range', `bytes ${range.start}-${range.end}/${file.size}`);
  };
  if (req.method === 'HEAD') {
    answer();
    res.end();
    return;
  }
  let closed = false;
  res.once('close', () => (closed = true));
  const body = await store.open(file, range).catch((error: unknown) => {
    throw refuse(error as LserveError);
  });
  if (!body) throw refuse(missing());
  if (closed) {
    body.destroy();
    return;
  }
  answer();
  await streamBody(body, res, length, (problem, cause) => new ServerError(`The ${what} '${name}' ${problem}.`, { cause }), store.where);
}

/**
 * Pipes `length` bytes to the response. Ends quietly when the client leaves
 * (the body is dropped); rejects after cutting the connection when the body
 * fails or ends short.
 */
function streamBody(body: Readable, res: Response, length: number, fault: (problem: string, cause?: unknown) => ServerError, where: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let settled = false;
    const fail = (error: ServerError) => {
      if (settled) return;
      settled = true;
      reject(error);
      res.destroy();
    };
    let sent = 0;
    // The length is checked before the end is passed on: a short body never ends the response.
    const counted = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        sent += chunk.length;
        done(null, chunk);
      },
      flush(done) {
        done(sent < length ? fault(`shrank ${where} while it was being sent (${sent} of ${length} bytes)`) : null);
      },
    });
    counted.once('error', (error: ServerError) => fail(error));
    finished(body, (error) => {
      if (error) fail(fault('could not be read', error));
    });
    res.once('close', () => {
      settled = true;
      body.destroy();
      resolve();
    });
    body.pipe(counted).pipe(res);
  });
}

/** send's precondition check: If-Match against the ETag (weakly), else If-Unmodified-Since against Last-Modified. */
function preconditionFailed(req: Request, file: StoredFile): boolean {
  const match = req.headers['if-match'];
  if (match) {
    const tags = match.split(',').map((tag) => tag.trim());
    return match.trim() !== '*' && tags.every((tag) => tag !== file.etag && `W/${tag}` !== file.etag && tag !== `W/${file.etag}`);
  }
  const unmodifiedSince = Date.parse(req.headers['if-unmodified-since'] ?? '');
  return !Number.isNaN(unmodifiedSince) && Date.parse(file.lastModified.toUTCString()) > unmodifiedSince;
}

/**
 * The one byte range to send, undefined for the whole file (no Range, a
 * malformed one, several, or a stale If-Range), or 'unsatisfiable' (416).
 */
function requestedRange(req: Request, file: StoredFile): ByteRange | 'unsatisfiable' | undefined {
  if (!/^ *bytes=/.test(req.headers.range ?? '')) return undefined;
  const ranges = req.range(file.size, { combine: true });
  if (!ranges || ranges === -2 || !rangeStillValid(req, file)) return undefined;
  if (ranges === -1) return 'unsatisfiable';
  return ranges.length === 1 ? { start: ranges[0]!.start, end: ranges[0]!.end } : undefined;
}

/** If-Range: the range holds only for the file it names (by ETag or date). */
function rangeStillValid(req: Request, file: StoredFile): boolean {
  const ifRange = req.get('If-Range');
  if (!ifRange) return true;
  if (ifRange.includes('"')) return ifRange.includes(file.etag);
  return Date.parse(file.lastModified.toUTCString()) <= Date.parse(ifRange);
}
