import { existsSync, lstatSync, readdirSync, readlinkSync } from 'node:fs';
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Llama, LlamaLogLevel } from 'node-llama-cpp';
import { chooseBinary, getRuntime, llamaBuildChoice, loadAddonRuntime, nodeLlamaCppDir, runsOnCpu, runtimeBuild, setLlamaAddonHome } from '../../src/runtimes/llama/runtime.js';
import { BUILT_CPU_VARIANTS } from '../../src/runtimes/llama/cpu-variant-build.js';
import { PREBUILDS, sha256File, shippedAddonFor, shippedDir, threadpoolAddon } from '../../src/runtimes/llama/shipped-addon.js';
import { tinyQwen3File } from '../helpers/chat-model.js';
import { addonDir, addonKey, addonSources, findThreadpoolAddon, missingBuildTools } from '../../src/runtimes/llama/threadpool-addon.js';

/** Which llama.cpp binary lserve loads: LSERVE_LLAMA_BUILD, else the threadpool addon shipped or built for this install. */

let home: string | undefined;
afterEach(async () => {
  if (home) await rm(home, { recursive: true, force: true });
  home = undefined;
});

/** A home holding what a finished addon build leaves (without compiling one): build.json and links to the prebuilt libraries. */
async function homeWithBuild(record: { key: string }, link = path.join(addonSources()!.binsDir, 'libggml-base.so')): Promise<string> {
  home = await mkdtemp(path.join(os.tmpdir(), 'lserve-llama-'));
  const dir = addonDir(home, addonKey(addonSources()!));
  await mkdir(dir, { recursive: true });
  await writeFile(path.join(dir, 'build.json'), JSON.stringify(record));
  await symlink(link, path.join(dir, 'libggml-base.so'));
  return home;
}

