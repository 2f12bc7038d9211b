import express, { type Express } from 'express';
import { apiKeyCheck, requestLogger } from './middleware.js';
import { corsHeaders, hostOriginCheck, type HostOriginPolicy } from './host-origin.js';
import { errorMiddleware, notFoundRoute } from './errors.js';
import { routers } from './routes/index.js';
import { uiRouter } from './routes/ui.js';
import { assertJsonDepth } from '../api/validate.js';
import type { ServerContext } from './context.js';
import { readyRoute } from './readiness.js';
import { ollamaRoot } from './ollama-root.js';

export function createApp(ctx: ServerContext, policy: HostOriginPolicy): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(requestLogger(ctx.options));
  // Counted from the start, so refused requests count too (their route is 'unmatched').
  if (ctx.metrics) app.use(ctx.metrics.requestCounter());
  // Host and Origin first: a refused browser request does no work at all.
  app.use(hostOriginCheck(policy));
  app.use(corsHeaders(policy));
  // Liveness: the process answers (a draining server too, so that nothing restarts it mid-drain).
  app.get('/health', (_req, res) => {
    res.json({ status: 'ok' });
  });
  // Readiness, for balancers and Kubernetes; open like /health (it tells no secret: see readiness.ts).
  app.get('/ready', readyRoute(ctx));
  app.use(ctx.drain.middleware());
  // The playground's page and assets need no API key (the page asks for it and sends it with every /v1 call).
  if (ctx.options.ui !== false) app.use(uiRouter());
  // Ollama's `GET /` probe, for every request to / that asked for no page (ollama-root.ts).
  app.use(ollamaRoot);
  app.use(apiKeyCheck(ctx.options.apiKey));
  // JSON bodies of any JSON-ish content type; multipart routes use multer.
  app.use(express.json({ limit: ctx.options.maxBodyBytes, type: ['application/json', 'application/*+json'] }));
  // Bound nesting once, before any handler walks the body (see MAX_JSON_DEPTH).
  app.use((req, _res, next) => {
    assertJsonDepth(req.body);
    next();
  });
  for (const router of routers) app.use(router(ctx));
  app.use(notFoundRoute);
  app.use(errorMiddleware(ctx.options.log));
  return app;
}
