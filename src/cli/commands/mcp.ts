import { Command } from 'commander';
import { collect, createEngine, globalOptions } from '../context.js';
import { DEFAULT_MODEL_HELP } from '../model-choice-flags.js';

interface McpFlags {
  threads?: string;
  keepAlive?: string;
  maxMemory?: string;
  defaultModel?: string[];
  allowPrivateUrls?: boolean;
}

export function mcpCommand(): Command {
  return new Command('mcp')
    .description("Serve lserve's models to an agent as a Model Context Protocol server over stdio (OCR, transcription, speech, images, embeddings, rerank, chat).")
    .option('--default-model <kind=model>', DEFAULT_MODEL_HELP, collect)
    .option('--keep-alive <duration>', 'how long an idle model stays loaded (e.g. 30s, 5m, -1 = forever)', '5m')
    .option('--max-memory <size>', 'memory budget for loaded models (e.g. 8gb); default 60% of RAM')
    .option('--threads <n>', 'CPU threads per model (0 = runtime default)')
    .option('--allow-private-urls', 'let *_url inputs reach loopback and private addresses (public ones only by default)')
    .addHelpText(
      'after',
      `
Started by an agent, not by hand: stdin and stdout carry MCP messages, logs go to stderr.

Examples:
  $ claude mcp add lserve -- npx lserve mcp
  $ codex mcp add lserve -- npx lserve mcp
  {"mcpServers": {"lserve": {"command": "npx", "args": ["lserve", "mcp"]}}}`,
    )
    .action(async (flags: McpFlags, command: Command) => {
      const global = globalOptions(command);
      // stdout carries only MCP: every log line goes to stderr.
      const log = (message: string) => process.stderr.write(`${message}\n`);
      const engine = createEngine(global, { threads: flags.threads, keepAlive: flags.keepAlive, maxMemory: flags.maxMemory, defaultModel: flags.defaultModel }, { log: global.verbose ? (m) => log(`[engine] ${m}`) : () => {} });
      // Imported here so that other commands never load the MCP SDK.
      const [{ StdioServerTransport }, { createMcpServer }, { STDIO_MAX_INPUT_BYTES }] = await Promise.all([
        import('@modelcontextprotocol/sdk/server/stdio.js'),
        import('../../mcp/server.js'),
        import('../../mcp/context.js'),
      ]);
      const shutdown = new AbortController();
      const server = createMcpServer({
        engine,
        localFiles: true,
        urls: { allowPrivate: Boolean(flags.allowPrivateUrls), maxBytes: STDIO_MAX_INPUT_BYTES },
        signal: shutdown.signal,
        log,
      });
      const transport = new StdioServerTransport();
      let closing = false;
      const close = async (code: number) => {
        if (closing) return;
        closing = true;
        shutdown.abort(new Error('lserve mcp is stopping'));
        await server.close().catch(() => {});
        await engine.close().catch(() => {});
        process.exit(code);
      };
      // The client ends the session by closing stdin (or with a signal).
      process.stdin.on('end', () => void close(0));
      process.stdin.on('close', () => void close(0));
      process.on('SIGINT', () => void close(0));
      process.on('SIGTERM', () => void close(0));
      await server.connect(transport);
      if (global.verbose) log(`lserve mcp: serving ${(await engine.store.list()).length} installed models over stdio`);
    });
}
