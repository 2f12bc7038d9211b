import type { RequestHandler } from 'express';
import { ShuttingDownError } from '../core/errors.js';

/** Retry-After (seconds) on a request refused while draining: a balancer's retry reaches another replica at once. */
export const DRAIN_RETRY_AFTER_S = 1;

/** `lserve serve` defaults: --drain-grace 5s, --drain-timeout 30s. */
export const DRAIN_DEFAULTS = { graceMs: 5_000, timeoutMs: 30_000 } as const;

export interface DrainOptions {
  /**
   * How long after the drain begins the server keeps accepting and serving new
   * requests while GET /ready already answers 503, so that a balancer probing
   * /ready (or Kubernetes removing the pod's endpoint) stops sending work
   * before connections are refused. Counted within `timeoutMs`.
   */
  graceMs: number;
  /** From the start of the drain, the longest in-flight work (requests, streams, WebSocket sessions) may take; then it is cancelled. */
  timeoutMs: number;
}

/**
 * Where a server is in its drain (SIGTERM behind a balancer): not draining;
 * `draining` (GET /ready is 503, lserve_draining is 1, new requests are still
 * served but their connections close after the answer); then `refusing` (the
 * listener is closed; a request that still arrives on an open connection is a
 * 503 `shutting_down` with Retry-After and Connection: close). It also counts
 * the work in flight, so the drain ends as soon as the last stream does.
 */
export class Drain {
  draining = false;
  refusing = false;
  private active = 0;
  private readonly idleWaiters = new Set<() => void>();

  /** Requests and WebSocket sessions (from their upgrade) not yet over. */
  get inFlight(): number {
    return this.active;
  }

  /** Counts one piece of work (a request, a WebSocket) until the function returned is called (more calls do nothing). */
  enter(): () => void {
    this.active++;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      if (--this.active === 0) for (const wake of this.idleWaiters) wake();
    };
  }

  /**
   * Resolves after `ms`, at once when `signal` aborts (the server closes
   * meanwhile), and with `untilIdle` as soon as nothing is in flight.
   */
  wait(ms: number, signal: AbortSignal, untilIdle = false): Promise<void> {
    if (signal.aborted || (untilIdle && this.active === 0)) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        this.idleWaiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      signal.addEventListener('abort', done, { once: true });
      if (untilIdle) this.idleWaiters.add(done);
    });
  }

  /** For every request after /health and /ready: Connection: close while draining; the 503 once refusing. */
  middleware(): RequestHandler {
    return (_req, res, next) => {
      if (!this.draining) return next();
      res.setHeader('Connection', 'close');
      if (!this.refusing) return next();
      res.setHeader('Retry-After', String(DRAIN_RETRY_AFTER_S));
      next(new ShuttingDownError());
    };
  }
}
