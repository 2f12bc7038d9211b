import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openaiVersion, runPython } from '../helpers/python.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Text completions and log-probabilities through the official Python `openai`
 * package (test/python/completions_sdk.py), on the Qwen3 golden model with an
 * f32 KV cache, the numbers checked against transformers' reference there.
 * .ci/run installs the package into a virtual environment at test/.cache/py,
 * which is used when present; otherwise python3's own. Without the package
 * the test is skipped, saying why.
 */

const SCRIPT = fileURLToPath(new URL('../python/completions_sdk.py', import.meta.url));
const golden = (file: string) => fileURLToPath(new URL(`../golden/qwen3-logprobs/${file}`, import.meta.url));
const MODEL = 'qwen3-golden';
const version = openaiVersion();

describe.skipIf(!version)('completions and log-probabilities through the Python openai package (needs it: python3 -m pip install -r test/python/requirements.txt, as .ci/run does into test/.cache/py)', () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({ engine: { threads: 1, kvCacheType: 'f32' } });
    await server.engine.store.registerLocal(golden('model.gguf'), { kind: 'chat', id: MODEL });
  });

  afterAll(async () => {
    await server?.stop();
  });

  it(`passes test/python/completions_sdk.py (openai ${version})`, async () => {
    const { code, output } = await runPython(SCRIPT, { LSERVE_URL: server.url, LSERVE_MODEL: MODEL, LSERVE_REFERENCE: golden('reference.json') });
    expect(code, output).toBe(0);
    expect(output).toMatch(/^OK$/m);
  }, 120_000);
});
