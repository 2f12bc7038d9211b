import { createRequire } from 'node:module';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Llama, LlamaLogLevel as LlamaLogLevelValue, LlamaModel } from 'node-llama-cpp';
import type { LoadOptions } from '../../core/loader.js';
import { defaultHome } from '../../core/store.js';
import { amxVerdict, type AmxVerdict } from './amx.js';
import { loadedVariant, withoutAmxVariants } from './cpu-variants.js';
import { threadpoolAddon } from './shipped-addon.js';
import { addonSources, buildMetadataOf } from './threadpool-addon.js';

/**
 * The llama.cpp binding, shared by the chat, embedding and rerank loaders.
 * node-llama-cpp is imported lazily: commands that never touch a GGUF model
 * don't pay for it.
 *
 * Which binary (LSERVE_LLAMA_BUILD, else the default):
 * - `threadpool`: the default — node-llama-cpp's addon recompiled with a
 *   persistent CPU threadpool per context, linked against the prebuilt
 *   llama.cpp libraries: shipped with lserve for linux-x64 (shipped-addon.ts),
 *   else built here (threadpool-addon.ts; `lserve serve` builds it in the
 *   background, `npm run build:llama` on demand). Used only where
 *   node-llama-cpp would run on the CPU anyway: it links the CPU-only libraries.
 * - `prebuilt`: node-llama-cpp's prebuilt binary (GPU builds included); the
 *   default where no threadpool addon applies. It starts a fresh CPU
 *   threadpool per decode: ≈ 0.87× llama-server on one stream (bench/text.md).
 * - `lastBuild`: whatever `npx --no node-llama-cpp source download` built last.
 * - `auto`: node-llama-cpp decides, and may compile llama.cpp for minutes.
 *
 * A binary becomes the default the moment its build completes; models loaded
 * before keep the runtime they were loaded with (both addons bind the same
 * llama.cpp libraries, loaded once in the process).
 */

export type LlamaBuildChoice = 'threadpool' | 'prebuilt' | 'lastBuild' | 'auto';
const CHOICES: readonly LlamaBuildChoice[] = ['threadpool', 'prebuilt', 'lastBuild', 'auto'];

const runtimes = new Map<string, Promise<Llama>>();
/** What each runtime was created from: the binary (a threadpool addon that failed to load is a prebuilt runtime), the CPU variant ggml chose, and the verdict on AMX. */
const factsOf = new WeakMap<Llama, { build: LlamaBuildChoice; variant?: string; amx: AmxVerdict }>();
/** The binary of the runtime handed out last. */
let lastHandedOut: LlamaBuildChoice | undefined;
/** Where threadpool addons are built and found: the lserve home (set by the engine). */
let addonHome = defaultHome();

export function setLlamaAddonHome(home: string): void {
  addonHome = home;
}

/** The home set last: a worker thread that loads llama.cpp is handed it. */
export function llamaAddonHome(): string {
  return addonHome;
}

/** Whether the threadpool addon's pools spin between decodes (its default) or sleep as soon as a decode ends. */
let polling = true;
const created = new Set<Llama>();

/**
 * Lets the persistent threadpools of this process spin between decodes, or
 * not: spinning is worth a few percent of decode speed while chat decoding is
 * all the machine does, and costs a core to any other work. Applies to every
 * runtime, now and later; the prebuilt binary has no persistent pool.
 */
export function setThreadpoolPolling(on: boolean): void {
  polling = on;
  for (const runtime of created) applyPolling(runtime);
}

function applyPolling(runtime: Llama): void {
  (runtime as unknown as { _bindings?: { AddonContext?: { setThreadpoolPolling?: (on: boolean) => void } } })._bindings?.AddonContext?.setThreadpoolPolling?.(polling);
}

/**
 * LSERVE_LLAMA_BUILD, validated; unset, the threadpool addon when one is built
 * for this install and the CPU runs the model, else the prebuilt binary.
 */
export function llamaBuildChoice(value = process.env.LSERVE_LLAMA_BUILD, threadpoolAddon = false): LlamaBuildChoice {
  if (value === undefined || value === '') return threadpoolAddon ? 'threadpool' : 'prebuilt';
  if ((CHOICES as readonly string[]).includes(value)) return value as LlamaBuildChoice;
  throw new Error(`LSERVE_LLAMA_BUILD must be ${CHOICES.join(', ')} (got '${value}')`);
}

/**
 * Whether node-llama-cpp runs models on the CPU here (LSERVE_GPU=off, or no
 * GPU it supports): only then does the CPU-only threadpool addon apply.
 * `supportedGpus` is node-llama-cpp's probe (a test hands in another machine's).
 */
