import { Router } from 'express';
import type { RunningModel, RunningModelList } from '../../api/ps.js';
import { peakResidentBytes, residentBytes } from '../../core/process-memory.js';
import type { ServerContext } from '../context.js';

/**
 * GET /v1/ps: the loaded models, their memory, the requests on them and when
 * each unloads (`lserve ps`). Under /v1 with every other lserve endpoint,
 * behind the same Host/Origin checks and API key. Not at Ollama's /api/ps:
 * its fields (name, digest, size_vram, details…) are Ollama's own, and a path
 * that looks like Ollama's API but answers in another shape would mislead
 * Ollama clients rather than serve them.
 */
export function psRouter({ engine }: ServerContext): Router {
  const router = Router();
  router.get('/v1/ps', (_req, res) => {
    const models: RunningModel[] = engine.manager
      .loaded()
      .sort((a, b) => a.id.localeCompare(b.id))
      .map((m) => ({
        id: m.id,
        kind: m.kind,
        memory_bytes: m.memoryBytes,
        pid: m.pid ?? null,
        rss_bytes: m.pid === undefined ? null : (residentBytes(m.pid) ?? null),
        peak_rss_bytes: m.pid === undefined ? null : (peakResidentBytes(m.pid) ?? null),
        active_requests: Math.max(0, m.activeRequests - m.queued),
        queued: m.queued,
        loaded_at: new Date(m.loadedAt).toISOString(),
        expires_at: m.expiresAt === null ? null : new Date(m.expiresAt).toISOString(),
      }));
    const body: RunningModelList = { models };
    res.json(body);
  });
  return router;
}
