import http from 'node:http';
import https from 'node:https';
import type { LookupFunction } from 'node:net';
import { Readable } from 'node:stream';

/**
 * A `fetch` whose connections go to one address, already checked against
 * the private-address rules (fetch-public.ts): a second DNS answer cannot
 * swap a public name for 127.0.0.1 while a client (the MCP SDK's Streamable
 * HTTP transport) talks to it. Redirects are not followed: the caller sees
 * the 3xx as it came.
 */

export type Address = { address: string; family: number };

/** A DNS lookup that always answers the address already checked. */
export function pinnedLookup({ address, family }: Address): LookupFunction {
  return (_hostname, options, callback) => {
    if (options.all) (callback as (e: null, a: Address[]) => void)(null, [{ address, family }]);
    else callback(null, address, family);
  };
}

function bodyOf(body: RequestInit['body']): string | Buffer | undefined {
  if (body == null) return undefined;
  if (typeof body === 'string') return body;
  if (body instanceof ArrayBuffer) return Buffer.from(body);
  if (ArrayBuffer.isView(body)) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  throw new TypeError('this fetch sends string and byte bodies only');
}

const NULL_BODY = new Set([101, 103, 204, 205, 304]);

export function pinnedFetch(target: Address): (url: string | URL, init?: RequestInit) => Promise<Response> {
  return (input, init) =>
    new Promise<Response>((resolve, reject) => {
      const url = new URL(input);
      if (url.protocol !== 'http:' && url.protocol !== 'https:') return reject(new TypeError(`only http and https URLs are fetched, not ${url.protocol}`));
      const client = url.protocol === 'https:' ? https : http;
      const headers: Record<string, string> = {};
      new Headers(init?.headers).forEach((value, key) => (headers[key] = value));
      const request = client.request(url, { method: init?.method ?? 'GET', headers, lookup: pinnedLookup(target), signal: init?.signal ?? undefined, agent: false }, (response) => {
        const out = new Headers();
        for (const [key, value] of Object.entries(response.headers)) for (const v of [value ?? []].flat()) out.append(key, v);
        const status = response.statusCode ?? 502;
        const empty = NULL_BODY.has(status) || init?.method === 'HEAD';
        if (empty) response.resume();
        resolve(new Response(empty ? null : (Readable.toWeb(response) as ReadableStream<Uint8Array>), { status, statusText: response.statusMessage, headers: out }));
      });
      request.on('error', reject);
      request.end(bodyOf(init?.body));
    });
}
