import type { Request, RequestHandler } from 'express';

/**
 * The server's root as Ollama answers it: `GET /` and `HEAD /` are 200
 * `Ollama is running` (text/plain), which Ollama's clients probe before
 * anything else. A browser asks for a page (its Accept names text/html) and
 * gets the playground (routes/ui.ts) instead, unless the UI is off
 * (`--no-ui`). Like /health it needs no API key and says nothing else; it is
 * mounted after the Host and Origin checks, as everything is.
 */
export const ollamaRoot: RequestHandler = (req, res, next) => {
  if (req.path !== '/' || (req.method !== 'GET' && req.method !== 'HEAD')) return next();
  res.status(200).type('text/plain; charset=utf-8').send('Ollama is running');
};

/** Whether a request asks for a page: its Accept names HTML explicitly (browsers do; curl, SDKs and Ollama's clients send * / * or JSON). */
export function wantsHtml(req: Request): boolean {
  return /\b(text\/html|application\/xhtml\+xml)\b/i.test(req.get('accept') ?? '');
}
