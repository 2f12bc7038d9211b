import { Router } from 'express';
import type { ServerContext } from '../context.js';

/**
 * GET /metrics: Prometheus text format (see ../metrics.ts). Only with
 * `serve --metrics`: otherwise there is no such route (404), as with
 * llama-server. It sits behind the same Host/Origin checks and API key as
 * every route: with a key set, the scraper sends it (Prometheus'
 * `authorization` / `bearer_token` settings).
 */
export function metricsRouter({ metrics }: ServerContext): Router {
  const router = Router();
  if (metrics) router.get('/metrics', (req, res) => metrics.send(req, res));
  return router;
}
