import type { RequestHandler } from 'express';
import type { IncomingHttpHeaders } from 'node:http';
import { isIP } from 'node:net';
import { PermissionError } from '../core/errors.js';
import type { ServerOptions } from './context.js';
import { isLoopbackHost } from './net/ip-ranges.js';

/**
 * Which browsers' requests the server answers. Loopback is no boundary on a
 * desktop: any page can send requests to 127.0.0.1, and a page can rebind its
 * own name to 127.0.0.1 and then read the answers as same-origin (DNS
 * rebinding). So, before any work, on every route and WebSocket upgrade:
 *
 * - `Host` must be an IP literal (a rebinding page always sends its own name),
 *   `localhost` or a `*.localhost` name (browsers resolve those to loopback
 *   themselves), the bound name, or a name the operator allows with
 *   `--allowed-hosts` (`.example.com` covers its subdomains, `*` anything).
 * - `Origin`, when a request carries one (browsers do; SDKs and curl do not),
 *   must be the server's own (same scheme, host and port as `Host`) or one of
 *   the `--cors` origins (`true`: any).
 *
 * Anything else is a 403.
 */

export interface HostOriginPolicy {
  /** Address or name the server is bound to. */
  boundHost: string;
  allowedHosts: readonly string[];
  /** `true`: every origin; a list: those origins (`scheme://host[:port]`). */
  cors: boolean | readonly string[];
}

export function hostOriginPolicy(options: ServerOptions): HostOriginPolicy {
  return { boundHost: options.host, allowedHosts: options.allowedHosts ?? [], cors: options.cors };
}

/** The host name of a `Host` header value (`name:port`, `[v6]:port`), lowercased, or undefined if malformed. */
export function hostName(header: string): string | undefined {
  try {
    const url = new URL(`http://${header}`);
    if (url.username || url.password || url.pathname !== '/' || url.search || url.hash) return undefined;
    return url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  } catch {
    return undefined;
  }
}

export function isAllowedHost(header: string | undefined, policy: HostOriginPolicy): boolean {
  // HTTP/1.0 clients may omit Host; browsers never do, so a missing Host is no rebinding.
  if (header === undefined) return true;
  const name = hostName(header);
  if (name === undefined) return false;
  if (isIP(name) || isLoopbackHost(name)) return true;
  if (name === policy.boundHost.replace(/^\[|\]$/g, '').toLowerCase()) return true;
  return policy.allowedHosts.some((raw) => {
    const entry = raw.trim().toLowerCase();
    if (entry === '*') return true;
    if (entry.startsWith('.')) return name === entry.slice(1) || name.endsWith(entry);
    return name === entry;
  });
}

/** Normalises an origin (`https://Example.com:443` → `https://example.com`); undefined if it is not one. */
function normalOrigin(value: string): string | undefined {
  try {
    const url = new URL(value);
    return url.origin === 'null' ? undefined : url.origin;
  } catch {
    return undefined;
  }
}

export function isAllowedOrigin(origin: string | undefined, host: string | undefined, policy: HostOriginPolicy): boolean {
  if (origin === undefined) return true;
  if (policy.cors === true) return true;
  const normal = normalOrigin(origin);
  if (normal === undefined) return false; // `null` (sandboxed frames, file:// pages) and garbage
  if (host !== undefined && (normal === normalOrigin(`http://${host}`) || normal === normalOrigin(`https://${host}`))) return true;
  return policy.cors !== false && policy.cors.some((entry) => normalOrigin(entry) === normal);
}

const single = (value: string | string[] | undefined) => (Array.isArray(value) ? value[0] : value);

/** The 403 for a request the policy refuses, or undefined when it may go on. */
export function hostOriginRefusal(headers: IncomingHttpHeaders, policy: HostOriginPolicy): PermissionError | undefined {
  const host = headers.host;
  if (!isAllowedHost(host, policy)) {
    return new PermissionError(
      `Host '${host}' is not allowed: this server answers loopback names, IP addresses and its bound address; start it with --allowed-hosts ${hostName(host ?? '') ?? 'NAME'} to accept this name.`,
      { code: 'host_not_allowed' },
    );
  }
  const origin = single(headers.origin);
  if (!isAllowedOrigin(origin, host, policy)) {
    return new PermissionError(`Origin '${origin}' is not allowed: start the server with --cors ${normalOrigin(origin ?? '') ?? 'ORIGIN'} to let that site's pages call it.`, {
      code: 'origin_not_allowed',
    });
  }
  return undefined;
}

export function hostOriginCheck(policy: HostOriginPolicy): RequestHandler {
  return (req, _res, next) => next(hostOriginRefusal(req.headers, policy));
}

/** CORS headers for allowed cross-origin callers (the origin check has already run). */
export function corsHeaders(policy: HostOriginPolicy): RequestHandler {
  return (req, res, next) => {
    const origin = req.header('origin');
    if (policy.cors === false || origin === undefined) return next();
    res.setHeader('Access-Control-Allow-Origin', policy.cors === true ? '*' : origin);
    res.setHeader('Vary', 'Origin');
    res.setHeader('Access-Control-Allow-Methods', 'GET,POST,DELETE,OPTIONS');
    res.setHeader('Access-Control-Allow-Headers', req.header('access-control-request-headers') ?? 'Content-Type, Authorization, x-api-key, anthropic-version');
    res.setHeader('Access-Control-Max-Age', '600');
    if (req.method === 'OPTIONS') {
      res.status(204).end();
      return;
    }
    next();
  };
}
