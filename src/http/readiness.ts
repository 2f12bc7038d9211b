import type { RequestHandler } from 'express';
import { readdir } from 'node:fs/promises';
import type { ReadinessCheck, ServerContext } from './context.js';

/**
 * GET /ready: whether this replica should get work (a balancer's health check,
 * a Kubernetes readinessProbe), where GET /health only says the process lives.
 * Unready while the server drains (SIGTERM), or while a dependency it needs to
 * serve fails its check: the model store cannot be read, or a state backend
 * registered in `ctx.readiness` does not answer. A model that is loading, or
 * one that failed to load, does not make the replica unready: another replica
 * would do no better with the same model, and the others keep serving.
 *
 * 200 {"status":"ready","draining":false,"checks":{"model_store":"ok",…}}
 * 503 {"status":"unready","draining":false,"checks":{"model_store":"ok","database":"timeout"}}
 * 503 {"status":"unready","draining":true,"checks":{}}   (no check runs once draining)
 *
 * A check's value is `ok`, `failed` or `timeout`, never its error: the route
 * is open (no API key, like /health), and errors can name hosts and users.
 * The error goes to the server's log, once each time a check starts failing.
 */

export type CheckOutcome = 'ok' | 'failed' | 'timeout';

/** Each check's bound unless ServerOptions.readinessTimeoutMs says otherwise: under a readinessProbe's timeoutSeconds (deploy/kubernetes uses 3). */
export const READINESS_TIMEOUT_MS = 2_000;

/** The model store can be listed (no store yet is fine: bundled models still serve). */
export function modelStoreCheck(modelsDir: string): ReadinessCheck {
  return {
    name: 'model_store',
    async check() {
      try {
        await readdir(modelsDir);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      }
    },
  };
}

async function run(check: ReadinessCheck, timeoutMs: number): Promise<{ outcome: CheckOutcome; error?: unknown }> {
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)));
  try {
    const outcome = await Promise.race([check.check(controller.signal).then(() => 'ok' as const), timedOut]);
    return outcome === 'ok' ? { outcome } : { outcome, error: new Error(`no answer within ${timeoutMs} ms`) };
  } catch (error) {
    return { outcome: 'failed', error };
  } finally {
    clearTimeout(timer);
    controller.abort(new Error('readiness check over'));
  }
}

export function readyRoute(ctx: ServerContext): RequestHandler {
  // Last outcome of each check, so that a failing dependency is logged when it starts (and stops) failing, not at every probe.
  const last = new Map<string, CheckOutcome>();
  return async (_req, res) => {
    res.setHeader('Cache-Control', 'no-store');
    if (ctx.drain.draining) {
      res.status(503).json({ status: 'unready', draining: true, checks: {} });
      return;
    }
    const timeoutMs = ctx.options.readinessTimeoutMs ?? READINESS_TIMEOUT_MS;
    const results = await Promise.all(ctx.readiness.map(async (check) => ({ name: check.name, ...(await run(check, timeoutMs)) })));
    for (const { name, outcome, error } of results) {
      if (last.get(name) === outcome) continue;
      if (outcome !== 'ok') ctx.options.log(`ready check '${name}' ${outcome}: ${(error as Error)?.message ?? String(error)}`);
      else if (last.has(name)) ctx.options.log(`ready check '${name}' ok again`);
      last.set(name, outcome);
    }
    const ready = results.every((r) => r.outcome === 'ok');
    res.status(ready ? 200 : 503).json({ status: ready ? 'ready' : 'unready', draining: false, checks: Object.fromEntries(results.map((r) => [r.name, r.outcome])) });
  };
}
