import { setMaxListeners } from 'node:events';
import http from 'node:http';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import type { Engine } from '../core/engine.js';
import { AuthenticationError, NotFoundError, ShuttingDownError, type LserveError } from '../core/errors.js';
import { openAIError, toLserveError } from './errors.js';
import { createApp } from './app.js';
import type { ServerContext, ServerOptions } from './context.js';
import { hostOriginPolicy, hostOriginRefusal } from './host-origin.js';
import { websocketRoutes } from './routes/index.js';
import { isAuthorizedUpgrade, OPENAI_KEY_PROTOCOL, WS_KEY_PROTOCOL } from './middleware.js';
import { resolveLocalDirs } from './remote-input.js';
import { ServerMetrics } from './metrics.js';
import { openFileStores } from '../core/files/open.js';
import { Drain, DRAIN_RETRY_AFTER_S, type DrainOptions } from './drain.js';
import { modelStoreCheck } from './readiness.js';
import { openStateStore, RESPONSE_STORE_DEFAULTS } from '../core/state/open.js';
import { MAX_PENDING_SPEECH_JOBS } from './speech-jobs.js';
import { Sealer } from '../core/sealed.js';
import { RemoteMcpServers } from '../mcp/remote/servers.js';

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  readonly http: http.Server;
  /** Stops accepting, cancels in-flight work, unloads models. */
  close(): Promise<void>;
  /**
   * Ends the server gracefully (SIGTERM): GET /ready turns 503 at once, new
   * requests are served for `graceMs` more, then the listener closes; work in
   * flight finishes until `timeoutMs` after the call, then whatever is left
   * is cut (its connection closed; WebSocket sessions get 1001), and the
   * server closes as by close(), which this resolves with.
   */
  drain(options: DrainOptions): Promise<void>;
}

/** The subprotocol answered: the first one offered that is not an API key (never echo a key); none when only a key was offered. */
function selectProtocol(protocols: Set<string>): string | false {
  return [...protocols].find((p) => !p.startsWith(WS_KEY_PROTOCOL) && !p.startsWith(OPENAI_KEY_PROTOCOL)) ?? false;
}

