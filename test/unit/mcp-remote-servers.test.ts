import { describe, expect, it } from 'vitest';
import { parseMcpConfig } from '../../src/mcp/remote/config.js';
import { RemoteMcpServers } from '../../src/mcp/remote/servers.js';

/** The operator's rules for the MCP servers /v1/responses may reach (mcp/remote/). */

describe('--mcp-config', () => {
  it('reads the mcpServers shape agents use', () => {
    const servers = parseMcpConfig({ mcpServers: { files: { command: 'npx', args: ['x'], env: { A: '1' } }, web: { type: 'http', url: 'https://mcp.example.com/mcp', headers: { a: 'b' } } } });
    expect(servers.files).toMatchObject({ command: 'npx', args: ['x'], env: { A: '1' } });
    expect(servers.web).toMatchObject({ url: 'https://mcp.example.com/mcp' });
  });

  it('names the fault', () => {
    expect(() => parseMcpConfig({})).toThrow(/mcpServers/);
    expect(() => parseMcpConfig({ mcpServers: { 'bad label': { command: 'x' } } })).toThrow(/mcpServers.bad label/);
    expect(() => parseMcpConfig({ mcpServers: { a: { url: 'ftp://x' } } })).toThrow(/mcpServers\.a/);
  });
});

describe('which MCP servers a request may reach', () => {
  const servers = (allowPrivate: boolean | string[] = false) =>
    new RemoteMcpServers({ declared: { local: { command: 'node', args: [] }, web: { url: 'http://10.0.0.5/mcp', headers: { 'x-a': '1' } } }, allowHosts: ['127.0.0.1', '.example.com'], allowPrivate, log: () => {} });

  it('reaches declared servers by label, whatever their address', async () => {
    expect(await servers().target({ server_label: 'local' }, 'tools.0')).toMatchObject({ label: 'local', stdio: { command: 'node' } });
    expect(await servers().target({ server_label: 'web', authorization: 't' }, 'tools.0')).toMatchObject({ headers: { 'x-a': '1', authorization: 'Bearer t' } });
  });

  it('refuses a label not declared, a host not allowed, a private address, a conflicting URL', async () => {
    await expect(servers().target({ server_label: 'nope' }, 'tools.1')).rejects.toMatchObject({ status: 400, code: 'mcp_server_not_declared', param: 'tools.1.server_label' });
    await expect(servers().target({ server_label: 'x', server_url: 'http://192.168.1.2/mcp' }, 'tools.0')).rejects.toMatchObject({ status: 400, code: 'mcp_server_not_allowed', param: 'tools.0.server_url' });
    await expect(servers().target({ server_label: 'x', server_url: 'http://127.0.0.1:9/mcp' }, 'tools.0')).rejects.toMatchObject({ status: 400, code: 'private_url_forbidden', param: 'tools.0.server_url' });
    await expect(servers().target({ server_label: 'local', server_url: 'http://127.0.0.1:9/mcp' }, 'tools.0')).rejects.toMatchObject({ status: 400, code: 'mcp_server_label_conflict' });
  });

  it('lets an allowed host reach a private address under --allow-private-urls, pinned to the checked address', async () => {
    expect(await servers(['127.0.0.1']).target({ server_label: 'x', server_url: 'http://127.0.0.1:9/mcp', headers: { h: 'v' } }, 'tools.0')).toMatchObject({ address: { address: '127.0.0.1', family: 4 }, headers: { h: 'v' } });
  });
});
