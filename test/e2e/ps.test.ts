import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningModel, RunningModelList } from '../../src/api/ps.js';
import { runCli } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { freePort } from '../helpers/free-port.js';

/**
 * GET /v1/ps and `lserve ps` (the built CLI) against a running server: the
 * loaded models with their memory, the requests on them and when each
 * unloads; the API key; and a server that is not there.
 */

let server: TestServer;
let keyed: TestServer;

beforeAll(async () => {
  server = await startTestServer({ engine: { threads: 1, keepAliveMs: 10 * 60_000 } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  keyed = await startTestServer({ server: { apiKey: 'sesame' } });
});

afterAll(async () => {
  await server?.stop();
  await keyed?.stop();
});


/** The CLI pointed at `target` by flags; LSERVE_* from the test's environment must not leak in. */
function ps(target: TestServer | number, args: string[] = [], env: NodeJS.ProcessEnv = {}) {
  const port = typeof target === 'number' ? target : target.port;
  return runCli(['ps', '--port', String(port), ...args], { env: { LSERVE_HOST: '', LSERVE_PORT: '', LSERVE_API_KEY: '', ...env } });
}

describe('lserve ps', () => {
  it('lists nothing before a model is loaded', async () => {
    const res = await fetch(`${server.url}/v1/ps`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ models: [] });
    const table = await ps(server);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^ID\s+KIND\s+PID\s+MEMORY\s+ACTIVE\s+QUEUED\s+UNTIL\n/);
    expect(table.stdout).toContain('No models loaded.');
  });

  it('shows a loaded model with its memory, requests and keep-alive expiry (table, --json, GET /v1/ps)', async () => {
    const completion = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: CHAT_MODEL_ID, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(completion.status).toBe(200);
    await completion.arrayBuffer();

    const body = (await (await fetch(`${server.url}/v1/ps`)).json()) as RunningModelList;
    expect(body.models).toHaveLength(1);
    const model = body.models[0]!;
    expect(model).toMatchObject({ id: CHAT_MODEL_ID, kind: 'chat', active_requests: 0, queued: 0 });
    expect(model.memory_bytes).toBeGreaterThan(0);
    // The model runs in a runner process of its own, whose resident memory the system reports.
    expect(model.pid).toEqual(expect.any(Number));
    expect(model.pid).not.toBe(process.pid);
    expect(model.rss_bytes).toBeGreaterThan(10 * 1024 * 1024);
    expect(model.peak_rss_bytes).toBeGreaterThanOrEqual(model.rss_bytes!);
    expect(Date.parse(model.loaded_at)).toBeLessThanOrEqual(Date.now());
    // The server's keep-alive is 10 minutes, counted from the end of the request.
    const left = Date.parse(model.expires_at!) - Date.now();
    expect(left).toBeGreaterThan(9 * 60_000);
    expect(left).toBeLessThanOrEqual(10 * 60_000);

    const json = await ps(server, ['--json']);
    expect(json.code).toBe(0);
    const listed = JSON.parse(json.stdout) as RunningModel[];
    expect(listed).toEqual([{ ...model, expires_at: listed[0]!.expires_at, rss_bytes: listed[0]!.rss_bytes, peak_rss_bytes: listed[0]!.peak_rss_bytes }]);
    expect(Date.parse(listed[0]!.expires_at!)).toBeGreaterThanOrEqual(Date.parse(model.expires_at!));

    const table = await ps(server);
    expect(table.code).toBe(0);
    expect(table.stderr).toBe('');
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^ID\s+KIND\s+PID\s+MEMORY\s+ACTIVE\s+QUEUED\s+UNTIL$/);
    // e.g. "qwen3-test  chat  4242  311 MB  0  0  10 minutes from now"
    expect(lines[1]).toMatch(new RegExp(`^${CHAT_MODEL_ID}\\s+chat\\s+${model.pid}\\s+\\d+(\\.\\d)? [KMG]B\\s+0\\s+0\\s+(9|10) minutes from now$`));
    // The columns line up under the header.
    expect(lines[1]!.indexOf('chat')).toBe(lines[0]!.indexOf('KIND'));
  });

  it('sends the API key (flag or LSERVE_API_KEY), and says so when it is missing', async () => {
    const missing = await ps(keyed);
    expect(missing.code).toBe(1);
    expect(missing.stdout).toBe('');
    expect(missing.stderr.trim().split('\n')).toHaveLength(1);
    expect(missing.stderr).toMatch(/API key.*--api-key or set LSERVE_API_KEY/i);

    const flag = await ps(keyed, ['--api-key', 'sesame', '--json']);
    expect(flag.code).toBe(0);
    expect(JSON.parse(flag.stdout)).toEqual([]);
    const env = await ps(keyed, ['--json'], { LSERVE_API_KEY: 'sesame' });
    expect(env.code).toBe(0);
    expect(JSON.parse(env.stdout)).toEqual([]);
  });

  it('says in one line that no server is running, and exits 1', async () => {
    const port = await freePort();
    const res = await ps(port);
    expect(res.code).toBe(1);
    expect(res.stdout).toBe('');
    expect(res.stderr).toBe(`lserve: no lserve server is running at http://127.0.0.1:${port} (connection refused); start one with \`lserve serve\`, or point --host/--port at it\n`);
  });

  it('takes the port from LSERVE_PORT like serve', async () => {
    const res = await runCli(['ps', '--json'], { env: { LSERVE_HOST: '127.0.0.1', LSERVE_PORT: String(server.port), LSERVE_API_KEY: '' } });
    expect(res.code).toBe(0);
    expect((JSON.parse(res.stdout) as RunningModel[]).map((m) => m.id)).toEqual([CHAT_MODEL_ID]);
  });
});
