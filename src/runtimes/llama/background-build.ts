import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { runsOnCpu } from './runtime.js';
import { PREBUILDS, threadpoolAddon } from './shipped-addon.js';
import { addonDir, addonKey, addonSources, buildThreadpoolAddon, missingBuildTools } from './threadpool-addon.js';

/**
 * Where lserve ships no threadpool addon for this install (another platform,
 * another node-llama-cpp), `lserve serve` builds one once, in the background,
 * while the prebuilt binary serves: models loaded after it is ready use it.
 * It does nothing when LSERVE_LLAMA_BUILD names a binary, when no GGUF model is
 * installed, when a GPU runs the models, when the machine lacks the tools, or
 * when a build from the same sources failed before (`npm run build:llama`
 * retries and shows why).
 */

export type BuildOutcome = 'built' | 'present' | 'skipped' | 'failed';

export interface BackgroundBuildOptions {
  home: string;
  /** Whether any installed model runs on llama.cpp. */
  hasGgufModels: boolean;
  log: (message: string) => void;
  /** For tests: the build itself, the check for its tools, and whether the CPU runs the models (no GPU). */
  build?: typeof buildThreadpoolAddon;
  missingTools?: typeof missingBuildTools;
  onCpu?: () => Promise<boolean>;
  /** Where shipped addons are looked for (tests: a folder without one). */
  prebuilds?: string;
}

export async function buildThreadpoolAddonInBackground({ home, hasGgufModels, log, build = buildThreadpoolAddon, missingTools = missingBuildTools, onCpu = runsOnCpu, prebuilds = PREBUILDS }: BackgroundBuildOptions): Promise<BuildOutcome> {
  if (process.env.LSERVE_LLAMA_BUILD || !hasGgufModels) return 'skipped';
  const sources = addonSources();
  // A GPU keeps its prebuilt binary: nothing to build or copy.
  if (!sources || process.platform !== 'linux' || !(await onCpu())) return 'skipped';
  if (await threadpoolAddon(home, sources, prebuilds)) return 'present';
  const failure = failureRecord(home, addonKey(sources));
  if (existsSync(failure)) return 'skipped';
  const missing = await missingTools();
  if (missing.length > 0) {
    log(`llama.cpp: the prebuilt binary serves (≈ 0.8× llama.cpp's own speed on one stream); installing ${missing.join(', ')} lets lserve build a faster addon`);
    return 'skipped';
  }
  log('llama.cpp: building a faster addon for this machine in the background (≈ 1 CPU-minute, low priority); the prebuilt binary serves meanwhile');
  const started = Date.now();
  try {
    await build(home, () => {}, sources);
    log(`llama.cpp: threadpool addon ready after ${Math.round((Date.now() - started) / 1000)} s; GGUF models loaded from now on use it`);
    return 'built';
  } catch (error) {
    const reason = (error as Error).message;
    await mkdir(path.dirname(failure), { recursive: true });
    await writeFile(failure, `${JSON.stringify({ failedAt: new Date().toISOString(), reason }, null, 2)}\n`);
    log(`llama.cpp: building the threadpool addon failed; the prebuilt binary stays (run \`npm run build:llama\` for details): ${reason.split('\n')[0]}`);
    return 'failed';
  }
}

function failureRecord(home: string, key: string): string {
  return `${addonDir(home, key)}.failed.json`;
}