export async function runsOnCpu(supportedGpus: () => Promise<ReadonlyArray<string | false>> = nodeLlamaCppGpus): Promise<boolean> {
  if (process.env.LSERVE_GPU === 'off') return true;
  return (await supportedGpus()).filter((gpu) => gpu !== false).length === 0;
}

async function nodeLlamaCppGpus(): Promise<ReadonlyArray<string | false>> {
  const { getLlamaGpuTypes } = await import('node-llama-cpp');
  return getLlamaGpuTypes('supported');
}

/**
 * Which binary getRuntime loads, given LSERVE_LLAMA_BUILD (`explicit`), and
 * the threadpool addon when that is the choice. The probes are arguments so
 * that the decision can be tested for a machine with a GPU.
 */
export async function chooseBinary(
  explicit: string | undefined,
  onCpu: () => Promise<boolean> = runsOnCpu,
  findAddon: () => Promise<string | undefined> = () => threadpoolAddon(addonHome),
): Promise<{ choice: LlamaBuildChoice; addon?: string }> {
  // By default the CPU-only addon is only for models the CPU runs (a GPU keeps its prebuilt binary).
  const wantsAddon = explicit === 'threadpool' || (!explicit && (await onCpu()));
  const addon = wantsAddon ? await findAddon() : undefined;
  // '' for unset: llamaBuildChoice would read this process's environment for undefined.
  const choice = llamaBuildChoice(explicit ?? '', addon !== undefined);
  if (choice === 'threadpool' && !addon) throw new Error(`LSERVE_LLAMA_BUILD=threadpool, but no threadpool addon is shipped for ${process.platform}-${process.arch} or built under ${addonHome} (run \`npm run build:llama\`)`);
  return { choice, addon };
}

/** node-llama-cpp's `llama/` folder (its bundled source, addon and build records). */
export function nodeLlamaCppDir(): string {
  // The package's entry is dist/index.js; its build records live in llama/.
  return fileURLToPath(new URL('../llama', import.meta.resolve('node-llama-cpp')));
}

export async function getRuntime(): Promise<Llama> {
  const explicit = process.env.LSERVE_LLAMA_BUILD;
  const { choice, addon } = await chooseBinary(explicit);
  const key = choice === 'threadpool' ? `threadpool:${addon}` : choice;
  let runtime = runtimes.get(key);
  if (!runtime) {
    runtime = createRuntime(choice, addon);
    if (choice === 'threadpool' && !explicit) {
      // A default that fails to load must not cost the user chat: back to the prebuilt binary, for good.
      runtime = runtime.catch((error: unknown) => {
        console.warn(`llama.cpp: the threadpool addon ${addon} did not load (${(error as Error).message}); using the prebuilt binary`);
        return getRuntimeOf('prebuilt');
      });
      runtimes.set(key, runtime);
    } else {
      runtimes.set(key, runtime);
      runtime.catch(() => runtimes.delete(key));
    }
  }
  const resolved = await runtime;
  lastHandedOut = factsOf.get(resolved)?.build;
  return resolved;
}

function getRuntimeOf(choice: 'prebuilt'): Promise<Llama> {
  let runtime = runtimes.get(choice);
  if (!runtime) runtimes.set(choice, (runtime = createRuntime(choice, undefined)));
  return runtime;
}

async function createRuntime(choice: LlamaBuildChoice, addon: string | undefined): Promise<Llama> {
  const { getLlama, Llama, LlamaLogLevel } = await import('node-llama-cpp');
  const common = {
    gpu: process.env.LSERVE_GPU === 'off' ? (false as const) : ('auto' as const),
    logLevel: process.env.LSERVE_LLAMA_LOG === 'debug' ? LlamaLogLevel.debug : LlamaLogLevel.error,
    logger: (level: LlamaLogLevelValue, message: string) => {
      // What llama.cpp says while a model loads becomes the load error's
      // detail (logged once, by the model manager), not loose stderr lines.
      if (loading.size > 0 && (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal)) {
        for (const lines of loading) lines.push(message.trim());
        return;
      }
      Llama.defaultConsoleLogger(level, message);
    },
  };
  // AMX refused (amx.ts): the addon is loaded from a view of its folder without the AMX variants.
  const amx = await amxVerdict(addonHome, () => threadpoolAddon(addonHome));
  const withoutAmx = (file: string) => (amx.state === 'refused' ? withoutAmxVariants(file, addonHome) : Promise.resolve(file));
  const prebuiltFolder = amx.state === 'refused' && choice === 'prebuilt' && (await runsOnCpu()) ? addonSources()?.binsDir : undefined;
  const runtime =
    choice === 'threadpool'
      ? await loadAddonRuntime(Llama, await withoutAmx(addon!), common)
      : prebuiltFolder
        ? await loadAddonRuntime(Llama, await withoutAmx(path.join(prebuiltFolder, 'llama-addon.node')), common)
        : choice === 'lastBuild'
          ? await getLlama('lastBuild', common)
          : await getLlama({ ...common, build: choice === 'auto' ? 'auto' : 'never' });
  // node-llama-cpp's default thread budget is twice the math cores (4 on a
  // 2-core machine), and a context given no thread count takes all of it.
  // More ggml threads than cores spin-wait against each other at every op:
  // measured on 2 cores with a synthetic Qwen3-0.6B Q8_0, decode ran at a
  // median 11.4 tok/s with 4 threads against 15.0 with 2 (bench/text.md).
  // llama.cpp's own tools default to the math-core count; so do we.
  runtime.maxThreads = runtime.cpuMathCores;
  factsOf.set(runtime, { build: choice, variant: loadedVariant(), amx });
  created.add(runtime);
  applyPolling(runtime);
  return runtime;
}

