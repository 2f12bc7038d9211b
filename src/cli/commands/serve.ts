import { Command, Option } from 'commander';
import type { Engine } from '../../core/engine.js';
import type { ModelKind } from '../../core/catalog.js';
import { parseByteSize, parseDuration } from '../../core/units.js';
import { parseList } from '../../http/remote-input.js';
import { checkPrivateAllowList } from '../../http/net/fetch-public.js';
import { filesLocation } from '../files-location.js';
import { checkDatabaseUrl, redactUrl } from '../../core/state/open.js';
import { CliError, EXIT_FAILURE, EXIT_USAGE } from '../errors.js';
import { ALIAS_HELP, ALIAS_VENDOR_CHAT_HELP, ALIASES_HELP, DEFAULT_MODEL_HELP } from '../model-choice-flags.js';
import { CACHE_RAM_HELP, collect, createEngine, CTX_SIZE_HELP, globalOptions, HF_TOKEN_FILE_HELP, hubTokenOption, KV_CACHE_TYPE_HELP, positiveInt, type EngineFlags } from '../context.js';
import { KV_CACHE_TYPES } from '../../core/loader.js';
import { loadMcpConfig, type McpServersConfig } from '../../mcp/remote/config.js';

interface ServeFlags extends EngineFlags {
  host: string;
  strictTools?: boolean;
  port: string;
  apiKey?: string;
  cors?: boolean | string;
  maxBody: string;
  maxUpload: string;
  logFormat: 'text' | 'json' | 'off';
  allowedHosts?: string;
  allowLocalFiles?: string;
  allowPrivateUrls?: boolean | string;
  allowRemoteInput?: string;
  metrics?: boolean;
  mcp?: boolean;
  mcpConfig?: string;
  mcpAllowHost?: string[];
  ui: boolean;
  hfTokenFile?: string;
  responsesTtl?: string;
  responsesMax?: string;
  drainTimeout: string;
  drainGrace: string;
  filesDir?: string;
  files?: string;
  databaseUrl?: string;
  databasePoolMax?: string;
}

