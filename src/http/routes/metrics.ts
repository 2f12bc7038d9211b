import { Router } from 'express';
import { NotFoundError } from '../../core/errors.js';
import type { ServerContext } from '../context.js';

/**
 * GET /metrics: Prometheus text format (see ../metrics.ts). Only with
 * `serve --metrics`: otherwise a 404, as with llama-server, that says how to
 * turn them on. It sits behind the same Host/Origin checks and API key as
 * every route: with a key set, the scraper sends it (Prometheus'
 * `authorization` / `bearer_token` settings).
 */
export function metricsRouter({ metrics }: ServerContext): Router {
  const router = Router();
  if (metrics) router.get('/metrics', (req, res) => metrics.send(req, res));
  else {
    router.get('/metrics', () => {
      throw new NotFoundError('Metrics are off on this server: start it with `lserve serve --metrics` to serve them at GET /metrics (Prometheus text format).', {
        code: 'metrics_disabled',
      });
    });
  }
  return router;
}