/**
 * A runtime over the threadpool addon. node-llama-cpp (pinned to one version
 * in package.json) creates every runtime through `Llama._create` with the
 * addon it picked; its public getLlama cannot be pointed at another addon.
 */
export async function loadAddonRuntime(LlamaClass: typeof Llama, addonPath: string, options: { logLevel: LlamaLogLevelValue; logger: (level: LlamaLogLevelValue, message: string) => void }): Promise<Llama> {
  const create = (LlamaClass as unknown as { _create?: (o: Record<string, unknown>) => Promise<Llama> })._create;
  if (typeof create !== 'function') throw new Error('this node-llama-cpp version cannot load the threadpool addon (no Llama._create); set LSERVE_LLAMA_BUILD=prebuilt');
  const bindings: unknown = createRequire(import.meta.url)(addonPath);
  return create.call(LlamaClass, {
    bindings,
    bindingPath: addonPath,
    buildType: 'prebuilt',
    buildMetadata: await buildMetadataOf(addonPath),
    ...options,
    // What getLlama passes by default (node-llama-cpp 3.21.1 on Linux): without
    // a RAM padding its memory checks compute with NaN and refuse every context.
    ramPadding: (totalRam: number) => Math.floor(Math.min(totalRam * 0.25, 1024 ** 3)),
    vramPadding: 0, // the addon links the CPU-only libraries
    tempDir: false,
    debug: false,
  });
}

/** Which binary a runtime (default: the one handed out last) was created from; undefined before the first. */
export function runtimeBuild(runtime?: Llama): LlamaBuildChoice | undefined {
  return runtime ? factsOf.get(runtime)?.build : lastHandedOut;
}

/**
 * A runtime for load lines: its binary and CPU variant, and why AMX is not
 * used where the CPU reports it ("threadpool, CPU variant icelake (AMX
 * refused: the AMX probe failed …; sapphirerapids left out)").
 */
export function describeRuntime(runtime: Llama): string {
  const facts = factsOf.get(runtime);
  if (!facts) return 'unknown';
  const variant = facts.variant ? `, CPU variant ${facts.variant}` : '';
  const amx = facts.amx.state === 'refused' ? ` (AMX refused: ${facts.amx.reason}; the AMX variants left out)` : '';
  return `${facts.build}${variant}${amx}`;
}

/** Threads for a context: the configured count, or the runtime's own choice. */
export function threadsFor(options: LoadOptions): number | undefined {
  return options.threads > 0 ? options.threads : undefined;
}

/** Tokens in the model's vocabulary (0 when the GGUF does not list them). */
export function vocabularySize(model: LlamaModel): number {
  return model.fileInfo.metadata.tokenizer?.ggml?.tokens?.length ?? 0;
}

/** llama.cpp's error lines of each load in progress. */
const loading = new Set<string[]>();

/**
 * Loads a GGUF file through the shared runtime. A failure carries llama.cpp's
 * own reason ("tensor 'token_embd.weight' data is not within the file
 * bounds, model is corrupted or incomplete") instead of node-llama-cpp's bare
 * "Failed to load model".
 */
export async function loadGguf(file: string): Promise<LlamaModel> {
  const runtime = await getRuntime();
  const lines: string[] = [];
  loading.add(lines);
  try {
    const model = await runtime.loadModel({ modelPath: file });
    // Errors llama.cpp reported during a load that still succeeded are printed as usual.
    for (const line of lines) console.warn(`[node-llama-cpp] ${line}`);
    return model;
  } catch (error) {
    // llama.cpp's log lines reach JS through the event loop, possibly after the rejection.
    await sleep(20);
    const reason = lines.map((line) => /error loading model: (.*)/.exec(line)?.[1]).find(Boolean) ?? lines.at(-1);
    if (reason && (error as Error).message === 'Failed to load model') throw new Error(reason.replace(/^llama_model_loader: /, ''), { cause: error });
    throw error;
  } finally {
    loading.delete(lines);
  }
}
