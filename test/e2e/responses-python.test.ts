import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHAT_MODEL_ID, TOKENS, tinyQwen3File } from '../helpers/chat-model.js';
import { openaiVersion, runPython } from '../helpers/python.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * The official Python `openai` package runs the Responses API against lserve
 * (test/python/responses_sdk.py). .ci/run installs it into a virtual
 * environment at test/.cache/py, which is used when present; otherwise
 * python3's own. Without the package the test is skipped, saying why.
 */

const SCRIPT = fileURLToPath(new URL('../python/responses_sdk.py', import.meta.url));
const version = openaiVersion();

describe.skipIf(!version)("the Responses API through the Python openai package (needs it: python3 -m pip install -r test/python/requirements.txt, as .ci/run does into test/.cache/py)", () => {
  let server: TestServer;
  // A store that takes no response over 1000 bytes: a streamed response's failure after its start.
  let small: TestServer;

  beforeAll(async () => {
    [server, small] = await Promise.all([
      startTestServer({ engine: { threads: 1 } }),
      startTestServer({ engine: { threads: 1 }, server: { responses: { maxBytesPerResponse: 1000 } } }),
    ]);
    for (const s of [server, small]) await s.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  });

  afterAll(async () => {
    await Promise.all([server?.stop(), small?.stop()]);
  });

  it(`passes test/python/responses_sdk.py (openai ${version})`, async () => {
    const { code, output } = await runPython(SCRIPT, { LSERVE_URL: server.url, LSERVE_SMALL_URL: small.url, LSERVE_MODEL: CHAT_MODEL_ID, LSERVE_TOKENS: JSON.stringify(TOKENS) });
    // unittest's report names each case and, on failure, its traceback.
    expect(code, output).toBe(0);
    expect(output).toMatch(/^OK$/m);
  }, 120_000);
});
