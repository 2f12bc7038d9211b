import type { Request, Response } from 'express';
import type { Engine } from '../core/engine.js';
import { ClientClosedError } from '../core/errors.js';
import type { HubToken } from '../core/hub-auth.js';
import type { InputPolicy } from './remote-input.js';
import type { ServerMetrics } from './metrics.js';
import type { ResponseStoreOptions, StateStore } from '../core/state/store.js';
import type { Drain } from './drain.js';
import type { FilesLocation, FileStores } from '../core/files/store.js';
import type { Sealer } from '../core/sealed.js';
import type { RemoteMcpServers } from '../mcp/remote/servers.js';
import type { McpServersConfig } from '../mcp/remote/config.js';

/** Something GET /ready asks (readiness.ts): whether a dependency of the server can serve now. */
export interface ReadinessCheck {
  /** The check's key in GET /ready's `checks` (`model_store`, `database`). */
  name: string;
  /** Resolves when the dependency can serve; rejects, or outlasts the timeout, when not. `signal` aborts at the timeout. */
  check: (signal: AbortSignal) => Promise<void>;
}

/** What every router gets: the engine and the server's settings. */
export interface ServerContext {
  engine: Engine;
  options: ServerOptions;
  /** Aborted when the server shuts down: in-flight work stops. */
  shutdown: AbortSignal;
  /** What request fields that name a file or URL may read (see remote-input.ts). */
  inputs: InputPolicy;
  /** The server's Prometheus metrics, when `metrics` is on (GET /metrics). */
  metrics?: ServerMetrics;
  /** Stored Responses API responses and speech stream jobs: SQLite in the lserve home, or the `databaseUrl` database. */
  state: StateStore;
  /** Where the server is in a drain (SIGTERM): GET /ready, the refusal of new work, lserve_draining. */
  drain: Drain;
  /** What GET /ready checks (see readiness.ts): the model store, then `ServerOptions.readiness`; a backend opened later may push its own. */
  readiness: ReadinessCheck[];
  /** Where generated files (speech, images) are kept and served from. */
  files: FileStores;
  /** Seals what clients hand back unchanged (a model's reasoning: thinking signatures, encrypted_content). */
  sealer: Sealer;
  /** The remote MCP servers /v1/responses may call tools of (--mcp-config, --mcp-allow-host); their stdio processes end with the server. */
  mcpServers: RemoteMcpServers;
  /** Ids of the models this server is pulling now (POST /v1/models/pull, POST /api/pull): deleting one meanwhile is a 409. */
  pulls: Set<string>;
}

export interface ServerOptions {
  host: string;
  port: number;
  apiKey?: string;
  /**
   * Origins whose pages may call the API (CORS headers, and past the Origin
   * check): `true` any origin, a list those origins, `false` none but the
   * server's own pages. See host-origin.ts.
   */
  cors: boolean | readonly string[];
  /** Host names (besides loopback, IP literals and the bound address) that requests may name; `.example.com` covers subdomains, `*` any. */
  allowedHosts?: readonly string[];
  /** Largest JSON body accepted, in bytes (larger → 413). */
  maxBodyBytes: number;
  /** Largest uploaded file (multipart), in bytes. */
  maxUploadBytes: number;
  /** Directories whose files path and `file://` inputs may name (symlinks resolved); none by default. */
  allowLocalFiles?: readonly string[];
  /** URL inputs may reach non-public addresses: `true` any, or these host names, IPs and CIDR ranges. */
  allowPrivateUrls?: boolean | readonly string[];
  /** Serve the playground (a web page using the /v1 API) at `/`; default on, `lserve serve --no-ui` turns it off. */
  ui?: boolean;
  /** A live-transcription WebSocket that sends no audio for this long is closed (default 30 s). */
  streamIdleMs?: number;
  /** Realtime sessions work on a turn from the first pause in its speech, unseen until it ends (default true; false to compare, as tests and benchmarks do). */
  speculativeTurns?: boolean;
  /** Realtime sessions warm the chat model with the conversation while the user speaks (default true; false to compare, as benchmarks do). */
  warmAnswers?: boolean;
  /** Serve Prometheus metrics at GET /metrics (`lserve serve --metrics`); off by default (404). */
  metrics?: boolean;
  /** Serve the Model Context Protocol (Streamable HTTP) at /mcp (`lserve serve --mcp`); off by default (404). */
  mcp?: boolean;
  /** MCP servers a /v1/responses `mcp` tool may name by server_label (`lserve serve --mcp-config FILE`); none by default. */
  mcpServers?: McpServersConfig;
  /** Hosts a request's MCP server_url may name (`--mcp-allow-host`, repeatable); none by default. Private addresses also need allowPrivateUrls. */
  mcpAllowHosts?: readonly string[];
  /** Hugging Face token for POST /v1/models/pull (`lserve serve --hf-token-file`); default HF_TOKEN. */
  hfToken?: HubToken;
  /** Where generated files live: a directory several replicas may share (default `<home>/cache`), or S3-compatible storage (`--files-dir`, `--files`). */
  files?: FilesLocation;
  /** Retention of stored responses (`lserve serve --responses-ttl`, `--responses-max`); defaults in RESPONSE_STORE_DEFAULTS. */
  responses?: Partial<ResponseStoreOptions>;
  /** Checks GET /ready runs besides the model store's (a shared state backend's ping). */
  readiness?: readonly ReadinessCheck[];
  /** Each readiness check's bound; default READINESS_TIMEOUT_MS. */
  readinessTimeoutMs?: number;
  /** A `postgres://` URL: keep that state in PostgreSQL, shared by every replica using it (`lserve serve --database-url`). */
  databaseUrl?: string;
  /** Most connections to that database from this server (`--database-pool-max`, default 10). */
  databasePoolMax?: number;
  /**
   * Refuse (400) a tool that the provider's own servers run (web search,
   * code execution, hosted MCP…) instead of leaving it out of what the
   * model sees (`lserve serve --strict-tools`; api/hosted-tools.ts).
   */
  strictTools?: boolean;
  logFormat: 'text' | 'json' | 'off';
  log: (message: string) => void;
}

/**
 * A signal that aborts when the client goes away before the response is
 * complete, or when the server shuts down: long work checks it and stops.
 *
 * Not AbortSignal.any([…, shutdown]): the server-wide signal would keep a
 * reference to every request's signal it was ever combined with (Node 20),
 * a slow leak in a server left running. The listener on it goes with the
 * response.
 */
export function requestSignal(req: Request, res: Response, shutdown: AbortSignal): AbortSignal {
  const controller = new AbortController();
  const clientLeft = () => controller.abort(new ClientClosedError());
  const shuttingDown = () => controller.abort(shutdown.reason);
  if (shutdown.aborted) shuttingDown();
  else shutdown.addEventListener('abort', shuttingDown, { once: true });
  res.on('close', () => {
    shutdown.removeEventListener('abort', shuttingDown);
    if (!res.writableFinished) clientLeft();
  });
  req.on('aborted', clientLeft);
  return controller.signal;
}
