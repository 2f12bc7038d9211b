import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { InvalidRequestError, LserveError } from '../../core/errors.js';
import { checkedAddress } from '../../http/net/fetch-public.js';
import { pinnedFetch, type Address } from '../../http/net/pinned-fetch.js';
import { isStdio, type McpServersConfig, type StdioServerConfig } from './config.js';

/**
 * The MCP servers `/v1/responses` may call tools of (a request's `mcp`
 * tools). Which ones is the operator's choice: a label declared in
 * `--mcp-config`, or a request's `server_url` on a host listed with
 * `--mcp-allow-host`, and then only at a public address unless
 * `--allow-private-urls` lets it reach private ones (the rule every URL the
 * server fetches obeys; the address is resolved once and connections go to
 * it). Stdio servers are child processes started on first use, shared by
 * every request, restarted after they exit, and ended with the server;
 * an HTTP server gets a connection per request, carrying that request's
 * `headers` and `authorization` to that server only (never logged).
 */

export interface McpServerPolicy {
  /** The servers of --mcp-config, by label. */
  declared: McpServersConfig;
  /** Hosts a request's server_url may name (--mcp-allow-host): names or IP literals; `.example.com` covers subdomains. */
  allowHosts: readonly string[];
  /** Non-public addresses a server_url may reach (--allow-private-urls). */
  allowPrivate: boolean | readonly string[];
  log: (message: string) => void;
}

/** What a request's `mcp` tool says about where its server is. */
export interface McpServerRequest {
  server_label: string;
  server_url?: string | null;
  headers?: Record<string, string> | null;
  authorization?: string | null;
}

/** A server the rules let a request reach. */
export interface McpTarget {
  label: string;
  stdio?: StdioServerConfig;
  url?: URL;
  /** The checked address a request-supplied URL is pinned to. */
  address?: Address;
  headers: Record<string, string>;
}

/** A tool as the server lists it, in the shape of the mcp_list_tools item. */
export interface ListedTool {
  name: string;
  input_schema: unknown;
  description: string | null;
  annotations: unknown;
}

export type CallOutcome = { output: string; error?: undefined } | { error: string; output?: undefined };

export interface McpConnection {
  list(signal: AbortSignal): Promise<ListedTool[]>;
  call(name: string, args: Record<string, unknown>, signal: AbortSignal): Promise<CallOutcome>;
  close(): Promise<void>;
}

export const MCP_LIMITS = {
  /** Connecting (a stdio server's start included) and listing tools. */
  connectMs: 30_000,
  /** One tool call. */
  callMs: 120_000,
  /** Pages of tools/list read, and tools kept. */
  listPages: 10,
  maxTools: 128,
  /** Characters of a tool's output kept for the model and the mcp_call item. */
  outputChars: 262_144,
} as const;

function hostAllowed(hostname: string, allowed: readonly string[]): boolean {
  const host = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return allowed.some((entry) => {
    const e = entry.trim().toLowerCase().replace(/^\[|\]$/g, '');
    return e === '*' || e === host || (e.startsWith('.') && (host.endsWith(e) || host === e.slice(1)));
  });
}

/** A tool's result as the text the model reads. */
function resultText(result: CallToolResult): string {
  const texts = result.content.filter((c) => c.type === 'text').map((c) => c.text);
  const text = texts.length ? texts.join('\n') : result.structuredContent ? JSON.stringify(result.structuredContent) : JSON.stringify(result.content);
  return text.length > MCP_LIMITS.outputChars ? `${text.slice(0, MCP_LIMITS.outputChars)}…` : text;
}

function connection(client: Client, close: () => Promise<void>): McpConnection {
  return {
    async list(signal) {
      const tools: ListedTool[] = [];
      let cursor: string | undefined;
      for (let page = 0; page < MCP_LIMITS.listPages && tools.length < MCP_LIMITS.maxTools; page++) {
        const listed = await client.listTools(cursor ? { cursor } : undefined, { signal, timeout: MCP_LIMITS.connectMs });
        for (const t of listed.tools) tools.push({ name: t.name, input_schema: t.inputSchema, description: t.description ?? null, annotations: t.annotations ?? null });
        cursor = listed.nextCursor;
        if (!cursor) break;
      }
      return tools.slice(0, MCP_LIMITS.maxTools);
    },
    async call(name, args, signal) {
      try {
        const result = (await client.callTool({ name, arguments: args }, undefined, { signal, timeout: MCP_LIMITS.callMs })) as CallToolResult;
        const text = resultText(result);
        return result.isError ? { error: text || 'the tool reported an error' } : { output: text };
      } catch (error) {
        signal.throwIfAborted();
        return { error: (error as Error).message };
      }
    },
    close,
  };
}

