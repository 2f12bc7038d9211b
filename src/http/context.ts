import type { Request, Response } from 'express';
import type { Engine } from '../core/engine.js';

/** What every router gets: the engine and the server's settings. */
export interface ServerContext {
  engine: Engine;
  options: ServerOptions;
  /** Aborted when the server shuts down: in-flight work stops. */
  shutdown: AbortSignal;
}

export interface ServerOptions {
  host: string;
  port: number;
  apiKey?: string;
  /** `true` allows any origin; a string is the one allowed origin. */
  cors: boolean | string;
  /** Largest JSON body accepted, in bytes (larger → 413). */
  maxBodyBytes: number;
  /** Largest uploaded file (multipart), in bytes. */
  maxUploadBytes: number;
  /**
   * Allowlist for request fields that name a local path or URL (see
   * remote-input.ts); undefined allows them only while bound to loopback.
   */
  allowRemoteInput?: string[];
  /** A live-transcription WebSocket that sends no audio for this long is closed (default 30 s). */
  streamIdleMs?: number;
  logFormat: 'text' | 'json' | 'off';
  log: (message: string) => void;
}

/**
 * A signal that aborts when the client goes away before the response is
 * complete, or when the server shuts down: long work checks it and stops.
 */
export function requestSignal(req: Request, res: Response, shutdown: AbortSignal): AbortSignal {
  const controller = new AbortController();
  const abort = () => controller.abort(new Error('client disconnected'));
  res.on('close', () => {
    if (!res.writableFinished) abort();
  });
  req.on('aborted', abort);
  return AbortSignal.any([controller.signal, shutdown]);
}
