import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { openaiVersion, runPython } from '../helpers/python.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { syntheticPiperVoice } from '../fixtures/onnx/piper.js';

/**
 * The official Python `openai` package runs the Realtime API against lserve
 * (test/python/realtime_sdk.py): `client.realtime.connect` over ws:// to the
 * local server, a text and a spoken answer. Its realtime client needs the
 * `websockets` package (the `openai[realtime]` extra, in
 * test/python/requirements.txt). .ci/run installs both into a virtual
 * environment at test/.cache/py, which is used when present; otherwise
 * python3's own. Without them the test is skipped, saying why.
 */

const SCRIPT = fileURLToPath(new URL('../python/realtime_sdk.py', import.meta.url));
const version = openaiVersion(['openai', 'websockets']);

describe.skipIf(!version)('the Realtime API through the Python openai package (needs it with websockets: python3 -m pip install -r test/python/requirements.txt, as .ci/run does into test/.cache/py)', () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({ engine: { threads: 1 } });
    await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
    await server.engine.store.registerDirectory(await syntheticPiperVoice(), { kind: 'tts', id: 'piper-test' });
  });

  afterAll(async () => {
    await server?.stop();
  });

  it(`passes test/python/realtime_sdk.py (openai ${version})`, async () => {
    const { code, output } = await runPython(SCRIPT, { LSERVE_URL: server.url, LSERVE_MODEL: CHAT_MODEL_ID });
    // unittest's report names each case and, on failure, its traceback.
    expect(code, output).toBe(0);
    expect(output).toMatch(/^OK$/m);
  }, 120_000);
});
