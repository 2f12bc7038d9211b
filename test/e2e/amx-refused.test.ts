import { existsSync, readdirSync, readFileSync, realpathSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningModelList } from '../../src/api/ps.js';
import { amxVerdict } from '../../src/runtimes/llama/amx.js';
import { AMX_VARIANTS } from '../../src/runtimes/llama/cpu-variants.js';
import { shippedAddonFor } from '../../src/runtimes/llama/shipped-addon.js';
import { addonDir, addonKey, addonSources } from '../../src/runtimes/llama/threadpool-addon.js';
import { CHAT_MODEL_ID, tinyQwen3File } from '../helpers/chat-model.js';
import { llamaSourceFile } from '../fixtures/llama-source.js';
import { renderOneLine } from '../fixtures/ocr/corpus.js';
import { startTestServer, tempHome, type TestServer } from '../helpers/server.js';

/**
 * AMX the machine only claims to have: when the probe fails (simulated with
 * LSERVE_AMX_PROBE=fail, since this machine may have no AMX at all), a
 * runner loads llama.cpp from a view of its folder without the AMX variants,
 * names the variant ggml chose instead in its load line, and installs the
 * seccomp filter that keeps AMX from every runtime in it, ONNX Runtime's
 * included. Without the switch, on a CPU without AMX, nothing changes.
 */

function seccompMode(pid: number): string | undefined {
  return /^Seccomp:\s+(\d)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
}

async function pidOf(server: TestServer, model: string): Promise<number> {
  const { models } = (await (await fetch(`${server.url}/v1/ps`)).json()) as RunningModelList;
  return models.find((m) => m.id === model)!.pid!;
}

async function chat(server: TestServer): Promise<void> {
  const res = await fetch(`${server.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: CHAT_MODEL_ID, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
  });
  expect(res.status).toBe(200);
}

it('knows every AMX variant of the llama.cpp that node-llama-cpp bundles', () => {
  const cmake = readFileSync(llamaSourceFile('ggml/src/CMakeLists.txt'), 'utf8');
  const withAmx = [...cmake.matchAll(/ggml_add_cpu_backend_variant\((\S+)([^)]*)\)/g)].filter((m) => /\bAMX_/.test(m[2]!)).map((m) => m[1]);
  expect(withAmx).toEqual(AMX_VARIANTS);
});

it('decides from the CPU when nothing is simulated, and refuses with the reason when the probe is made to fail', async () => {
  const reportsAmx = /^flags\s*:.*\bamx_tile\b/m.test(readFileSync('/proc/cpuinfo', 'utf8'));
  const real = await amxVerdict(await tempHome(), async () => undefined, {});
  if (!reportsAmx) expect(real).toEqual({ state: 'absent', reason: 'the CPU reports no AMX' });
  const failed = await amxVerdict(await tempHome(), async () => undefined, { LSERVE_AMX_PROBE: 'fail' });
  expect(failed).toEqual({ state: 'refused', reason: 'the AMX probe failed (simulated: LSERVE_AMX_PROBE=fail)' });
});

describe.runIf(process.platform === 'linux' && process.arch === 'x64').each(['prebuilt', 'threadpool'])('with the AMX probe failing (%s binary)', (build) => {
  let server: TestServer;
  const saved = { probe: process.env.LSERVE_AMX_PROBE, build: process.env.LSERVE_LLAMA_BUILD };

  beforeAll(async () => {
    // Runners inherit the server's environment.
    process.env.LSERVE_AMX_PROBE = 'fail';
    process.env.LSERVE_LLAMA_BUILD = build;
    server = await startTestServer({ engine: { threads: 1, parallel: 1 } });
    await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
  });

  afterAll(async () => {
    await server?.stop();
    for (const [name, value] of [['LSERVE_AMX_PROBE', saved.probe], ['LSERVE_LLAMA_BUILD', saved.build]] as const) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  });

  it('loads llama.cpp without its AMX variants, says which variant it chose, and keeps AMX from the runner', async () => {
    await chat(server);
    const line = server.logs.find((l) => l.startsWith(`${CHAT_MODEL_ID}: context plan:`))!;
    const variant = new RegExp(`llama\\.cpp binary: ${build}, CPU variant (\\S+) \\(AMX refused: the AMX probe failed \\(simulated: LSERVE_AMX_PROBE=fail\\); the AMX variants left out\\)$`).exec(line)?.[1];
    expect(variant, line).toBeDefined();
    expect(AMX_VARIANTS).not.toContain(variant);
    const views = readdirSync(path.join(server.home, 'llama')).filter((name) => name.startsWith('noamx-'));
    expect(views).toHaveLength(1);
    const files = readdirSync(path.join(server.home, 'llama', views[0]!));
    expect(files).toContain('llama-addon.node');
    expect(files).toContain(`libggml-cpu-${variant}.so`);
    for (const amx of AMX_VARIANTS) expect(files).not.toContain(`libggml-cpu-${amx}.so`);
    if (build === 'threadpool') {
      // The view links the addon's own copy of a variant lserve ships (cpu-variant-build.ts), node-llama-cpp's file otherwise.
      const file = `libggml-cpu-${variant}.so`;
      const ours = variant! in shippedAddonFor(addonSources()!)!.cpuVariants;
      const expected = ours ? path.join(addonDir(server.home, addonKey(addonSources()!)), file) : realpathSync(path.join(addonSources()!.binsDir, file));
      expect(realpathSync(path.join(server.home, 'llama', views[0]!, file))).toBe(expected);
    }
    // The seccomp filter that denies the kernel's AMX permission to the runner's runtimes.
    expect(seccompMode(await pidOf(server, CHAT_MODEL_ID))).toBe('2');
  });

  it('keeps AMX from an ONNX Runtime runner too', async () => {
    const { png } = await renderOneLine('Local models answer offline.', 26);
    const res = await fetch(`${server.url}/v1/ocr`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'ppocr-v4-mobile', image_base64: png.toString('base64') }) });
    expect(res.status).toBe(200);
    expect(seccompMode(await pidOf(server, 'ppocr-v4-mobile'))).toBe('2');
  });
});

describe.runIf(process.platform === 'linux')('without the switch', () => {
  it('leaves a runner as it is on a CPU that reports no AMX', async () => {
    if (/^flags\s*:.*\bamx_tile\b/m.test(readFileSync('/proc/cpuinfo', 'utf8'))) return; // an AMX machine probes for real
    const server = await startTestServer({ engine: { threads: 1, parallel: 1 } });
    try {
      await server.engine.store.registerLocal(tinyQwen3File(), { kind: 'chat', id: CHAT_MODEL_ID });
      await chat(server);
      const line = server.logs.find((l) => l.startsWith(`${CHAT_MODEL_ID}: context plan:`))!;
      expect(line).toMatch(/llama\.cpp binary: prebuilt, CPU variant \S+$/);
      expect(existsSync(path.join(server.home, 'llama'))).toBe(false);
      expect(seccompMode(await pidOf(server, CHAT_MODEL_ID))).toBe('0');
    } finally {
      await server.stop();
    }
  });
});
