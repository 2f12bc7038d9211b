import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Router, type Response } from 'express';
import { NotFoundError } from '../../core/errors.js';
import { wantsHtml } from '../ollama-root.js';

/**
 * The playground: one page at `/` and its assets at `/ui/<file>`, built from
 * src/ui into dist/ui (plain TypeScript modules, HTML and CSS; no CDN, no
 * framework). The page calls the public /v1 API like any client, so it adds
 * no power: it is served without the API key (it asks for the key and sends
 * it), behind the same Host and Origin checks as every route, and a strict
 * Content-Security-Policy allows only this server's own scripts, styles and
 * connections. The files are read once, at start-up; only those names are
 * served. `lserve serve --no-ui` leaves the routes out. The page goes to
 * requests that ask for HTML (browsers); `/` answers others as Ollama does.
 */

export const UI_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' blob: data:",
  "media-src 'self' blob:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};

/**
 * Where the built page lives: dist/ui beside the compiled server, or (when
 * the server runs from its TypeScript sources, as in the tests) the build's
 * dist/ui.
 */
export function uiDirectory(): string | undefined {
  const candidates = [new URL('../../ui/', import.meta.url), new URL('../../../dist/ui/', import.meta.url)].map((u) => fileURLToPath(u));
  return candidates.find((dir) => existsSync(path.join(dir, 'index.html')) && existsSync(path.join(dir, 'main.js')));
}

function loadAssets(dir: string | undefined): Map<string, { type: string; body: Buffer }> {
  const assets = new Map<string, { type: string; body: Buffer }>();
  if (!dir) return assets;
  for (const name of readdirSync(dir)) {
    const type = TYPES[path.extname(name)];
    if (type && /^[\w.-]+$/.test(name)) assets.set(name, { type, body: readFileSync(path.join(dir, name)) });
  }
  return assets;
}

export function uiRouter(dir = uiDirectory()): Router {
  const router = Router();
  const assets = loadAssets(dir);
  const send = (res: Response, name: string) => {
    const asset = assets.get(name);
    if (!asset) {
      throw new NotFoundError(name === 'index.html' ? 'The playground is not built: run `npm run build`.' : `No playground file '${name}'.`, { code: 'unknown_route' });
    }
    res.status(200).set({
      'Content-Type': asset.type,
      'Content-Length': String(asset.body.length),
      'Content-Security-Policy': UI_CSP,
      'X-Content-Type-Options': 'nosniff',
      'Referrer-Policy': 'no-referrer',
      'Cross-Origin-Opener-Policy': 'same-origin',
      'Cache-Control': 'no-cache',
    });
    res.end(asset.body);
  };
  // A client that asks for no page (an Ollama client's probe, curl) gets Ollama's answer (ollama-root.ts).
  router.get('/', (req, res, next) => (wantsHtml(req) ? send(res, 'index.html') : next()));
  router.get('/ui/:file', (req, res) => send(res, req.params.file));
  return router;
}
