import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

/**
 * An MCP server over Streamable HTTP on a loopback port (stateless: a server
 * per request), built with the official SDK, for /v1/responses `mcp` tools:
 * `get_weather` answers, `explode` fails. Each request's headers are kept.
 */
export interface McpToolServer {
  url: string;
  headers: http.IncomingHttpHeaders[];
  calls: string[];
  close(): Promise<void>;
}

const city = z.strictObject({ city: z.enum(['Paris', 'London']) });

export async function startMcpToolServer(): Promise<McpToolServer> {
  const headers: http.IncomingHttpHeaders[] = [];
  const calls: string[] = [];
  const build = () => {
    const server = new McpServer({ name: 'weather-test', version: '1.0.0' });
    server.registerTool('get_weather', { description: 'Current weather of a city', inputSchema: city, annotations: { readOnlyHint: true } }, async (args) => {
      calls.push(`get_weather ${args.city}`);
      return { content: [{ type: 'text', text: `Sunny in ${args.city}` }] };
    });
    server.registerTool('explode', { description: 'Always fails', inputSchema: city }, async () => {
      calls.push('explode');
      throw new Error('the weather station is on fire');
    });
    return server;
  };
  const httpServer = http.createServer(async (req, res) => {
    headers.push(req.headers);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : undefined;
    const server = build();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  });
  await new Promise<void>((resolve) => httpServer.listen(0, '127.0.0.1', resolve));
  const { port } = httpServer.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    headers,
    calls,
    close: () => new Promise((resolve) => httpServer.close(() => resolve())),
  };
}
