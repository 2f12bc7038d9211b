import type { ResponseItem } from '../api/responses/items.js';
import type { McpListing } from '../api/responses/request.js';
import type { McpListedTool, McpToolDeclaration } from '../api/responses/tools.js';
import { InvalidRequestError } from '../core/errors.js';
import type { CallOutcome, McpConnection, McpTarget, RemoteMcpServers } from '../mcp/remote/servers.js';

/**
 * One /v1/responses request's remote MCP servers (its `mcp` tools): each
 * checked against the operator's rules before any work (a 400 naming the
 * rule), its tools listed unless the conversation already holds a listing
 * of that server (as OpenAI caches them), its calls run over one
 * connection per server for the request, closed when the request ends.
 * A failing server is an outcome the model is shown, never a 500.
 */

/** Most MCP calls the server runs for one response (max_tool_calls may lower it). */
export const MAX_MCP_CALLS = 16;

type ApprovalRequest = Extract<ResponseItem, { type: 'mcp_approval_request' }>;

export interface ApprovalAnswer {
  request: ApprovalRequest;
  approve: boolean;
}

interface Server {
  declaration: McpToolDeclaration;
  target: McpTarget;
  param: string;
  /** A listing from earlier in the conversation. */
  cached?: McpListedTool[];
  /** The listing made for this request. */
  listed?: { tools: McpListedTool[] } | { error: string };
  connection?: Promise<McpConnection>;
}

export class RequestMcpServers {
  private constructor(
    private readonly servers: RemoteMcpServers,
    private readonly byLabel: Map<string, Server>,
    /** The client's answers to approval requests not answered yet, in input order. */
    readonly approvals: ApprovalAnswer[],
  ) {}

  /** Whether the request names any MCP server. */
  get any(): boolean {
    return this.byLabel.size > 0;
  }

  /** Checks the request's mcp tools and approval answers; throws the 400s. */
  static async prepare(servers: RemoteMcpServers, tools: readonly unknown[], history: readonly ResponseItem[], input: readonly ResponseItem[]): Promise<RequestMcpServers> {
    const byLabel = new Map<string, Server>();
    for (const [i, tool] of tools.entries()) {
      const declaration = tool as McpToolDeclaration;
      if (declaration.type !== 'mcp') continue;
      const param = `tools.${i}`;
      if (byLabel.has(declaration.server_label)) throw new InvalidRequestError(`Two mcp tools have the server_label '${declaration.server_label}'.`, { param: `${param}.server_label` });
      const target = await servers.target(declaration, param);
      const cached = history.findLast((item) => item.type === 'mcp_list_tools' && item.server_label === declaration.server_label && item.error == null);
      byLabel.set(declaration.server_label, { declaration, target, param, ...(cached?.type === 'mcp_list_tools' ? { cached: cached.tools } : {}) });
    }
    const requests = new Map(history.flatMap((item) => (item.type === 'mcp_approval_request' ? [[item.id, item] as const] : [])));
    const answered = new Set(history.flatMap((item) => (item.type === 'mcp_call' && item.approval_request_id ? [item.approval_request_id] : [])));
    const approvals: ApprovalAnswer[] = [];
    input.forEach((item, j) => {
      if (item.type !== 'mcp_approval_response' || answered.has(item.approval_request_id)) return;
      const request = requests.get(item.approval_request_id);
      const param = `input.${j}.approval_request_id`;
      if (!request) throw new InvalidRequestError(`No mcp_approval_request with id '${item.approval_request_id}' in the conversation.`, { param });
      if (!byLabel.has(request.server_label)) throw new InvalidRequestError(`The approved call is to the MCP server '${request.server_label}', which no mcp tool of this request names.`, { param });
      answered.add(item.approval_request_id);
      approvals.push({ request, approve: item.approve });
    });
    return new RequestMcpServers(servers, byLabel, approvals);
  }

  /** Lists the tools of each server the conversation has no listing of; returns those new listings (failures included). */
  async list(signal: AbortSignal): Promise<Array<{ label: string; outcome: { tools: McpListedTool[] } | { error: string } }>> {
    const fresh = [...this.byLabel.entries()].filter(([, server]) => !server.cached);
    await Promise.all(
      fresh.map(async ([, server]) => {
        try {
          server.listed = { tools: await (await this.connection(server, signal)).list(signal) };
        } catch (error) {
          signal.throwIfAborted();
          server.listed = { error: `Could not list the tools of the MCP server: ${(error as Error).message}` };
        }
      }),
    );
    return fresh.map(([label, server]) => ({ label, outcome: server.listed! }));
  }

  /** Each server's tools, for the model. */
  listings(): McpListing[] {
    return [...this.byLabel.values()].map((server) => ({
      declaration: server.declaration,
      tools: server.cached ?? (server.listed && 'tools' in server.listed ? server.listed.tools : []),
      param: server.param,
    }));
  }

  /** Runs a call; whatever fails is the outcome's error. */
  async call(label: string, name: string, args: string, signal: AbortSignal): Promise<CallOutcome> {
    const server = this.byLabel.get(label);
    if (!server) return { error: `No MCP server '${label}' in this request.` };
    let parsed: unknown;
    try {
      parsed = args.trim() ? JSON.parse(args) : {};
    } catch {
      return { error: 'The arguments are not valid JSON.' };
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) return { error: 'The arguments must be a JSON object.' };
    try {
      return await (await this.connection(server, signal)).call(name, parsed as Record<string, unknown>, signal);
    } catch (error) {
      signal.throwIfAborted();
      return { error: `The MCP server could not be reached: ${(error as Error).message}` };
    }
  }

  private connection(server: Server, signal: AbortSignal): Promise<McpConnection> {
    server.connection ??= this.servers.connect(server.target, signal);
    // A failed connection is tried again by the next call.
    server.connection.catch(() => (server.connection = undefined));
    return server.connection;
  }

  async close(): Promise<void> {
    await Promise.all([...this.byLabel.values()].map((server) => server.connection?.then((c) => c.close()).catch(() => {})));
  }
}
