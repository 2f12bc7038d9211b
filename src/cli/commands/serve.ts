import { Command, Option } from 'commander';
import { parseSize } from '../../core/units.js';
import { parseAllowList } from '../../http/remote-input.js';
import { CliError, EXIT_USAGE } from '../errors.js';
import { collect, createEngine, CTX_SIZE_HELP, globalOptions, positiveInt, type EngineFlags } from '../context.js';

interface ServeFlags extends EngineFlags {
  host: string;
  port: string;
  apiKey?: string;
  cors?: boolean | string;
  maxBody: string;
  maxUpload: string;
  logFormat: 'text' | 'json' | 'off';
  allowRemoteInput?: string;
}

export function serveCommand(): Command {
  return new Command('serve')
    .description('Start the HTTP server: the OpenAI- and Anthropic-compatible /v1 API.')
    .addOption(new Option('--host <host>', 'address to bind').env('LSERVE_HOST').default('127.0.0.1'))
    .addOption(new Option('-p, --port <port>', 'port to listen on (0 picks a free one)').env('LSERVE_PORT').default('8080'))
    .addOption(new Option('--api-key <key>', 'require this key (Bearer or x-api-key) on every /v1 request').env('LSERVE_API_KEY'))
    .option('--cors [origin]', 'send CORS headers (any origin, or only the one given)')
    .option('--keep-alive <duration>', 'how long an idle model stays loaded (e.g. 30s, 5m, -1 = forever)', '5m')
    .option('--max-memory <size>', 'memory budget for loaded models (e.g. 8gb); default 60% of RAM')
    .option('--max-loaded <n>', 'most models loaded at once', '3')
    .option('--parallel <n>', 'concurrent requests per chat model', '4')
    .option('--max-queue <n>', 'requests that may wait for a busy model before 503', '64')
    .option('--threads <n>', 'CPU threads per model (0 = runtime default)')
    .option('--ctx-size <size>', CTX_SIZE_HELP, collect)
    .option('--max-body <size>', 'largest JSON request body', '64mb')
    .option('--max-upload <size>', 'largest uploaded file (multipart)', '256mb')
    .option('--allow-remote-input <list>', 'comma-separated directories, URL prefixes or hosts that image_url/audio may name (* = any); default: any while bound to loopback, none otherwise')
    .addOption(new Option('--log-format <format>', 'request log format').choices(['text', 'json', 'off']).default('text'))
    .addHelpText(
      'after',
      `
Examples:
  $ lserve serve
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
        maxBodyBytes = parseSize(flags.maxBody);
        maxUploadBytes = parseSize(flags.maxUpload);
      } catch (error) {
        throw new CliError((error as Error).message, EXIT_USAGE);
      }
      if (flags.maxLoaded) positiveInt(flags.maxLoaded, '--max-loaded');
      const log = (message: string) => process.stderr.write(`${message}\n`);
      const engine = createEngine(global, flags, { log: global.verbose ? (m) => log(`[engine] ${m}`) : log });
      // Imported here so that other commands never load express and ws.
      const { startServer } = await import('../../http/server.js');
      const server = await startServer(engine, {
        host: flags.host,
        port,
        apiKey: flags.apiKey || undefined,
        cors: flags.cors ?? false,
        maxBodyBytes,
        maxUploadBytes,
        logFormat: flags.logFormat,
        allowRemoteInput: flags.allowRemoteInput === undefined ? undefined : parseAllowList(flags.allowRemoteInput),
        log,
      });
      const models = await engine.store.list();
      log(`lserve listening on ${server.url}/v1 (${models.length} model${models.length === 1 ? '' : 's'}: ${models.map((m) => m.id).join(', ') || 'none — run `lserve pull <id>`'})`);

      let stopping = false;
      const stop = (signal: string) => {
        if (stopping) {
          log(`${signal} again: exiting now`);
          process.exit(1);
        }
        stopping = true;
        log(`${signal}: shutting down`);
        server.close().then(
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