export function serveCommand(): Command {
  return new Command('serve')
    .description('Start the HTTP server: the OpenAI- and Anthropic-compatible /v1 API.')
    .addOption(new Option('--host <host>', 'address to bind').env('LSERVE_HOST').default('127.0.0.1'))
    .addOption(new Option('-p, --port <port>', 'port to listen on (0 picks a free one)').env('LSERVE_PORT').default('8080'))
    .addOption(new Option('--api-key <key>', 'require this key (Bearer or x-api-key) on every /v1 request').env('LSERVE_API_KEY'))
    .addOption(new Option('--cors [origins]', "let web pages of these origins call the API (comma-separated, e.g. https://app.example.com); alone: any origin").env('LSERVE_CORS'))
    .addOption(new Option('--allowed-hosts <names>', 'Host names to answer besides loopback names, IP addresses and --host (comma-separated; .example.com covers subdomains)').env('LSERVE_ALLOWED_HOSTS'))
    .addOption(new Option('--allow-local-files <dirs>', 'let path and file:// inputs read files under these directories (comma-separated); none by default').env('LSERVE_ALLOW_LOCAL_FILES'))
    .addOption(new Option('--allow-private-urls [hosts]', 'let URL inputs reach loopback and private addresses: these host names, IPs or CIDR ranges (comma-separated), or alone any').env('LSERVE_ALLOW_PRIVATE_URLS'))
    .option('--keep-alive <duration>', 'how long an idle model stays loaded (e.g. 30s, 5m, -1 = forever)', '5m')
    .option('--max-memory <size>', 'memory budget for loaded models (e.g. 8gb); default 60% of RAM')
    .option('--max-loaded <n>', 'most models loaded at once', '3')
    .option('--parallel <n>', 'concurrent requests per chat model', '4')
    .option('--max-queue <n>', 'requests that may wait for a busy model before 503', '64')
    .option('--threads <n>', 'CPU threads per model (0 = runtime default)')
    .option('--ctx-size <size>', CTX_SIZE_HELP, collect)
    .option('--cache-ram <size>', CACHE_RAM_HELP)
    .addOption(new Option('--kv-cache-type <type>', KV_CACHE_TYPE_HELP).choices(KV_CACHE_TYPES).env('LSERVE_KV_CACHE_TYPE'))
    .option('--default-model <kind=model>', DEFAULT_MODEL_HELP, collect)
    .option('--alias <name=model>', ALIAS_HELP, collect)
    .option('--aliases <file>', ALIASES_HELP)
    .option('--alias-vendor-chat', ALIAS_VENDOR_CHAT_HELP)
    .option('--strict-tools', 'refuse (400) tools that the provider\'s own servers run (web search, code execution, hosted MCP…) instead of leaving them out of what the model sees')
    .option('--max-body <size>', 'largest JSON request body', '64mb')
    .option('--max-upload <size>', 'largest uploaded file (multipart)', '256mb')
    .addOption(new Option('--allow-remote-input <list>').hideHelp())
    .option('--no-ui', 'do not serve the playground (a web page for every task) at /')
    .option('--metrics', 'serve Prometheus metrics at GET /metrics (behind --api-key when one is set); off by default')
    .option('--mcp', 'serve the Model Context Protocol (Streamable HTTP) at /mcp, for agents (behind --api-key when one is set); off by default')
    .option('--mcp-config <file>', 'MCP servers that /v1/responses `mcp` tools may name by server_label: a JSON file of {"mcpServers": {"label": {"command", "args", "env"} | {"url", "headers"}}}; stdio servers start on first use and end with the server')
    .option('--mcp-allow-host <host>', 'a host that a /v1/responses `mcp` tool\'s server_url may name (repeatable; .example.com covers subdomains); private addresses also need --allow-private-urls', collect)
    .option('--responses-ttl <duration>', 'how long stored Responses API responses are kept (e.g. 24h); default 30 days')
    .option('--responses-max <n>', 'most stored Responses API responses; the oldest go first (default 10000)')
    .addOption(new Option('--drain-timeout <duration>', 'at SIGTERM, how long work in flight may take to finish before what is left is cut off and the server exits').env('LSERVE_DRAIN_TIMEOUT').default('30s'))
    .addOption(new Option('--drain-grace <duration>', 'at SIGTERM, how long new requests are still served while GET /ready already fails, so a load balancer stops sending first (within --drain-timeout)').env('LSERVE_DRAIN_GRACE').default('5s'))
    .addOption(new Option('--files-dir <dir>', 'where generated speech and images are kept; replicas may share one (default <home>/cache)').env('LSERVE_FILES_DIR'))
    .addOption(new Option('--files <url>', 'keep generated speech and images in S3-compatible storage: s3://bucket/prefix (endpoint, region, credentials from AWS_* variables)').env('LSERVE_FILES').conflicts('filesDir'))
    .addOption(new Option('--database-url <url>', 'keep stored responses and speech stream jobs in this PostgreSQL database (postgres://…), shared by every replica using it; default SQLite in the home').env('LSERVE_DATABASE_URL'))
    .addOption(new Option('--database-pool-max <n>', 'most connections to that database from this server (default 10)').env('LSERVE_DATABASE_POOL_MAX'))
    .option('--hf-token-file <path>', `${HF_TOKEN_FILE_HELP}; used by POST /v1/models/pull`)
    .addOption(new Option('--log-format <format>', 'request log format').choices(['text', 'json', 'off']).default('text'))
    .addHelpText(
      'after',
      `
Examples:
  $ lserve serve                  # the API at http://127.0.0.1:8080/v1, the playground at http://127.0.0.1:8080/
  $ lserve serve --port 9000 --host 0.0.0.0 --api-key secret
  $ curl http://127.0.0.1:8080/v1/models`,
    )
    .action(async (flags: ServeFlags, command: Command) => {
      const global = globalOptions(command);
      const port = Number(flags.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port must be 0-65535, got '${flags.port}'`, EXIT_USAGE);
      let maxBodyBytes: number;
      let maxUploadBytes: number;
      try {
        maxBodyBytes = parseByteSize(flags.maxBody);
        maxUploadBytes = parseByteSize(flags.maxUpload);
      } catch (error) {
        throw new CliError((error as Error).message, EXIT_USAGE);
      }
      if (flags.maxLoaded) positiveInt(flags.maxLoaded, '--max-loaded');
      const responses = responseRetention(flags);
      const drainOptions = { graceMs: drainDuration(flags.drainGrace, '--drain-grace'), timeoutMs: drainDuration(flags.drainTimeout, '--drain-timeout') };
      const files = filesLocation(flags);
      const databaseUrl = flags.databaseUrl || undefined;
      if (databaseUrl) {
        try {
          checkDatabaseUrl(databaseUrl);
        } catch (error) {
          throw new CliError(`--database-url: ${(error as Error).message}`, EXIT_USAGE);
        }
      }
      const databasePoolMax = flags.databasePoolMax === undefined ? undefined : positiveInt(flags.databasePoolMax, '--database-pool-max');
      if (flags.allowRemoteInput !== undefined) {
        throw new CliError('--allow-remote-input was replaced: use --allow-local-files DIR[,DIR] for paths and --allow-private-urls for private-network URLs (public URLs need no flag).', EXIT_USAGE);
      }
      const list = (value: boolean | string | undefined): boolean | string[] => (typeof value === 'string' ? parseList(value) : (value ?? false));
      const allowPrivateUrls = list(flags.allowPrivateUrls);
      try {
        if (Array.isArray(allowPrivateUrls)) checkPrivateAllowList(allowPrivateUrls);
      } catch (error) {
        throw new CliError(`--allow-private-urls: ${(error as Error).message}`, EXIT_USAGE);
      }
      let mcpServers: McpServersConfig | undefined;
      if (flags.mcpConfig !== undefined) {
        try {
          mcpServers = await loadMcpConfig(flags.mcpConfig);
        } catch (error) {
          throw new CliError(`--mcp-config ${flags.mcpConfig}: ${(error as Error).message}`, EXIT_USAGE);
        }
      }
      const hfToken = await hubTokenOption(flags.hfTokenFile);
      const log = (message: string) => process.stderr.write(`${message}\n`);
      const engine = createEngine(global, flags, { log: global.verbose ? (m) => log(`[engine] ${m}`) : log });
      // Imported here so that other commands never load express and ws.
      const { startServer } = await import('../../http/server.js');
      const server = await startServer(engine, {
        host: flags.host,
        port,
        apiKey: flags.apiKey || undefined,
        cors: list(flags.cors),
        allowedHosts: flags.allowedHosts === undefined ? [] : parseList(flags.allowedHosts),
        allowLocalFiles: flags.allowLocalFiles === undefined ? [] : parseList(flags.allowLocalFiles),
        allowPrivateUrls,
        maxBodyBytes,
        maxUploadBytes,
        logFormat: flags.logFormat,
        strictTools: Boolean(flags.strictTools),
        metrics: Boolean(flags.metrics),
        mcp: Boolean(flags.mcp),
        mcpServers,
        mcpAllowHosts: (flags.mcpAllowHost ?? []).flatMap(parseList),
        ui: flags.ui,
        hfToken,
        responses,
        files,
        databaseUrl,
        databasePoolMax,
        log,
      }).catch((error: unknown) => {
        throw listenError(error, flags.host, port);
      });
      const models = await engine.store.list();
      log(`lserve listening on ${server.url}/v1 (${models.length} model${models.length === 1 ? '' : 's'}: ${models.map((m) => m.id).join(', ') || 'none — run `lserve pull <id>`'})`);
      for (const line of await defaultsLog(engine)) log(line);
      if (flags.ui) log(`playground: ${server.url}/`);
      if (flags.mcp) log(`MCP (Streamable HTTP): ${server.url}/mcp`);
      if (mcpServers) log(`MCP servers for /v1/responses: ${Object.keys(mcpServers).join(', ') || 'none'}`);
      if (databaseUrl) log(`state (stored responses, speech stream jobs): PostgreSQL at ${redactUrl(databaseUrl)}`);
      const { buildLlamaAddonInBackground } = await import('../../compose.js');
      void buildLlamaAddonInBackground(engine, log).catch((error: unknown) => log(`llama.cpp: ${(error as Error).message}`));

      let stopping = false;
      const stop = (signal: string) => {
        if (stopping) {
          // Whatever a runner is doing (a native call that never returns): its process is
          // killed, not waited for, and this one exits now.
          log(`${signal} again: exiting now`);
          engine.killProcesses();
          process.exit(1);
        }
        stopping = true;
        // SIGTERM is how orchestrators end a replica (Kubernetes, systemd, docker stop): drain. Ctrl-C is someone at a terminal: stop now.
        if (signal === 'SIGTERM') log(`SIGTERM: shutting down gracefully (GET /ready answers 503; new requests served for ${flags.drainGrace}, work in flight finishes within ${flags.drainTimeout})`);
        else log(`${signal}: shutting down`);
        (signal === 'SIGTERM' ? server.drain(drainOptions) : server.close()).then(
          () => process.exit(0),
          (error: unknown) => {
            log(`shutdown failed: ${(error as Error).message}`);
            process.exit(1);
          },
        );
      };
      process.on('SIGINT', () => stop('SIGINT'));
      process.on('SIGTERM', () => stop('SIGTERM'));
    });
}

/**
 * A listener that could not start, said in one line with what to do: a port
 * another program holds, one the user may not bind, a --host that is no
 * address here. Anything else goes up unchanged.
 */
function listenError(error: unknown, host: string, port: number): unknown {
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  if (code === 'EADDRINUSE') {
    return new CliError(`${address} is already in use (another lserve, or another program, is listening there); choose another port with --port, e.g. --port ${port === 65535 ? 8081 : port + 1}`, EXIT_FAILURE);
  }
  if (code === 'EACCES') return new CliError(`not allowed to listen on ${address} (ports below 1024 need privileges); choose another port with --port, e.g. --port 8080`, EXIT_FAILURE);
  if (code === 'EADDRNOTAVAIL') return new CliError(`cannot listen on ${address}: ${host} is not an address of this machine; check --host (127.0.0.1 for this machine only, 0.0.0.0 for every interface)`, EXIT_FAILURE);
  return error;
}

/** --drain-timeout / --drain-grace in milliseconds: a duration of 0 or more. */
function drainDuration(value: string, flag: string): number {
  let ms: number;
  try {
    ms = parseDuration(value);
  } catch (error) {
    throw new CliError(`${flag}: ${(error as Error).message}`, EXIT_USAGE);
  }
  if (ms < 0) throw new CliError(`${flag} must be 0 or a positive duration (e.g. 30s), got '${value}'`, EXIT_USAGE);
  return ms;
}

/** --responses-ttl and --responses-max, checked before the server starts. */
function responseRetention(flags: ServeFlags): { ttlSeconds?: number; maxResponses?: number } {
  const retention: { ttlSeconds?: number; maxResponses?: number } = {};
  if (flags.responsesTtl !== undefined) {
    let ms: number;
    try {
      ms = parseDuration(flags.responsesTtl);
    } catch (error) {
      throw new CliError(`--responses-ttl: ${(error as Error).message}`, EXIT_USAGE);
    }
    if (ms <= 0) throw new CliError(`--responses-ttl must be a positive duration (e.g. 24h), got '${flags.responsesTtl}'`, EXIT_USAGE);
    retention.ttlSeconds = ms / 1000;
  }
  if (flags.responsesMax !== undefined) retention.maxResponses = positiveInt(flags.responsesMax, '--responses-max');
  return retention;
}

/**
 * What requests that name no model go to, said once at start: each kind
 * with a choice to make (several installed) or made (--default-model), and
 * a chosen model that is not installed.
 */
async function defaultsLog(engine: Engine): Promise<string[]> {
  const picks = await engine.defaults();
  const lines: string[] = [];
  for (const [kind, model] of Object.entries(engine.options.models.defaults)) {
    if (picks[kind as ModelKind]?.how !== 'chosen') lines.push(`defaults: --default-model ${kind}=${model} names no installed ${kind} model; run \`lserve pull ${model}\``);
  }
  for (const pick of Object.values(picks)) {
    if (pick.how === 'chosen') lines.push(`defaults: ${pick.kind}=${pick.id} (chosen; ${pick.installed} installed)`);
    else if (pick.installed > 1) lines.push(`defaults: ${pick.kind}=${pick.id} (${pick.installed} installed; --default-model ${pick.kind}=… to choose)`);
  }
  return lines;
}
