import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ANTHROPIC_AGENT_BETAS, anthropicAgentRequest, responsesAgentRequest } from '../helpers/agent-requests.js';
import { TOKENS, tinyQwen3LongFile } from '../helpers/chat-model.js';
import { python, runPython } from '../helpers/python.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Coding agents' requests through the official Python SDKs (anthropic and
 * openai; test/python/agents_sdk.py). .ci/run installs them into a virtual
 * environment at test/.cache/py, used when present; otherwise python3's
 * own. Without them the test is skipped, saying why.
 */

const SCRIPT = fileURLToPath(new URL('../python/agents_sdk.py', import.meta.url));
const MODEL = 'qwen3-agent';
const sdks = spawnSync(python, ['-c', 'import anthropic, openai; print(anthropic.__version__, openai.__version__)'], { encoding: 'utf8' });
const versions = sdks.status === 0 ? sdks.stdout.trim() : undefined;

describe.skipIf(!versions)('agents through the Python anthropic and openai packages (needs them: python3 -m pip install -r test/python/requirements.txt, as .ci/run does into test/.cache/py)', () => {
  let server: TestServer;
  let dir: string;

  beforeAll(async () => {
    server = await startTestServer({ engine: { threads: 1 } });
    await server.engine.store.registerLocal(tinyQwen3LongFile(), { kind: 'chat', id: MODEL });
    dir = mkdtempSync(path.join(os.tmpdir(), 'lserve-agents-'));
  });

  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it(`passes test/python/agents_sdk.py (anthropic and openai ${versions})`, async () => {
    const requests = path.join(dir, 'requests.json');
    writeFileSync(requests, JSON.stringify({ anthropic: { ...anthropicAgentRequest(MODEL), betas: ANTHROPIC_AGENT_BETAS }, responses: responsesAgentRequest(MODEL) }));
    const { code, output } = await runPython(SCRIPT, { LSERVE_URL: server.url, LSERVE_MODEL: MODEL, LSERVE_TOKENS: JSON.stringify(TOKENS), LSERVE_REQUESTS: requests });
    expect(code, output).toBe(0);
    expect(output).toMatch(/^OK$/m);
  }, 180_000);
});
