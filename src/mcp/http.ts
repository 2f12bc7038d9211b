import { randomUUID } from 'node:crypto';
import { Router, type RequestHandler, type Response } from 'express';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { NotFoundError } from '../core/errors.js';
import type { ServerContext } from '../http/context.js';
import { createMcpServer } from './server.js';

/** Where `lserve serve --mcp` serves MCP's Streamable HTTP transport. */
export const MCP_PATH = '/mcp';
/** Sessions kept at once; a new one beyond this ends the least recently used. */
export const MAX_MCP_SESSIONS = 64;
/** A session no message has reached for this long is ended (a client that went away without DELETE). */
export const MCP_SESSION_IDLE_MS = 30 * 60_000;

interface Session {
  transport: StreamableHTTPServerTransport;
  server: McpServer;
  lastUsed: number;
}

/**
 * /mcp: the Model Context Protocol over Streamable HTTP, with sessions (the
 * `Mcp-Session-Id` the transport hands out at initialize): each client's
 * messages reach its own McpServer, so a `notifications/cancelled` stops the
 * call it names, as over stdio. POST carries messages (a call's progress
 * notifications come on its SSE answer), GET opens the session's stream,
 * DELETE ends it; an idle session ends after MCP_SESSION_IDLE_MS, the
 * oldest beyond MAX_MCP_SESSIONS, all of them when the server shuts down.
 * Only with `serve --mcp`; otherwise every method is a 404 that says how to
 * turn it on, as /metrics. Mounted among the routes, it sits behind the
 * server's Host/Origin checks and its --api-key (app.ts) like the rest of
 * the API. Tools read no local paths here; URL inputs follow the server's
 * rules (--allow-private-urls) and its upload limit.
 */
export function mcpRouter(ctx: ServerContext): Router {
  const router = Router();
  if (!ctx.options.mcp) {
    router.all(MCP_PATH, () => {
      throw new NotFoundError('MCP is off on this server: start it with `lserve serve --mcp` to serve it at /mcp (Streamable HTTP).', { code: 'mcp_disabled' });
    });
    return router;
  }
  const sessions = new Map<string, Session>();
  const end = (id: string) => {
    const session = sessions.get(id);
    if (!session) return;
    sessions.delete(id);
    void session.transport.close();
    void session.server.close();
  };
  const sweep = setInterval(() => {
    const idleSince = Date.now() - MCP_SESSION_IDLE_MS;
    for (const [id, session] of sessions) if (session.lastUsed < idleSince) end(id);
  }, 60_000);
  sweep.unref();
  ctx.shutdown.addEventListener('abort', () => {
    clearInterval(sweep);
    for (const id of [...sessions.keys()]) end(id);
  });

  const open = async (res: Response, body: unknown) => {
    if (sessions.size >= MAX_MCP_SESSIONS) {
      const [oldest] = [...sessions].sort(([, a], [, b]) => a.lastUsed - b.lastUsed);
      if (oldest) end(oldest[0]);
    }
    const server = createMcpServer({ engine: ctx.engine, localFiles: false, urls: { allowPrivate: ctx.inputs.allowPrivate, maxBytes: ctx.inputs.maxBytes }, signal: ctx.shutdown, log: ctx.options.log });
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, server, lastUsed: Date.now() });
      },
      onsessionclosed: (id) => end(id),
    });
    await server.connect(transport);
    await transport.handleRequest(res.req, res, body);
  };

  const handle: RequestHandler = async (req, res) => {
    const id = req.header('mcp-session-id');
    if (id === undefined) {
      if (req.method === 'POST' && isInitializeRequest(req.body)) return open(res, req.body);
      res.status(400).json(rpcError(-32000, 'No MCP session: send an initialize request first (its answer carries the Mcp-Session-Id header to send with every later message).'));
      return;
    }
    const session = sessions.get(id);
    if (!session) {
      // The specification's answer for a session that ended: the client starts a new one.
      res.status(404).json(rpcError(-32001, 'Session not found: it ended (DELETE, idle, or the server restarted); initialize a new one.'));
      return;
    }
    session.lastUsed = Date.now();
    await session.transport.handleRequest(req, res, req.method === 'POST' ? req.body : undefined);
  };
  router.post(MCP_PATH, handle);
  router.get(MCP_PATH, handle);
  router.delete(MCP_PATH, handle);
  return router;
}

function rpcError(code: number, message: string) {
  return { jsonrpc: '2.0', error: { code, message }, id: null };
}
