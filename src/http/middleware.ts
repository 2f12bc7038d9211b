import type { RequestHandler } from 'express';
import { timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { AuthenticationError } from '../core/errors.js';
import type { ServerOptions } from './context.js';

/** One line per request: method, path, status, milliseconds (text or JSON). */
export function requestLogger(options: ServerOptions): RequestHandler {
  return (req, res, next) => {
    if (options.logFormat === 'off') return next();
    const start = process.hrtime.bigint();
    res.on('close', () => {
      const ms = Number(process.hrtime.bigint() - start) / 1e6;
      const status = res.headersSent ? res.statusCode : 499;
      if (options.logFormat === 'json') {
        options.log(JSON.stringify({ time: new Date().toISOString(), method: req.method, path: req.path, status, ms: Math.round(ms) }));
      } else {
        options.log(`${req.method} ${req.path} ${status} ${ms.toFixed(0)}ms`);
      }
    });
    next();
  };
}

/** Accepts `Authorization: Bearer <key>` (OpenAI clients) or `x-api-key` (Anthropic clients). */
export function isAuthorized(headers: IncomingHttpHeaders, apiKey: string | undefined): boolean {
  if (!apiKey) return true;
  const bearer = /^Bearer\s+(.+)$/i.exec(headers.authorization ?? '')?.[1];
  const header = headers['x-api-key'];
  const given = Buffer.from(bearer ?? (Array.isArray(header) ? header[0] : header) ?? '');
  const expected = Buffer.from(apiKey);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

export function apiKeyCheck(apiKey: string | undefined): RequestHandler {
  return (req, _res, next) => {
    if (req.method === 'OPTIONS' || isAuthorized(req.headers, apiKey)) return next();
    next(new AuthenticationError());
  };
}
