import { lstatSync, readFileSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningModelList } from '../../src/api/ps.js';
import { sha256File, shippedAddonFor } from '../../src/runtimes/llama/shipped-addon.js';
import { addonDir, addonKey, addonSources } from '../../src/runtimes/llama/threadpool-addon.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * The CPU variants lserve ships with its addon (cpu-variant-build.ts) are the
 * ones a runner really runs: the file ggml mapped into the runner's process
 * is the shipped copy in the addon's folder — not node-llama-cpp's prebuilt
 * file of the same name — whenever the variant it chose for this CPU is one
 * lserve builds; node-llama-cpp's otherwise.
 */

const sources = addonSources();
const record = sources && process.platform === 'linux' ? shippedAddonFor(sources) : undefined;
let server: TestServer;
const savedBuild = process.env.LSERVE_LLAMA_BUILD;

beforeAll(async () => {
  if (!record) return;
  process.env.LSERVE_LLAMA_BUILD = 'threadpool'; // runners inherit it
  server = await startTestServer({ engine: { threads: 1, parallel: 1 } });
  await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
});

afterAll(async () => {
  await server?.stop();
  process.env.LSERVE_LLAMA_BUILD = savedBuild;
});

describe.skipIf(!record)('the CPU variants shipped with the threadpool addon', () => {
  it('is the variant file the runner maps when ggml chooses a variant lserve builds, and the prebuilt one otherwise', async () => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: CHAT_MODEL_ID, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    const line = server.logs.find((l) => l.startsWith(`${CHAT_MODEL_ID}: context plan:`))!;
    const variant = /llama\.cpp binary: threadpool, CPU variant (\S+)$/.exec(line)?.[1];
    expect(variant, line).toBeDefined();

    const { models } = (await (await fetch(`${server.url}/v1/ps`)).json()) as RunningModelList;
    const pid = models.find((m) => m.id === CHAT_MODEL_ID)!.pid!;
    // The kernel names a mapping by the file's real path: a link shows its target.
    const mapped = [...new Set(readFileSync(`/proc/${pid}/maps`, 'utf8').match(/\/\S*\/libggml-cpu-[^/\s]+\.so$/gm))];
    const file = `libggml-cpu-${variant}.so`;
    const folder = addonDir(server.home, addonKey(sources!));
    if (variant! in record!.cpuVariants) {
      expect(mapped).toEqual([path.join(folder, file)]);
      expect(lstatSync(mapped[0]!).isFile()).toBe(true);
      expect(await sha256File(mapped[0]!)).toBe(record!.cpuVariants[variant!]);
    } else {
      expect(mapped).toEqual([realpathSync(path.join(sources!.binsDir, file))]);
    }
  });
});