export async function startServer(engine: Engine, options: ServerOptions): Promise<RunningServer> {
  const shutdown = new AbortController();
  // One listener per request in flight (requestSignal): as many as there are requests, not a leak.
  setMaxListeners(0, shutdown.signal);
  const inputs = {
    localDirs: await resolveLocalDirs(options.allowLocalFiles ?? []),
    allowPrivate: options.allowPrivateUrls ?? false,
    maxBytes: options.maxUploadBytes,
  };
  const files = await openFileStores(options.files ?? { dir: path.join(engine.options.home, 'cache') }, options.log);
  // One registry per server (never prom-client's global one): several servers can share a process.
  const drain = new Drain();
  const metrics = options.metrics ? new ServerMetrics(engine, () => drain.draining) : undefined;
  const state = await openStateStore(
    { home: engine.options.home, databaseUrl: options.databaseUrl, poolMax: options.databasePoolMax },
    { ...RESPONSE_STORE_DEFAULTS, maxPendingSpeechJobs: MAX_PENDING_SPEECH_JOBS, log: options.log, ...options.responses },
  ).catch(async (error: unknown) => {
    metrics?.close();
    await files.close();
    throw error;
  });
  const readiness = [modelStoreCheck(engine.store.modelsDir), { name: 'database', check: () => state.ping() }, ...(options.readiness ?? [])];
  const sealer = Sealer.forServer(engine.options.home);
  const mcpServers = new RemoteMcpServers({ declared: options.mcpServers ?? {}, allowHosts: options.mcpAllowHosts ?? [], allowPrivate: options.allowPrivateUrls ?? false, log: options.log });
  const ctx: ServerContext = { engine, options, shutdown: shutdown.signal, inputs, metrics, state, files, drain, readiness, sealer, mcpServers, pulls: new Set() };
  const policy = hostOriginPolicy(options);
  const app = createApp(ctx, policy);
  const server = http.createServer();
  // Counted before the app sees the request: a drain waits for every response to end.
  server.on('request', (_req: http.IncomingMessage, res: http.ServerResponse) => {
    const leave = drain.enter();
    res.once('close', () => {
      leave();
      // Once refusing, a connection whose answer is out is closed rather than left for the next request to be refused on.
      if (drain.refusing) setImmediate(() => server.closeIdleConnections());
    });
  });
  server.on('request', app);
  // Slow uploads are fine; idle keep-alive sockets should not hold shutdown up.
  server.keepAliveTimeout = 5_000;

  const sockets = new Map(websocketRoutes.map((route) => [route, new WebSocketServer({ noServer: true, maxPayload: route.maxFrameBytes, handleProtocols: selectProtocol })]));
  server.on('upgrade', (req, socket, head) => {
    // Until ws takes the socket over, a reset from the client must not become an uncaught 'error'.
    socket.on('error', () => socket.destroy());
    // A WebSocket session is work in flight until its socket closes (the model load before it, too).
    socket.once('close', drain.enter());
    const refuse = (error: LserveError) => {
      if (error.status >= 500 && error.status !== 503) options.log(`error upgrading ${req.url}: ${(error.cause as Error)?.stack ?? error.stack}`);
      const body = JSON.stringify(openAIError(error));
      const retry = error instanceof ShuttingDownError ? `Retry-After: ${DRAIN_RETRY_AFTER_S}\r\n` : '';
      socket.end(`HTTP/1.1 ${error.status} ${http.STATUS_CODES[error.status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${retry}Connection: close\r\n\r\n${body}`);
    };
    const url = new URL(req.url ?? '/', 'http://localhost');
    const route = websocketRoutes.find((r) => r.path === url.pathname);
    const refusal = hostOriginRefusal(req.headers, policy);
    if (refusal) return refuse(refusal);
    if (drain.refusing) return refuse(new ShuttingDownError());
    if (!route) return refuse(new NotFoundError(`No WebSocket endpoint at ${url.pathname}`, { code: 'unknown_route' }));
    if (!isAuthorizedUpgrade(req.headers, options.apiKey)) return refuse(new AuthenticationError());
    route.accept(req, url, ctx).then(
      (session) => {
        // The client may leave while the model loads: then nobody opens the session, and what accept took goes back.
        let handed = false;
        const abandon = () => {
          if (handed) return;
          handed = true;
          session.abandon();
        };
        socket.once('close', abandon);
        if (socket.destroyed) return abandon();
        sockets.get(route)!.handleUpgrade(req, socket, head, (ws) => {
          if (handed) return ws.terminate();
          handed = true;
          // ws reports protocol faults (a frame over maxPayload, bad UTF-8) as 'error', which unheard would be an uncaught
          // exception. It has sent the close frame with the right code (1009, 1007) but stops reading, and would hold the
          // connection for its 30 s close timeout: cut it once the frame is out.
          ws.on('error', () => setTimeout(() => ws.terminate(), 500).unref());
          try {
            session.open(ws);
          } catch (error) {
            options.log(`error on ${url.pathname}: ${(error as Error).stack}`);
            ws.terminate();
          }
        });
      },
      (error: unknown) => refuse(toLserveError(error)),
    );
  });

  await new Promise<void>((resolve, reject) => {
    const fail = (error: Error) => {
      metrics?.close();
      void state.close().catch(() => {});
      void files.close();
      reject(error);
    };
    server.once('error', fail);
    server.listen(options.port, options.host, () => {
      server.off('error', fail);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;

  let closing: Promise<void> | undefined;
  let draining: Promise<void> | undefined;
  const running: RunningServer = {
    url: `http://${host}:${address.port}`,
    port: address.port,
    http: server,
    close() {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        shutdown.abort(new Error('server shutting down'));
        for (const wss of sockets.values()) for (const client of wss.clients) client.close(1001, 'server shutting down');
        server.closeIdleConnections();
        // In-flight requests were told to stop; give them a moment to answer, then cut.
        const grace = setTimeout(() => server.closeAllConnections(), 5_000);
        await stopped;
        clearTimeout(grace);
        await mcpServers.close();
        metrics?.close();
        await state.close().catch((error: unknown) => options.log(`closing the state store: ${(error as Error).message}`));
        await files.close();
        await engine.close();
      })();
      return closing;
    },
    drain({ graceMs, timeoutMs }) {
      draining ??= (async () => {
        const start = performance.now();
        drain.draining = true;
        // Each wait ends early if close() is called meanwhile (a second signal).
        await drain.wait(Math.min(graceMs, timeoutMs), shutdown.signal);
        drain.refusing = true;
        server.close(); // stops listening and closes idle connections; close() waits for the rest
        await drain.wait(timeoutMs - (performance.now() - start), shutdown.signal, true);
        if (drain.inFlight === 0 || shutdown.signal.aborted) return;
        // Cut, not cancelled: a cancelled generation ends as if the model had stopped, and its client would take a
        // cut answer for a whole one. A cut connection is an error every client sees (and SDKs retry elsewhere).
        options.log(`drain timeout: cutting ${drain.inFlight} request(s) and session(s) still in flight`);
        server.closeAllConnections();
      })().then(() => running.close());
      return draining;
    },
  };
  return running;
}