export class RemoteMcpServers {
  /** Running stdio servers by label (a promise while one starts, shared by every request that needs it). */
  private readonly stdio = new Map<string, Promise<{ client: Client; transport: StdioClientTransport }>>();
  private closed = false;

  constructor(private readonly policy: McpServerPolicy) {}

  /** The server a request's `mcp` tool at `param` may reach, or a 400 naming the rule that refuses it. */
  async target(tool: McpServerRequest, param: string): Promise<McpTarget> {
    const label = tool.server_label;
    const declared = this.policy.declared[label];
    const requestHeaders = { ...(tool.headers ?? {}), ...(tool.authorization ? { authorization: `Bearer ${tool.authorization}` } : {}) };
    if (declared) {
      if (tool.server_url && (isStdio(declared) || new URL(tool.server_url).href !== new URL(declared.url).href)) {
        throw new InvalidRequestError(`server_label '${label}' names a server declared with lserve serve --mcp-config; leave server_url out (or give its declared URL).`, {
          param: `${param}.server_url`,
          code: 'mcp_server_label_conflict',
        });
      }
      if (isStdio(declared)) return { label, stdio: declared, headers: {} };
      return { label, url: new URL(declared.url), headers: { ...(declared.headers ?? {}), ...requestHeaders } };
    }
    if (!tool.server_url) {
      throw new InvalidRequestError(`No MCP server labelled '${label}' is declared (lserve serve --mcp-config), and the tool gives no server_url.`, {
        param: `${param}.server_label`,
        code: 'mcp_server_not_declared',
      });
    }
    const url = new URL(tool.server_url);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new InvalidRequestError(`server_url must be an http or https URL.`, { param: `${param}.server_url`, code: 'invalid_url' });
    }
    if (!hostAllowed(url.hostname, this.policy.allowHosts)) {
      throw new InvalidRequestError(`server_url names the host '${url.hostname}', which is not one this server may reach: the operator lists MCP server hosts with lserve serve --mcp-allow-host (or declares servers with --mcp-config).`, {
        param: `${param}.server_url`,
        code: 'mcp_server_not_allowed',
      });
    }
    try {
      const address = await checkedAddress(url, { allowPrivate: this.policy.allowPrivate, maxBytes: 0 }, `${param}.server_url`);
      return { label, url, address, headers: requestHeaders };
    } catch (error) {
      // The private-address rule, as the 400 every refused MCP server is.
      if (error instanceof LserveError && error.status === 403) throw new InvalidRequestError(error.message, { param: error.param, code: error.code });
      throw error;
    }
  }

  /** A connection to the target: the shared stdio server (started now if it is not running), or a new HTTP session. */
  async connect(target: McpTarget, signal: AbortSignal): Promise<McpConnection> {
    if (this.closed) throw new Error('the server is shutting down');
    if (target.stdio) {
      const { client } = await this.startStdio(target.label, target.stdio);
      return connection(client, async () => {});
    }
    const client = new Client({ name: 'lserve', version: '1.0.0' });
    const transport = new StreamableHTTPClientTransport(target.url!, {
      requestInit: { headers: target.headers, redirect: 'error' },
      ...(target.address ? { fetch: pinnedFetch(target.address) } : {}),
    });
    await client.connect(transport, { signal, timeout: MCP_LIMITS.connectMs });
    return connection(client, () => client.close().catch(() => {}));
  }

  private startStdio(label: string, config: StdioServerConfig) {
    let started = this.stdio.get(label);
    if (started) return started;
    started = (async () => {
      const transport = new StdioClientTransport({ command: config.command, args: config.args, env: { ...getDefaultEnvironment(), ...(config.env ?? {}) }, cwd: config.cwd, stderr: 'pipe' });
      transport.stderr?.on('data', (chunk: Buffer) => {
        for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) this.policy.log(`[mcp ${label}] ${line}`);
      });
      const client = new Client({ name: 'lserve', version: '1.0.0' });
      client.onclose = () => {
        // Exited (or closed): the next request starts it again.
        if (this.stdio.get(label) === started) this.stdio.delete(label);
      };
      try {
        await client.connect(transport, { timeout: MCP_LIMITS.connectMs });
      } catch (error) {
        this.stdio.delete(label);
        await transport.close().catch(() => {});
        throw error;
      }
      return { client, transport };
    })();
    this.stdio.set(label, started);
    return started;
  }

  /** Ends every stdio server (the server is shutting down). */
  async close(): Promise<void> {
    this.closed = true;
    const running = [...this.stdio.values()];
    this.stdio.clear();
    await Promise.all(running.map((p) => p.then(({ client }) => client.close()).catch(() => {})));
  }
}