describe('llama.cpp binary choice', () => {
  it('follows LSERVE_LLAMA_BUILD when set, else the threadpool addon when built, and rejects a value it does not know', () => {
    expect(llamaBuildChoice('', true)).toBe('threadpool'); // '' is unset (undefined would read this process's env)
    expect(llamaBuildChoice('', false)).toBe('prebuilt');
    expect(llamaBuildChoice('prebuilt', true)).toBe('prebuilt');
    expect(llamaBuildChoice('lastBuild', true)).toBe('lastBuild');
    expect(llamaBuildChoice('auto', false)).toBe('auto');
    expect(() => llamaBuildChoice('fast', false)).toThrow(/threadpool, prebuilt, lastBuild, auto/);
  });

  it('keeps the prebuilt binary (GPU builds) where a GPU runs the models, and takes the CPU-only addon only where the CPU does', async () => {
    // The machine's facts are the probes' answers: this one has a GPU node-llama-cpp supports, and a built addon.
    const ADDON = '/home/.lserve/llama/addon/llama-addon.node';
    const findAddon = vi.fn(async () => ADDON);
    const gpu = async () => false;
    const cpu = async () => true;
    expect(await chooseBinary(undefined, gpu, findAddon)).toEqual({ choice: 'prebuilt', addon: undefined });
    expect(await chooseBinary('', gpu, findAddon)).toEqual({ choice: 'prebuilt', addon: undefined });
    expect(findAddon).not.toHaveBeenCalled();
    // The same machine with its models on the CPU: the addon, or the prebuilt binary where none is built.
    expect(await chooseBinary(undefined, cpu, findAddon)).toEqual({ choice: 'threadpool', addon: ADDON });
    expect(await chooseBinary(undefined, cpu, async () => undefined)).toEqual({ choice: 'prebuilt', addon: undefined });
    // LSERVE_LLAMA_BUILD decides whatever runs the models.
    expect(await chooseBinary('threadpool', gpu, findAddon)).toEqual({ choice: 'threadpool', addon: ADDON });
    await expect(chooseBinary('threadpool', gpu, async () => undefined)).rejects.toThrow(/LSERVE_LLAMA_BUILD=threadpool, but no threadpool addon/);
    expect(await chooseBinary('prebuilt', cpu, findAddon)).toEqual({ choice: 'prebuilt', addon: undefined });
  });

  it('runs on the CPU when node-llama-cpp supports no GPU here, or LSERVE_GPU=off', async () => {
    const saved = process.env.LSERVE_GPU;
    try {
      delete process.env.LSERVE_GPU;
      expect(await runsOnCpu(async () => ['cuda', false])).toBe(false);
      expect(await runsOnCpu(async () => ['vulkan'])).toBe(false);
      expect(await runsOnCpu(async () => [false])).toBe(true);
      expect(await runsOnCpu(async () => [])).toBe(true);
      process.env.LSERVE_GPU = 'off';
      expect(await runsOnCpu(async () => ['cuda', false])).toBe(true);
    } finally {
      if (saved === undefined) delete process.env.LSERVE_GPU;
      else process.env.LSERVE_GPU = saved;
    }
  });

  it("finds node-llama-cpp's addon sources, bundled llama.cpp and CPU-only prebuilt binaries", () => {
    const sources = addonSources();
    expect(sources).toBeDefined();
    expect(sources!.llamaDir).toBe(nodeLlamaCppDir());
    for (const file of ['addon/AddonContext.cpp', 'gitRelease.bundle']) expect(existsSync(path.join(sources!.llamaDir, file)), file).toBe(true);
    expect(existsSync(path.join(sources!.binsDir, 'llama-addon.node'))).toBe(true);
    expect(existsSync(path.join(sources!.binsDir, '_nlcBuildMetadata.json'))).toBe(true);
  });

  it('uses a threadpool addon only when it was built from these sources and its libraries still resolve', async () => {
    const key = addonKey(addonSources()!);
    expect(findThreadpoolAddon(await homeWithBuild({ key }))).toBe(path.join(addonDir(home!, key), 'llama-addon.node'));
    await rm(home!, { recursive: true });
    // Built from another node-llama-cpp or patch: the key in its record differs.
    expect(findThreadpoolAddon(await homeWithBuild({ key: '0000000000000000' }))).toBeUndefined();
    await rm(home!, { recursive: true });
    // node_modules moved or was reinstalled elsewhere: a dangling library link.
    expect(findThreadpoolAddon(await homeWithBuild({ key }, '/nonexistent/libggml-base.so'))).toBeUndefined();
    await rm(home!, { recursive: true });
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-llama-'));
    expect(findThreadpoolAddon(home)).toBeUndefined();
  });

  it('names the build tools a machine lacks', async () => {
    expect(await missingBuildTools({ CXX: '/nonexistent/c++' })).toContainEqual(expect.stringMatching(/C\+\+ compiler \(\/nonexistent\/c\+\+; set CXX\)/));
  });

  it('creates a working runtime from an addon it is handed, as it does from the threadpool addon', async () => {
    // The prebuilt addon stands in for a compiled one (the tests never compile): the
    // same Llama._create path, memory checks included, must size and run a context.
    const runtime = await loadAddonRuntime(Llama, path.join(addonSources()!.binsDir, 'llama-addon.node'), { logLevel: LlamaLogLevel.error, logger: () => {} });
    const model = await runtime.loadModel({ modelPath: tinyQwen3File() });
    try {
      const context = await model.createContext({ sequences: 4 }); // sized by node-llama-cpp's memory checks
      expect(context.contextSize).toBeGreaterThan(0);
      const sequence = context.getSequence();
      let generated = 0;
      for await (const token of sequence.evaluate(model.tokenize('hello'), { temperature: 0 })) {
        expect(token).toBeGreaterThanOrEqual(0);
        if (++generated === 3) break;
      }
      expect(generated).toBe(3);
      await context.dispose();
    } finally {
      await model.dispose();
      await runtime.dispose();
    }
  });
});

