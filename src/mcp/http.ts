import { Router, type RequestHandler } from 'express';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { NotFoundError } from '../core/errors.js';
import { requestSignal, type ServerContext } from '../http/context.js';
import { createMcpServer } from './server.js';

/** Where `lserve serve --mcp` serves MCP's Streamable HTTP transport. */
export const MCP_PATH = '/mcp';

/**
 * POST /mcp: the Model Context Protocol over Streamable HTTP, stateless (a
 * server per request, no session to hold or expire: every call a client
 * makes is one POST, answered as JSON or as an SSE stream carrying its
 * progress notifications). Only with `serve --mcp`; otherwise every method
 * is a 404 that says how to turn it on, as /metrics. Mounted among the
 * routes, it sits behind the server's Host/Origin checks and its --api-key
 * (app.ts) like the rest of the API. Tools read no local paths here; URL
 * inputs follow the server's rules (--allow-private-urls) and its upload limit.
 * Work stops when the client goes away or the server shuts down.
 */
export function mcpRouter(ctx: ServerContext): Router {
  const router = Router();
  if (!ctx.options.mcp) {
    router.all(MCP_PATH, () => {
      throw new NotFoundError('MCP is off on this server: start it with `lserve serve --mcp` to serve it at /mcp (Streamable HTTP).', { code: 'mcp_disabled' });
    });
    return router;
  }
  const post: RequestHandler = async (req, res) => {
    const signal = requestSignal(req, res, ctx.shutdown);
    const server = createMcpServer({ engine: ctx.engine, localFiles: false, urls: { allowPrivate: ctx.inputs.allowPrivate, maxBytes: ctx.inputs.maxBytes }, signal, log: ctx.options.log });
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, req.body);
  };
  router.post(MCP_PATH, post);
  // Stateless: no stream to open with GET, no session to end with DELETE (the transport's own answer).
  const notAllowed: RequestHandler = (_req, res) => {
    res.status(405).set('Allow', 'POST').json({ jsonrpc: '2.0', error: { code: -32000, message: 'Method not allowed: this server is stateless; send each message with POST.' }, id: null });
  };
  router.get(MCP_PATH, notAllowed);
  router.delete(MCP_PATH, notAllowed);
  return router;
}
