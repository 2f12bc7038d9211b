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

/**
 * Browsers cannot set headers on a WebSocket, so an upgrade may carry the key
 * as a subprotocol instead (as OpenAI's realtime API takes its
 * `openai-insecure-api-key.` one): `lserve.api-key.<the key in base64url>`,
 * offered after another protocol (e.g. `lserve`). The server answers with that
 * other protocol, so the key is never echoed (server.ts).
 */
export const WS_KEY_PROTOCOL = 'lserve.api-key.';

/**
 * OpenAI's subprotocol for the key, as browsers send it to the Realtime API
 * (`openai-insecure-api-key.<key>`, the key as it is); never echoed either.
 */
export const OPENAI_KEY_PROTOCOL = 'openai-insecure-api-key.';

/** The key a WebSocket upgrade carries as a subprotocol, decoded; undefined when none. */
function protocolKey(headers: IncomingHttpHeaders): string | undefined {
  const offered = (headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim());
  const encoded = offered.find((p) => p.startsWith(WS_KEY_PROTOCOL))?.slice(WS_KEY_PROTOCOL.length);
  if (encoded) return Buffer.from(encoded, 'base64url').toString('utf8');
  return offered.find((p) => p.startsWith(OPENAI_KEY_PROTOCOL))?.slice(OPENAI_KEY_PROTOCOL.length) || undefined;
}

/** An upgrade's key: the headers of isAuthorized, or the subprotocol. */
export function isAuthorizedUpgrade(headers: IncomingHttpHeaders, apiKey: string | undefined): boolean {
  if (isAuthorized(headers, apiKey)) return true;
  const key = protocolKey(headers);
  return key !== undefined && isAuthorized({ 'x-api-key': key }, apiKey);
}

export function apiKeyCheck(apiKey: string | undefined): RequestHandler {
  return (req, _res, next) => {
    if (req.method === 'OPTIONS' || isAuthorized(req.headers, apiKey)) return next();
    next(new AuthenticationError());
  };
}
