import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import type { ResponseCreateParamsNonStreaming } from 'openai/resources/responses/responses';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * A stdio MCP server declared in the operator's config is a supervised child:
 * one that dies between requests is started again on the next use, and the
 * call runs on the new process.
 */

const ECHO_SERVER = fileURLToPath(new URL('../fixtures/mcp/echo-server.mjs', import.meta.url));

describe('stdio MCP servers for /v1/responses', () => {
  let server: TestServer;
  let client: OpenAI;
  let dir: string;
  let pidFile: string;

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-mcp-supervision-'));
    pidFile = path.join(dir, 'echo.pid');
    server = await startTestServer({
      engine: { threads: 1 },
      server: { mcpServers: { echo: { command: process.execPath, args: [ECHO_SERVER], env: { PID_FILE: pidFile } } } },
    });
    await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });

  afterAll(async () => {
    await server?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const echo = async () => {
    const response = await client.responses.create({
      model: CHAT_MODEL_ID,
      temperature: 0,
      input: 'Say hello',
      tools: [{ type: 'mcp', server_label: 'echo', require_approval: 'never' }],
      tool_choice: { type: 'mcp', server_label: 'echo', name: 'echo' } as unknown as ResponseCreateParamsNonStreaming['tool_choice'],
      max_output_tokens: 80,
    } as ResponseCreateParamsNonStreaming);
    const call = response.output.find((item) => item.type === 'mcp_call');
    if (call?.type !== 'mcp_call') throw new Error('no mcp_call');
    return call;
  };

  it('starts a server that died again on the next use', async () => {
    const first = await echo();
    expect(first.error ?? null).toBeNull();
    const pid = Number(readFileSync(pidFile, 'utf8'));
    process.kill(pid, 'SIGKILL');
    await expect.poll(() => { try { process.kill(pid, 0); return true; } catch { return false; } }, { timeout: 10_000 }).toBe(false);
    const second = await echo();
    expect(second.error ?? null).toBeNull();
    expect(second.output).toMatch(/^echo: /);
    const restarted = Number(readFileSync(pidFile, 'utf8'));
    expect(restarted).not.toBe(pid);
    expect(() => process.kill(restarted, 0)).not.toThrow();
  });
});
