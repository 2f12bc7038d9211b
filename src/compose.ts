import type { ModelKind } from './core/catalog.js';
import { defaultEngineOptions, Engine as CoreEngine, type EngineOptions } from './core/engine.js';
import type { LoaderTable, PreparerTable } from './core/loader.js';
import { setLlamaAddonHome } from './runtimes/llama/runtime.js';
import { Runners } from './runtimes/runner/runners.js';

/**
 * The composition root: the one module that knows the model families. It
 * builds the loader table the engine is handed; the CLI entry (cli/context.ts),
 * the tests and the benchmarks create their engine here. Nothing under core/
 * imports this file.
 */

export type { EngineOptions } from './core/engine.js';

/**
 * The runtimes this build ships, keyed by `${backend}:${kind}`. Backends are
 * imported lazily so that `lserve list` or a server that only does OCR never
 * pays for loading node-llama-cpp.
 */
export const defaultLoaders: LoaderTable = {
  'llama:chat': () => import('./families/llama/chat-loader.js').then((m) => m.chatLoader),
  'llama:embedding': () => import('./families/llama/embedding.js').then((m) => m.embeddingLoader),
  'llama:rerank': () => import('./families/llama/ranking.js').then((m) => m.rankingLoader),
  'onnx:ocr': () => import('./families/ppocr/loader.js').then((m) => m.ocrLoader),
  'onnx:asr': async () => {
    const [{ createWhisperLoader }, { SileroVad }] = await Promise.all([import('./families/whisper/model.js'), import('./families/silero-vad/silero-vad.js')]);
    // Silero VAD (bundled) finds the speech in long uploads: windows are cut at silences and silence is not decoded.
    return createWhisperLoader(() => SileroVad.load(1));
  },
  'onnx:asr-stream': () => import('./families/sherpa-streaming/index.js').then((m) => m.streamingLoader),
  'onnx:image': () => import('./families/stable-diffusion/loader.js').then((m) => m.imageLoader),
  'onnx:tts': () => import('./families/qwen3-tts/index.js').then((m) => m.qwen3TtsLoader),
  'sherpa:tts': () => import('./families/sherpa-voices/index.js').then((m) => m.sherpaTtsLoader),
};

/** Install-time work (`lserve pull`), keyed like the loaders. */
export const defaultPreparers: PreparerTable = {
  'onnx:image': () => import('./families/stable-diffusion/prepare.js').then((m) => m.imagePreparer),
  'onnx:tts': () => import('./families/qwen3-tts/prepared/prepare.js').then((m) => m.qwen3TtsPreparer),
};

/**
 * Loaders whose models run in the server's process even with runners:
 * sherpa-onnx already runs in supervised processes of its own (runtimes/sherpa).
 */
const IN_SERVER = new Set(['onnx:asr-stream', 'sherpa:tts']);

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
      voiceActivity: () => import('./families/silero-vad/silero-vad.js').then((m) => m.SileroVad.load(1)),
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
