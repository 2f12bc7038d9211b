import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Llama, LlamaLogLevel as LlamaLogLevelValue, LlamaModel } from 'node-llama-cpp';
import type { LoadOptions } from '../../core/loader.js';

/**
 * The one llama.cpp binding per process, shared by the chat, embedding and
 * rerank loaders. node-llama-cpp is imported lazily: commands that never
 * touch a GGUF model don't pay for it.
 *
 * Binary choice is explicit (getLlama's default "auto" may compile llama.cpp
 * for minutes on first use): LSERVE_LLAMA_BUILD says "prebuilt", "lastBuild"
 * (a binary built for this CPU with `npx --no node-llama-cpp source download
 * --gpu false`) or "auto" (node-llama-cpp decides). Unset, it is the
 * threadpool build `npm run build:llama` made, while that is node-llama-cpp's
 * last build (single-stream decode on par with llama-server; the prebuilt
 * binary starts a fresh CPU threadpool per decode and runs ≈ 0.8× — see
 * bench/README.md), and otherwise the prebuilt binary.
 */

let llama: Promise<Llama> | undefined;
/** The binary the runtime was loaded with (decided once, when it loads). */
let loadedBuild: LlamaBuildChoice | undefined;

export type LlamaBuildChoice = 'prebuilt' | 'lastBuild' | 'auto';

export function llamaBuildChoice(value = process.env.LSERVE_LLAMA_BUILD, threadpoolBuild = hasThreadpoolBuild()): LlamaBuildChoice {
  if (value === undefined || value === '') return threadpoolBuild ? 'lastBuild' : 'prebuilt';
  if (value === 'prebuilt' || value === 'lastBuild' || value === 'auto') return value;
  throw new Error(`LSERVE_LLAMA_BUILD must be prebuilt, lastBuild or auto (got '${value}')`);
}

/** Written by scripts/build-llama.mjs next to node-llama-cpp's own lastBuild.json. */
export const THREADPOOL_BUILD_MARKER = 'lserve-threadpool-build.json';

/** Whether node-llama-cpp's last build is the one scripts/build-llama.mjs made (its marker names the same build folder). */
export function hasThreadpoolBuild(llamaDir = nodeLlamaCppDir()): boolean {
  try {
    const folder = (file: string) => (JSON.parse(readFileSync(`${llamaDir}/${file}`, 'utf8')) as { folderName?: unknown }).folderName;
    const built = folder(THREADPOOL_BUILD_MARKER);
    return typeof built === 'string' && built === folder('lastBuild.json');
  } catch {
    return false;
  }
}

/** node-llama-cpp's `llama/` folder (its bundled source, addon and build records). */
export function nodeLlamaCppDir(): string {
  // The package's entry is dist/index.js; its build records live in llama/.
  return fileURLToPath(new URL('../llama', import.meta.resolve('node-llama-cpp')));
}

export function getRuntime(): Promise<Llama> {
  llama ??= (async () => {
    const { getLlama, Llama, LlamaLogLevel } = await import('node-llama-cpp');
    const choice = llamaBuildChoice();
    loadedBuild = choice;
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
    const runtime = choice === 'lastBuild' ? await getLlama('lastBuild', common) : await getLlama({ ...common, build: choice === 'auto' ? 'auto' : 'never' });
    // node-llama-cpp's default thread budget is twice the math cores (4 on a
    // 2-core machine), and a context given no thread count takes all of it.
    // More ggml threads than cores spin-wait against each other at every op:
    // measured on 2 cores with a synthetic Qwen3-0.6B Q8_0, decode ran at a
    // median 11.4 tok/s with 4 threads against 15.0 with 2 (bench/README.md).
    // llama.cpp's own tools default to the math-core count; so do we.
    runtime.maxThreads = runtime.cpuMathCores;
    return runtime;
  })();
  return llama;
}

/** Which binary the loaded runtime uses, for load logs; undefined before getRuntime() resolved. */
export function runtimeBuild(): LlamaBuildChoice | undefined {
  return loadedBuild;
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
