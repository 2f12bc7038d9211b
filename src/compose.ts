import type { ModelKind } from './core/catalog.js';
import { defaultEngineOptions, Engine as CoreEngine, type EngineOptions } from './core/engine.js';
import type { Family, LoaderTable, PreparerTable } from './core/loader.js';
import { llama } from './families/llama/index.js';
import { ppocr } from './families/ppocr/index.js';
import { qwen3Tts } from './families/qwen3-tts/index.js';
import { sherpaStreaming } from './families/sherpa-streaming/index.js';
import { sherpaVoices } from './families/sherpa-voices/index.js';
import { loadSileroVad } from './families/silero-vad/index.js';
import { stableDiffusion } from './families/stable-diffusion/index.js';
import { whisper } from './families/whisper/index.js';
import { setLlamaAddonHome } from './runtimes/llama/runtime.js';
import { Runners } from './runtimes/runner/runners.js';

/**
 * The composition root: the one module that knows the model families. It
 * builds the loader table the engine is handed; the CLI entry (cli/context.ts),
 * the tests and the benchmarks create their engine here. Nothing under core/
 * imports this file.
 */

export type { EngineOptions } from './core/engine.js';

/** The model families this build ships; each one's index.ts says what it loads. */
const FAMILIES: readonly Family[] = [llama, ppocr, whisper(loadSileroVad), sherpaStreaming, stableDiffusion, qwen3Tts, sherpaVoices];

/** The families' tables merged; two families claiming one `${backend}:${kind}` is a bug to find at start. */
function merged<T>(tables: ReadonlyArray<Record<string, T> | undefined>): Record<string, T> {
  const all: Record<string, T> = {};
  for (const table of tables) {
    for (const [key, value] of Object.entries(table ?? {})) {
      if (key in all) throw new Error(`two model families load '${key}'`);
      all[key] = value;
    }
  }
  return all;
}

/** The loaders, keyed by `${backend}:${kind}`; each family's modules are imported on first use, so `lserve list` or a server that only does OCR never pays for node-llama-cpp. */
export const defaultLoaders: LoaderTable = merged(FAMILIES.map((f) => f.loaders));

/** Install-time work (`lserve pull`), keyed like the loaders. */
export const defaultPreparers: PreparerTable = merged(FAMILIES.map((f) => f.preparers));

/** Loaders whose models run in the server's process even with runners: their family supervises processes of its own. */
const IN_SERVER = new Set(FAMILIES.flatMap((f) => f.ownProcesses ?? []));

/**
 * Where models run: `process` (the default), one supervised runner process
 * per loaded model (runtimes/runner); `server`, in the server's own process
 * (LSERVE_RUNNERS=off: for measuring what the process boundary costs, and
 * for debugging a family with one process to attach to).
 */
export type Isolation = 'process' | 'server';

export function defaultIsolation(value = process.env.LSERVE_RUNNERS): Isolation {
  if (value === undefined || value === '' || value === 'on') return 'process';
  if (value === 'off') return 'server';
  throw new Error(`LSERVE_RUNNERS must be on or off (got '${value}')`);
}

/** The loader table with every runner-served `${backend}:${kind}` loading through `runners`. */
export function runnerLoaders(loaders: LoaderTable, runners: Runners): LoaderTable {
  return Object.fromEntries(
    Object.entries(loaders).map(([key, load]) => {
      const loader = IN_SERVER.has(key) ? undefined : runners.loader(key, key.slice(key.indexOf(':') + 1) as ModelKind);
      return [key, loader ? () => Promise.resolve(loader) : load];
    }),
  );
}

/** The engine with this build's loaders (any option, `loaders` included, may still be overridden). */
export class Engine extends CoreEngine {
  constructor(options: Partial<EngineOptions> & { isolation?: Isolation } = {}) {
    const { isolation = defaultIsolation(), ...rest } = options;
    let runners: Runners | undefined;
    let engine: CoreEngine | undefined;
    if (isolation === 'process') {
      const { home, log } = { ...defaultEngineOptions(), ...rest };
      runners = new Runners({ home, log, report: (event) => engine?.report(event) });
    }
    const loaders = rest.loaders ?? defaultLoaders;
    super({
      preparers: defaultPreparers,
      processes: runners,
      // Silero VAD (bundled), in a worker thread of the server: small, and a session's turn taking waits on it every 32 ms.
      voiceActivity: loadSileroVad,
      ...rest,
      loaders: runners ? runnerLoaders(loaders, runners) : loaders,
    });
    engine = this;
    setLlamaAddonHome(this.store.home);
  }
}

/** `lserve serve`: builds the faster llama.cpp addon in the background when it applies (src/runtimes/llama/background-build.ts). */
export async function buildLlamaAddonInBackground(engine: CoreEngine, log: (message: string) => void): Promise<void> {
  const hasGgufModels = (await engine.store.list()).some((model) => model.entry.backend === 'llama');
  const { buildThreadpoolAddonInBackground } = await import('./runtimes/llama/background-build.js');
  await buildThreadpoolAddonInBackground({ home: engine.store.home, hasGgufModels, log });
}