/** The first tokens a runtime generates for a prompt at temperature 0. */
async function greedyTokens(runtime: Llama, count: number): Promise<number[]> {
  const model = await runtime.loadModel({ modelPath: tinyQwen3File() });
  try {
    const context = await model.createContext({ sequences: 1, contextSize: 256 });
    const tokens: number[] = [];
    for await (const token of context.getSequence().evaluate(model.tokenize('The quick brown fox'), { temperature: 0 })) {
      tokens.push(token);
      if (tokens.length === count) break;
    }
    await context.dispose();
    return tokens;
  } finally {
    await model.dispose();
  }
}

describe.runIf(process.platform === 'linux' && process.arch === 'x64')('the threadpool addon shipped for linux-x64', () => {
  it('was built from the installed node-llama-cpp and the current patch, and its files are the ones recorded', async () => {
    // Fails after an upgrade of node-llama-cpp or a change to threadpool.patch or to the
    // CPU variants built until `npm run build:llama -- --ship` is run again and its output committed.
    const record = shippedAddonFor(addonSources()!);
    expect(record, `prebuilds/linux-x64 does not match node-llama-cpp ${addonSources()!.nodeLlamaCppVersion}, scripts/llama/threadpool.patch and the CPU variants built`).toBeDefined();
    const bytes = await readFile(path.join(shippedDir(), 'llama-addon.node'));
    expect(createHash('sha256').update(bytes).digest('hex')).toBe(record!.sha256);
    expect(Object.keys(record!.cpuVariants)).toEqual(BUILT_CPU_VARIANTS);
    for (const [variant, sha256] of Object.entries(record!.cpuVariants)) expect(await sha256File(path.join(shippedDir(), `libggml-cpu-${variant}.so`)), variant).toBe(sha256);
    // Nothing else ships beside them: a variant no longer built would be dead weight in the package.
    expect(readdirSync(shippedDir()).sort()).toEqual(['llama-addon.json', 'llama-addon.node', ...BUILT_CPU_VARIANTS.map((v) => `libggml-cpu-${v}.so`)].sort());
  });

  it('is what a fresh home runs by default, and it computes what the prebuilt binary computes', async () => {
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-llama-'));
    const saved = { build: process.env.LSERVE_LLAMA_BUILD, gpu: process.env.LSERVE_GPU };
    delete process.env.LSERVE_LLAMA_BUILD; // vitest.config.ts pins the prebuilt binary for every other test
    process.env.LSERVE_GPU = 'off';
    setLlamaAddonHome(home);
    try {
      const runtime = await getRuntime();
      expect(runtimeBuild()).toBe('threadpool');
      const installed = findThreadpoolAddon(home);
      expect(installed).toBe(path.join(addonDir(home, addonKey(addonSources()!)), 'llama-addon.node'));
      expect(JSON.parse(await readFile(path.join(path.dirname(installed!), 'build.json'), 'utf8'))).toMatchObject({ shipped: true, cpuVariants: BUILT_CPU_VARIANTS });
      // lserve's own CPU variants are copied in; node-llama-cpp's libraries, its other variants included, are linked.
      for (const name of readdirSync(addonSources()!.binsDir).filter((f) => f.endsWith('.so'))) {
        const file = path.join(path.dirname(installed!), name);
        if (BUILT_CPU_VARIANTS.some((v) => name === `libggml-cpu-${v}.so`)) expect(lstatSync(file).isFile(), name).toBe(true);
        else expect(readlinkSync(file), name).toBe(path.join(addonSources()!.binsDir, name));
      }
      const prebuilt = await loadAddonRuntime(Llama, path.join(addonSources()!.binsDir, 'llama-addon.node'), { logLevel: LlamaLogLevel.error, logger: () => {} });
      try {
        const [ours, theirs] = [await greedyTokens(runtime, 8), await greedyTokens(prebuilt, 8)];
        expect(ours).toHaveLength(8);
        expect(ours).toEqual(theirs);
      } finally {
        await prebuilt.dispose();
      }
    } finally {
      process.env.LSERVE_LLAMA_BUILD = saved.build;
      if (saved.gpu === undefined) delete process.env.LSERVE_GPU;
      else process.env.LSERVE_GPU = saved.gpu;
    }
  });

  it('keeps the threadpool a context was created with, and can stop it spinning between decodes', async () => {
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-llama-'));
    const addon = await threadpoolAddon(home);
    const runtime = await loadAddonRuntime(Llama, addon!, { logLevel: LlamaLogLevel.error, logger: () => {} });
    const setPolling = (runtime as unknown as { _bindings: { AddonContext: { setThreadpoolPolling?: (on: boolean) => void } } })._bindings.AddonContext.setThreadpoolPolling;
    expect(typeof setPolling).toBe('function');
    const model = await runtime.loadModel({ modelPath: tinyQwen3File() });
    try {
      const context = await model.createContext({ sequences: 1, contextSize: 256, threads: 2 });
      const native = (context as unknown as { _ctx: { getThreads(): number; setThreads(threads: number): void } })._ctx;
      // More threads than the pool holds are clamped to it: replacing the pool would leave
      // ggml's CPU backend pointing at the freed one (the use after free that hung or
      // crashed the server when several models decoded at once).
      native.setThreads(8);
      expect(native.getThreads()).toBe(2);
      const decode = async () => {
        const sequence = context.getSequence();
        const tokens: number[] = [];
        for await (const token of sequence.evaluate(model.tokenize('The quick brown fox'), { temperature: 0 })) {
          tokens.push(token);
          native.setThreads(tokens.length % 2 ? 1 : 2); // fewer threads than the pool holds run on it
          if (tokens.length === 6) break;
        }
        sequence.dispose();
        return tokens;
      };
      const polling = await decode();
      setPolling!(false); // paused after every decode: the next one wakes it
      const paused = await decode();
      setPolling!(true);
      expect(polling).toHaveLength(6);
      expect(paused).toEqual(polling);
      await context.dispose();
    } finally {
      await model.dispose();
      await runtime.dispose();
    }
  });

  it('is not installed when its file differs from its record or it was built for other sources', async () => {
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-llama-'));
    const prebuilds = path.join(home, 'prebuilds');
    await cp(PREBUILDS, prebuilds, { recursive: true });
    const file = path.join(shippedDir(prebuilds), 'llama-addon.node');
    const bytes = await readFile(file);
    bytes[bytes.length - 1] ^= 0xff;
    await writeFile(file, bytes);
    expect(await threadpoolAddon(path.join(home, 'a'), addonSources(), prebuilds)).toBeUndefined();
    expect(existsSync(path.join(home, 'a'))).toBe(false);
    bytes[bytes.length - 1] ^= 0xff; // intact again: installed
    await writeFile(file, bytes);
    expect(await threadpoolAddon(path.join(home, 'a2'), addonSources(), prebuilds)).toBeDefined();
    // A damaged CPU variant keeps the whole addon out: it would be loaded in place of node-llama-cpp's.
    const variant = path.join(shippedDir(prebuilds), `libggml-cpu-${BUILT_CPU_VARIANTS[0]}.so`);
    await writeFile(variant, (await readFile(variant)).subarray(1));
    expect(await threadpoolAddon(path.join(home, 'a3'), addonSources(), prebuilds)).toBeUndefined();
    expect(existsSync(path.join(home, 'a3'))).toBe(false);
    const record = path.join(shippedDir(prebuilds), 'llama-addon.json');
    await writeFile(record, JSON.stringify({ ...JSON.parse(await readFile(record, 'utf8')), key: '0000000000000000' }));
    expect(shippedAddonFor(addonSources()!, prebuilds)).toBeUndefined();
    expect(await threadpoolAddon(path.join(home, 'b'), addonSources(), prebuilds)).toBeUndefined();
  });
});
