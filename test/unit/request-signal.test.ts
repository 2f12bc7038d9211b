import { EventEmitter, getEventListeners } from 'node:events';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Request, Response } from 'express';
import { describe, expect, it } from 'vitest';
import { ClientClosedError } from '../../src/core/errors.js';
import { requestSignal } from '../../src/http/context.js';

/** A request's signal: the client leaving or the server shutting down aborts it, and the server-wide signal keeps nothing of a finished request. */

function exchange(): { req: Request; res: Response & { writableFinished: boolean } } {
  const req = new EventEmitter() as unknown as Request;
  const res = Object.assign(new EventEmitter(), { writableFinished: false }) as unknown as Response & { writableFinished: boolean };
  return { req, res };
}

describe('requestSignal', () => {
  it('aborts with ClientClosedError when the client leaves before the response is complete', () => {
    const shutdown = new AbortController();
    const { req, res } = exchange();
    const signal = requestSignal(req, res, shutdown.signal);
    res.emit('close');
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBeInstanceOf(ClientClosedError);
  });

  it('aborts with the shutdown reason when the server shuts down, also when it already had', () => {
    const shutdown = new AbortController();
    const { req, res } = exchange();
    const signal = requestSignal(req, res, shutdown.signal);
    const reason = new Error('server shutting down');
    shutdown.abort(reason);
    expect(signal.reason).toBe(reason);
    expect(requestSignal(req, res, shutdown.signal).reason).toBe(reason);
  });

  it('leaves no listener on the server-wide signal once the response ended, however many requests ran', () => {
    const shutdown = new AbortController();
    for (let i = 0; i < 1000; i++) {
      const { req, res } = exchange();
      const signal = requestSignal(req, res, shutdown.signal);
      res.writableFinished = true;
      res.emit('close');
      expect(signal.aborted).toBe(false);
    }
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
  });

  it('keeps nothing of a finished request on the server-wide signal (AbortSignal.any kept ≈ 50 bytes a request on Node 20)', () => {
    v8.setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const shutdown = new AbortController();
    const requests = (n: number) => {
      for (let i = 0; i < n; i++) {
        const { req, res } = exchange();
        requestSignal(req, res, shutdown.signal);
        res.writableFinished = true;
        res.emit('close');
      }
    };
    requests(2000);
    gc();
    const before = process.memoryUsage().heapUsed;
    requests(100_000);
    gc();
    expect(process.memoryUsage().heapUsed - before).toBeLessThan(2 * 2 ** 20);
  });
});
