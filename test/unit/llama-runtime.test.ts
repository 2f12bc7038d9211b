import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { THREADPOOL_BUILD_MARKER, hasThreadpoolBuild, llamaBuildChoice, nodeLlamaCppDir } from '../../src/runtimes/llama/runtime.js';

/** Which llama.cpp binary lserve loads: LSERVE_LLAMA_BUILD, else the threadpool build while it is node-llama-cpp's last build. */

let dir: string | undefined;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = undefined;
});

async function llamaDir(files: Record<string, unknown>): Promise<string> {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-llama-'));
  for (const [name, content] of Object.entries(files)) await writeFile(path.join(dir, name), JSON.stringify(content));
  return dir;
}

describe('llama.cpp binary choice', () => {
  it('defaults to the threadpool build only while it is the last build', async () => {
    expect(hasThreadpoolBuild(await llamaDir({ 'lastBuild.json': { folderName: 'linux-x64-a' }, [THREADPOOL_BUILD_MARKER]: { folderName: 'linux-x64-a' } }))).toBe(true);
    // Another build made later (e.g. `node-llama-cpp source download`) replaces it as the last build.
    expect(hasThreadpoolBuild(await llamaDir({ 'lastBuild.json': { folderName: 'linux-x64-b' }, [THREADPOOL_BUILD_MARKER]: { folderName: 'linux-x64-a' } }))).toBe(false);
    expect(hasThreadpoolBuild(await llamaDir({ 'lastBuild.json': { folderName: 'linux-x64-a' } }))).toBe(false);
    expect(hasThreadpoolBuild(await llamaDir({}))).toBe(false);
  });

  it('follows LSERVE_LLAMA_BUILD when set, and rejects a value it does not know', () => {
    expect(llamaBuildChoice(undefined, true)).toBe('lastBuild');
    expect(llamaBuildChoice(undefined, false)).toBe('prebuilt');
    expect(llamaBuildChoice('prebuilt', true)).toBe('prebuilt');
    expect(llamaBuildChoice('auto', false)).toBe('auto');
    expect(() => llamaBuildChoice('fast', false)).toThrow(/prebuilt, lastBuild or auto/);
  });

  it('looks for the build records in node-llama-cpp\'s own llama/ folder', () => {
    // The folder that holds the addon source scripts/build-llama.mjs patches, and lastBuild.json after a build.
    expect(existsSync(path.join(nodeLlamaCppDir(), 'addon', 'AddonContext.cpp'))).toBe(true);
  });
});
