import {
  AuthenticationError,
  ClientClosedError,
  InsufficientMemoryError,
  InvalidMediaError,
  InvalidRequestError,
  LserveError,
  ModelLoadError,
  ModelNotFoundError,
  NotFoundError,
  OverloadedError,
  PayloadTooLargeError,
  PermissionError,
  ServerError,
  StoreError,
  UnsupportedError,
  UnsupportedMediaError,
  type ErrorType,
} from '../../core/errors.js';
import type { LoadOptions } from '../../core/loader.js';

/**
 * What crosses a runner's IPC channel besides plain data: errors (with the
 * class, status, code and param the server renders), and in a call's
 * arguments the two things structured clone cannot carry — functions (a
 * progress callback, a sink for audio blocks, another model's decode method)
 * and AbortSignals. Both become references the other side turns back into a
 * function that calls across, or a signal the server aborts.
 */

/** Load options without the functions (the runner logs through its channel). */
export type WireLoadOptions = Omit<LoadOptions, 'log' | 'report'>;

export interface WireError {
  name: string;
  message: string;
  stack?: string;
  /** An LserveError's fields. */
  status?: number;
  type?: ErrorType;
  code?: string | null;
  param?: string | null;
}

/** Every LserveError class, by name: a runner's error is the same class on the server, so it renders the same. */
const ERROR_CLASSES: Record<string, { prototype: LserveError }> = Object.fromEntries(
  [
    InvalidRequestError,
    UnsupportedError,
    AuthenticationError,
    PermissionError,
    NotFoundError,
    ModelNotFoundError,
    PayloadTooLargeError,
    InvalidMediaError,
    UnsupportedMediaError,
    ClientClosedError,
    OverloadedError,
    ServerError,
    ModelLoadError,
    InsufficientMemoryError,
    StoreError,
  ].map((c) => [c.name, c]),
);

export function toWireError(error: unknown): WireError {
  if (error instanceof LserveError) {
    return { name: error.name, message: error.message, stack: error.stack, status: error.status, type: error.type, code: error.code, param: error.param };
  }
  if (error instanceof Error) return { name: error.name, message: error.message, stack: error.stack };
  return { name: 'Error', message: String(error) };
}

export function fromWireError(wire: WireError): Error {
  if (wire.status !== undefined && wire.type !== undefined) {
    const error = new LserveError(wire.status, wire.type, wire.message, { code: wire.code, param: wire.param });
    const known = ERROR_CLASSES[wire.name];
    if (known) Object.setPrototypeOf(error, known.prototype);
    error.name = wire.name;
    if (wire.stack) error.stack = wire.stack;
    return error;
  }
  if (wire.name === 'AbortError' || wire.name === 'TimeoutError') return new DOMException(wire.message, wire.name);
  const error = new Error(wire.message);
  error.name = wire.name;
  if (wire.stack) error.stack = wire.stack;
  return error;
}

/**
 * The key of a method that says what an object crosses the channel as,
 * when it is not plain data: a model's client handed to another model's
 * call (a latent decoder in an image job) crosses as what that model may use
 * of it, its methods becoming callbacks to the server.
 */
export const CROSSES_AS = Symbol('lserve.runner.crossesAs');

/** An object that crosses the channel as the value its `CROSSES_AS` method returns. */
export interface CrossesAs {
  [CROSSES_AS](): object;
}

function crossesAs(value: object): value is CrossesAs {
  return typeof Reflect.get(value, CROSSES_AS) === 'function';
}

const CALLBACK = '$runnerCallback';
const SIGNAL = '$runnerSignal';

/** Data that structured clone copies as it is (typed arrays and buffers as bytes). */
function isCloneable(value: object): boolean {
  return ArrayBuffer.isView(value) || value instanceof ArrayBuffer || value instanceof Date || value instanceof Map || value instanceof Set || value instanceof Error;
}

function isPlain(value: object): boolean {
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * A call's arguments for the wire: each function is handed to `callback`,
 * which returns its reference number; an AbortSignal is handed to `signal`.
 * Plain objects and arrays are walked, an object with a `CROSSES_AS` method
 * is replaced by what it returns; anything else must be cloneable.
 */
export function encodeArgs(args: readonly unknown[], callback: (fn: (...args: unknown[]) => unknown) => number, signal: (signal: AbortSignal) => void): unknown[] {
  const encode = (value: unknown): unknown => {
    if (typeof value === 'function') return { [CALLBACK]: callback(value as (...args: unknown[]) => unknown) };
    if (value === null || typeof value !== 'object') return value;
    if (value instanceof AbortSignal) {
      signal(value);
      return { [SIGNAL]: true };
    }
    if (Array.isArray(value)) return value.map(encode);
    if (isCloneable(value)) return value;
    if (crossesAs(value)) return encode(value[CROSSES_AS]());
    if (!isPlain(value)) throw new TypeError(`a ${value.constructor?.name ?? 'class instance'} cannot be passed to a model in a runner process`);
    return Object.fromEntries(Object.entries(value).map(([key, v]) => [key, encode(v)]));
  };
  return args.map(encode);
}

/** The runner's side of encodeArgs: references become `callback(n)` and the call's `signal`. */
export function decodeArgs(args: readonly unknown[], callback: (reference: number) => (...args: unknown[]) => Promise<unknown>, signal: AbortSignal): unknown[] {
  const decode = (value: unknown): unknown => {
    if (value === null || typeof value !== 'object' || isCloneable(value)) return value;
    if (Array.isArray(value)) return value.map(decode);
    const record = value as Record<string, unknown>;
    if (typeof record[CALLBACK] === 'number') return callback(record[CALLBACK]);
    if (record[SIGNAL] === true) return signal;
    return Object.fromEntries(Object.entries(record).map(([key, v]) => [key, decode(v)]));
  };
  return args.map(decode);
}
