import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { buildThreadpoolAddonInBackground } from '../../src/runtimes/llama/background-build.js';
import { addonDir, addonKey, addonSources, findThreadpoolAddon } from '../../src/runtimes/llama/threadpool-addon.js';

/** When `lserve serve` builds the threadpool addon in the background: the decisions, with a stand-in for the compiler. */

let home: string;
const saved = { build: process.env.LSERVE_LLAMA_BUILD, gpu: process.env.LSERVE_GPU };
beforeEach(async () => {
  home = await mkdtemp(path.join(os.tmpdir(), 'lserve-addon-'));
  delete process.env.LSERVE_LLAMA_BUILD; // vitest.config.ts sets it for every other test
  process.env.LSERVE_GPU = 'off';
});
afterEach(async () => {
  process.env.LSERVE_LLAMA_BUILD = saved.build;
  if (saved.gpu === undefined) delete process.env.LSERVE_GPU;
  else process.env.LSERVE_GPU = saved.gpu;
  await rm(home, { recursive: true, force: true });
});

const noToolsMissing = async () => [];
/** A prebuilds folder without an addon: the case of a platform lserve ships none for. */
const NONE_SHIPPED = path.join(os.tmpdir(), 'lserve-no-prebuilds');

describe('background build of the threadpool addon', () => {
  it.runIf(process.platform === 'linux' && process.arch === 'x64')('does not build where lserve ships the addon: it installs the shipped one', async () => {
    const build = vi.fn();
    expect(await buildThreadpoolAddonInBackground({ home, hasGgufModels: true, log: () => {}, build, missingTools: noToolsMissing })).toBe('present');
    expect(build).not.toHaveBeenCalled();
    expect(findThreadpoolAddon(home)).toBeDefined();
  });

  it('builds when GGUF models are installed and the tools exist, and says so', async () => {
    const build = vi.fn(async () => '/built/llama-addon.node');
    const log = vi.fn();
    expect(await buildThreadpoolAddonInBackground({ home, hasGgufModels: true, log, build, missingTools: noToolsMissing, prebuilds: NONE_SHIPPED })).toBe('built');
    expect(build).toHaveBeenCalledWith(home, expect.any(Function), addonSources());
    expect(log.mock.calls.map(([m]) => m)).toEqual([expect.stringMatching(/building a faster addon .* the prebuilt binary serves meanwhile/), expect.stringMatching(/threadpool addon ready after \d+ s/)]);
  });

  it('does nothing when LSERVE_LLAMA_BUILD names a binary or no GGUF model is installed', async () => {
    const build = vi.fn();
    process.env.LSERVE_LLAMA_BUILD = 'prebuilt';
    expect(await buildThreadpoolAddonInBackground({ home, hasGgufModels: true, log: () => {}, build, missingTools: noToolsMissing, prebuilds: NONE_SHIPPED })).toBe('skipped');
    delete process.env.LSERVE_LLAMA_BUILD;
    expect(await buildThreadpoolAddonInBackground({ home, hasGgufModels: false, log: () => {}, build, missingTools: noToolsMissing, prebuilds: NONE_SHIPPED })).toBe('skipped');
    expect(build).not.toHaveBeenCalled();
  });

  it('does nothing where a GPU runs the models: they keep the prebuilt binary', async () => {
    const build = vi.fn();
    const onCpu = vi.fn(async () => false);
    expect(await buildThreadpoolAddonInBackground({ home, hasGgufModels: true, log: () => {}, build, missingTools: noToolsMissing, onCpu, prebuilds: NONE_SHIPPED })).toBe('skipped');
    expect(onCpu).toHaveBeenCalled();
    expect(build).not.toHaveBeenCalled();
    expect(findThreadpoolAddon(home)).toBeUndefined();
  });

  it('names the missing tools once and stays on the prebuilt binary', async () => {
    const build = vi.fn();
    const log = vi.fn();
    expect(await buildThreadpoolAddonInBackground({ home, hasGgufModels: true, log, build, missingTools: async () => ['git'], prebuilds: NONE_SHIPPED })).toBe('skipped');
    expect(build).not.toHaveBeenCalled();
    expect(log).toHaveBeenCalledWith(expect.stringMatching(/prebuilt binary serves .* installing git lets lserve build a faster addon/));
  });

  it('records a failed build and does not retry it at every start', async () => {
    const build = vi.fn(async () => {
      throw new Error('c++ AddonContext.cpp failed (exit 1): error: something');
    });
    const log = vi.fn();
    expect(await buildThreadpoolAddonInBackground({ home, hasGgufModels: true, log, build, missingTools: noToolsMissing, prebuilds: NONE_SHIPPED })).toBe('failed');
    expect(log).toHaveBeenLastCalledWith(expect.stringMatching(/failed; the prebuilt binary stays .*npm run build:llama.*: c\+\+ AddonContext\.cpp failed/));
    const record = `${addonDir(home, addonKey(addonSources()!))}.failed.json`;
    expect(existsSync(record)).toBe(true);
    expect(JSON.parse(await readFile(record, 'utf8'))).toMatchObject({ reason: expect.stringContaining('AddonContext.cpp') });
    expect(await buildThreadpoolAddonInBackground({ home, hasGgufModels: true, log, build, missingTools: noToolsMissing, prebuilds: NONE_SHIPPED })).toBe('skipped');
    expect(build).toHaveBeenCalledTimes(1);
  });
});
