/**
 * One typed hierarchy for every failure the engine reports. Each class carries
 * the HTTP status and OpenAI error `type` it maps to, so routes only throw and
 * one middleware renders (see src/http/errors.ts).
 */
export type ErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'overloaded_error'
  | 'server_error';

export interface ErrorDetails {
  code?: string | null;
  param?: string | null;
  cause?: unknown;
}

export class LserveError extends Error {
  readonly status: number;
  readonly type: ErrorType;
  readonly code: string | null;
  readonly param: string | null;

  constructor(status: number, type: ErrorType, message: string, details: ErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.status = status;
    this.type = type;
    this.code = details.code ?? null;
    this.param = details.param ?? null;
  }
}

/** 400: the request is malformed or names a value the engine cannot honour. */
export class InvalidRequestError extends LserveError {
  constructor(message: string, details: ErrorDetails = {}) {
    super(400, 'invalid_request_error', message, { code: 'invalid_request', ...details });
  }
}

/** 400: a parameter that is valid in the API but not supported by this model or engine. */
export class UnsupportedError extends LserveError {
  constructor(message: string, details: ErrorDetails = {}) {
    super(400, 'invalid_request_error', message, { code: 'unsupported_parameter', ...details });
  }
}

export class AuthenticationError extends LserveError {
  constructor(message = 'Invalid or missing API key.') {
    super(401, 'authentication_error', message, { code: 'invalid_api_key' });
  }
}

/** 403: the request is understood but not allowed by this server's policy. */
export class PermissionError extends LserveError {
  constructor(message: string, details: ErrorDetails = {}) {
    super(403, 'permission_error', message, { code: 'permission_denied', ...details });
  }
}

export class NotFoundError extends LserveError {
  constructor(message: string, details: ErrorDetails = {}) {
    super(404, 'not_found_error', message, { code: 'not_found', ...details });
  }
}

/** 404 for an unknown or not-installed model; the message says how to get it. */
export class ModelNotFoundError extends NotFoundError {
  constructor(message: string, param = 'model') {
    super(message, { code: 'model_not_found', param });
  }
}

export class PayloadTooLargeError extends LserveError {
  constructor(message: string, details: ErrorDetails = {}) {
    super(413, 'invalid_request_error', message, { code: 'payload_too_large', ...details });
  }
}

/** 412: a conditional request (If-Match, If-Unmodified-Since) whose condition does not hold for the file. */
export class PreconditionFailedError extends LserveError {
  constructor(message: string) {
    super(412, 'invalid_request_error', message, { code: 'precondition_failed' });
  }
}

/** 416: a byte range that starts past the end of the file (the route states the length in Content-Range). */
export class RangeNotSatisfiableError extends LserveError {
  constructor(message: string) {
    super(416, 'invalid_request_error', message, { code: 'range_not_satisfiable' });
  }
}

/**
 * 400: an image or audio payload that cannot be decoded (not an image, a
 * format lserve does not read, truncated, empty), as OpenAI answers it: code
 * `invalid_image` or `invalid_audio`, `param` naming the field. SDK users
 * catch it as a BadRequestError. The message says what is wrong with the
 * file and never quotes its bytes.
 */
export class InvalidMediaError extends LserveError {
  constructor(media: 'image' | 'audio', message: string, details: Omit<ErrorDetails, 'code'> = {}) {
    super(400, 'invalid_request_error', message, { ...details, code: media === 'image' ? 'invalid_image' : 'invalid_audio' });
  }
}

/** 415: a body whose Content-Type the route does not take (never for a payload that fails to decode: that is InvalidMediaError). */
export class UnsupportedMediaError extends LserveError {
  constructor(message: string, details: ErrorDetails = {}) {
    super(415, 'invalid_request_error', message, { code: 'unsupported_media_type', ...details });
  }
}

/** 499 (nginx's "client closed request"): the client left before the answer; nobody reads it, and it is no server fault. */
export class ClientClosedError extends LserveError {
  constructor() {
    super(499, 'invalid_request_error', 'The client closed the connection.', { code: 'client_closed_request' });
  }
}

export class OverloadedError extends LserveError {
  constructor(message = 'The server is busy; the request queue is full. Retry later.') {
    super(503, 'overloaded_error', message, { code: 'overloaded' });
  }
}

/** 503 while the server drains (SIGTERM): it takes no new work; a balancer sends the request to another replica. */
export class ShuttingDownError extends LserveError {
  constructor(message = 'The server is shutting down and takes no new requests; retry, and another replica will answer.') {
    super(503, 'overloaded_error', message, { code: 'shutting_down' });
  }
}

/**
 * 503: a service the server depends on (the object storage holding its
 * files, the shared state database) failed or could not be reached; retrying
 * may work, after `retryAfterSeconds` when it is given (the Retry-After header).
 */
export class UnavailableError extends LserveError {
  readonly retryAfterSeconds: number | undefined;

  constructor(message: string, details: ErrorDetails & { retryAfterSeconds?: number } = {}) {
    super(503, 'server_error', message, { code: 'service_unavailable', ...details });
    this.retryAfterSeconds = details.retryAfterSeconds;
  }
}

/** 500: a real fault inside the engine (never used for bad input). */
export class ServerError extends LserveError {
  constructor(message: string, details: ErrorDetails = {}) {
    super(500, 'server_error', message, { code: 'server_error', ...details });
  }
}

/** 500: a model that cannot be loaded (corrupt or incomplete file, unsupported architecture…); the message names the model and the cause. */
export class ModelLoadError extends LserveError {
  constructor(message: string, details: ErrorDetails = {}) {
    super(500, 'server_error', message, { code: 'model_load_failed', ...details });
  }
}

/** 507: a model whose contexts do not fit the memory budget or the free RAM; the message says what to change. */
export class InsufficientMemoryError extends LserveError {
  constructor(message: string, details: ErrorDetails = {}) {
    super(507, 'server_error', message, { code: 'insufficient_memory', ...details });
  }
}

/** Failures of the model store and downloads; the CLI prints these verbatim. */
export class StoreError extends LserveError {
  constructor(message: string, code: string, cause?: unknown) {
    super(500, 'server_error', message, { code, cause });
  }
}

export function isLserveError(value: unknown): value is LserveError {
  return value instanceof LserveError;
}

/** `error` as an LserveError: itself, or a 500 that keeps it as its cause (for the log, never for the client). */
export function asLserveError(error: unknown): LserveError {
  return isLserveError(error) ? error : new ServerError('Internal server error', { cause: error });
}
