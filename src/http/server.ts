import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import type { Engine } from '../core/engine.js';
import { NotFoundError, isLserveError } from '../core/errors.js';
import { createApp } from './app.js';
import type { ServerContext, ServerOptions } from './context.js';
import { websocketRoutes } from './routes/index.js';
import { isAuthorized } from './middleware.js';

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  readonly http: http.Server;
  /** Stops accepting, cancels in-flight work, unloads models. */
  close(): Promise<void>;
}

export async function startServer(engine: Engine, options: ServerOptions): Promise<RunningServer> {
  const shutdown = new AbortController();
  const ctx: ServerContext = { engine, options, shutdown: shutdown.signal };
  const app = createApp(ctx);
  const server = http.createServer(app);
  // Slow uploads are fine; idle keep-alive sockets should not hold shutdown up.
  server.keepAliveTimeout = 5_000;

  const wss = new WebSocketServer({ noServer: true, maxPayload: 16 * 1024 * 1024 });
  server.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const refuse = (status: number, message: string) => {
      socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code: null } })}`);
    };
    const route = websocketRoutes.find((r) => r.path === url.pathname);
    if (!route) return refuse(404, new NotFoundError(`No WebSocket endpoint at ${url.pathname}`).message);
    if (!isAuthorized(req.headers, options.apiKey)) return refuse(401, 'Invalid or missing API key.');
    route.accept(req, url, ctx).then(
      (onConnection) => wss.handleUpgrade(req, socket, head, onConnection),
      (error: unknown) => refuse(isLserveError(error) ? error.status : 500, isLserveError(error) ? error.message : 'Internal server error'),
    );
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;

  let closing: Promise<void> | undefined;
  return {
    url: `http://${host}:${address.port}`,
    port: address.port,
    http: server,
    close() {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        shutdown.abort(new Error('server shutting down'));
        for (const client of wss.clients) client.close(1001, 'server shutting down');
        server.closeIdleConnections();
        // In-flight requests were told to stop; give them a moment to answer, then cut.
        const grace = setTimeout(() => server.closeAllConnections(), 5_000);
        await stopped;
        clearTimeout(grace);
        await engine.close();
      })();
      return closing;
    },
  };
}
