import type { ErrorRequestHandler, Request, RequestHandler } from 'express';
import multer from 'multer';
import { asLserveError, InsufficientMemoryError, LserveError, ModelLoadError, OverloadedError, NotFoundError, PayloadTooLargeError, InvalidRequestError, UnavailableError } from '../core/errors.js';

/**
 * The one place errors become HTTP responses: OpenAI's shape everywhere,
 * Anthropic's on the Anthropic routes, Ollama's (`{"error": "…"}`) on its
 * `/api/*` routes. Bad input never yields a stack trace.
 */

export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export interface AnthropicErrorBody {
  type: 'error';
  error: { type: string; message: string };
}

/**
 * busboy's errors for a multipart body the client broke: cut off mid-part
 * (a dropped upload), a bad part header, a content type without a boundary.
 * busboy throws plain Errors with no code, so the exact messages are all
 * there is to go on; matching whole messages of plain Errors, never
 * substrings, keeps real faults 500s. busboy's "Unsupported content type" and
 * "Missing Content-Type" are left out: multer only hands it requests it
 * already saw are multipart.
 */
const MALFORMED_MULTIPART = new Set([
  'Unexpected end of form',
  'Unexpected end of file',
  'Malformed part header',
  'Multipart: Boundary not found',
  'Malformed content type',
  'Malformed urlencoded form',
]);

/** multer's errors when the client hangs up mid-upload: nobody reads the answer, but it is no server fault to log. */
const ABORTED_UPLOAD = new Set(['Request aborted', 'Request closed']);

const isPlainError = (error: unknown): error is Error => error instanceof Error && Object.getPrototypeOf(error) === Error.prototype;

/** Translates whatever was thrown (ours, body-parser's, multer's, busboy's) into a typed error. */
export function toLserveError(error: unknown): LserveError {
  if (error instanceof LserveError) return error;
  if (isPlainError(error) && MALFORMED_MULTIPART.has(error.message)) {
    return new InvalidRequestError(`Malformed multipart body (${error.message}): the upload was cut off or is not valid multipart/form-data.`, { code: 'malformed_multipart' });
  }
  if (isPlainError(error) && ABORTED_UPLOAD.has(error.message)) {
    return new InvalidRequestError('The client closed the connection before the upload finished.', { code: 'request_aborted' });
  }
  const e = error as { type?: string; status?: number; code?: string; field?: string; message?: string };
  if (e?.type === 'entity.too.large' || e?.code === 'LIMIT_FILE_SIZE' || e?.code === 'LIMIT_FIELD_VALUE') {
    return new PayloadTooLargeError(`Request body too large: ${e.message ?? 'over the limit'}`, { param: e.field ?? null });
  }
  if (e?.type === 'entity.parse.failed') return new InvalidRequestError(`Malformed JSON in request body: ${e.message}`, { code: 'invalid_json' });
  if (e?.type === 'encoding.unsupported' || e?.type === 'charset.unsupported') return new InvalidRequestError(e.message ?? 'Unsupported encoding', { code: 'unsupported_encoding' });
  // Every other MulterError describes the client's form (a limit, a part with no or a bad field name), except
  // STREAM_DESTROYED, which only disk storage raises when its own write stream dies.
  if (error instanceof multer.MulterError && (error.code as string) !== 'STREAM_DESTROYED') {
    return new InvalidRequestError(`Multipart upload rejected: ${error.message}`, { code: error.code.toLowerCase(), param: error.field ?? null });
  }
  if (e?.status && e.status >= 400 && e.status < 500) return new InvalidRequestError(e.message ?? 'Bad request');
  return asLserveError(error);
}

export function openAIError(error: LserveError): OpenAIErrorBody {
  return { error: { message: error.message, type: error.type, param: error.param, code: error.code } };
}

/** Anthropic's error types for the statuses we emit. */
export function anthropicError(error: LserveError): AnthropicErrorBody {
  const type =
    error.status === 404 ? 'not_found_error'
    : error.status === 401 ? 'authentication_error'
    : error.status === 403 ? 'permission_error'
    : error.status === 413 ? 'request_too_large'
    : error.status === 503 ? 'overloaded_error'
    : error.status >= 500 ? 'api_error'
    : 'invalid_request_error';
  return { type: 'error', error: { type, message: error.message } };
}

/** Ollama's error: one sentence, the status carries the rest. */
export interface OllamaErrorBody {
  error: string;
}

export function isOllamaRoute(req: Request): boolean {
  return req.path.startsWith('/api/');
}

export function isAnthropicRoute(req: Request): boolean {
  return req.path.startsWith('/v1/anthropic/') || req.path === '/v1/messages' || req.path.startsWith('/v1/messages/') || (req.path.startsWith('/v1/models') && req.get('anthropic-version') !== undefined);
}

export function errorMiddleware(log: (message: string) => void): ErrorRequestHandler {
  return (err, req, res, _next) => {
    const error = toLserveError(err);
    // A failed model load was logged once, with its detail, by the model manager; a full queue (503) is no fault.
    const logged = error instanceof ModelLoadError || error instanceof InsufficientMemoryError || error instanceof OverloadedError;
    if (error.status >= 500 && !logged) log(`error ${req.method} ${req.path}: ${(error.cause as Error)?.stack ?? error.stack}`);
    if (res.headersSent) {
      // A stream already started: the route reports in-band; just end it.
      res.end();
      return;
    }
    if (error instanceof UnavailableError && error.retryAfterSeconds !== undefined) res.set('Retry-After', String(error.retryAfterSeconds));
    const body: OpenAIErrorBody | AnthropicErrorBody | OllamaErrorBody = isOllamaRoute(req) ? { error: error.message } : isAnthropicRoute(req) ? anthropicError(error) : openAIError(error);
    res.status(error.status).json(body);
  };
}

export const notFoundRoute: RequestHandler = (req, _res, next) => {
  next(new NotFoundError(`Unknown route: ${req.method} ${req.path}`, { code: 'unknown_route' }));
};
