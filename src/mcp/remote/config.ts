import { readFile } from 'node:fs/promises';
import { z } from 'zod';

/**
 * The MCP servers an operator declares for `/v1/responses` (`lserve serve
 * --mcp-config FILE`), in the `mcpServers` shape agents' configuration files
 * use: each label names a stdio server (`command`, `args`, `env`, `cwd`),
 * which lserve starts as a child process on first use, or a Streamable HTTP
 * server (`url`, `headers`). A request's `mcp` tool reaches one by its
 * `server_label`.
 */

export const SERVER_LABEL = /^[a-zA-Z0-9_-]{1,64}$/;

const stdioServer = z.strictObject({
  type: z.literal('stdio').optional(),
  command: z.string().min(1),
  args: z.array(z.string()).default([]),
  env: z.record(z.string(), z.string()).optional(),
  cwd: z.string().optional(),
  description: z.string().optional(),
});

const urlServer = z.strictObject({
  type: z.enum(['http', 'streamable-http', 'streamableHttp']).optional(),
  url: z.url({ protocol: /^https?$/ }),
  headers: z.record(z.string(), z.string()).optional(),
  description: z.string().optional(),
});

const configFile = z.object({
  mcpServers: z.record(z.string().regex(SERVER_LABEL, 'labels are 1-64 letters, digits, _ or -'), z.union([stdioServer, urlServer])),
});

export type StdioServerConfig = z.output<typeof stdioServer>;
export type UrlServerConfig = z.output<typeof urlServer>;
export type McpServerConfig = StdioServerConfig | UrlServerConfig;
export type McpServersConfig = Record<string, McpServerConfig>;

/** The servers a config's JSON declares; throws a message naming the first fault. */
export function parseMcpConfig(json: unknown): McpServersConfig {
  const parsed = configFile.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new Error(`${issue.path.join('.') || '(top level)'}: ${issue.message}`);
  }
  return parsed.data.mcpServers;
}

export async function loadMcpConfig(file: string): Promise<McpServersConfig> {
  const text = await readFile(file, 'utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new Error('not valid JSON');
  }
  return parseMcpConfig(json);
}

export const isStdio = (server: McpServerConfig): server is StdioServerConfig => 'command' in server;
