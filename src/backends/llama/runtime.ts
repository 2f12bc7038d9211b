import type { Llama, LlamaModel } from 'node-llama-cpp';
import type { LoadOptions } from '../../core/backend.js';

/**
 * The one llama.cpp binding per process, shared by the chat, embedding and
 * rerank loaders. node-llama-cpp is imported lazily: commands that never
 * touch a GGUF model don't pay for it.
 *
 * Binary choice is explicit (getLlama's default "auto" may compile llama.cpp
 * for minutes on first use): the prebuilt binary unless LSERVE_LLAMA_BUILD
 * says otherwise — "lastBuild" uses a binary built for this CPU with
 * `npx --no node-llama-cpp source download --gpu false`, "auto" lets node-llama-cpp decide.
 */

let llama: Promise<Llama> | undefined;

export type LlamaBuildChoice = 'prebuilt' | 'lastBuild' | 'auto';

export function llamaBuildChoice(): LlamaBuildChoice {
  const value = process.env.LSERVE_LLAMA_BUILD ?? 'prebuilt';
  if (value === 'prebuilt' || value === 'lastBuild' || value === 'auto') return value;
  throw new Error(`LSERVE_LLAMA_BUILD must be prebuilt, lastBuild or auto (got '${value}')`);
}

export function getRuntime(): Promise<Llama> {
  llama ??= (async () => {
    const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
    const choice = llamaBuildChoice();
    const common = {
      gpu: process.env.LSERVE_GPU === 'off' ? (false as const) : ('auto' as const),
      logLevel: process.env.LSERVE_LLAMA_LOG === 'debug' ? LlamaLogLevel.debug : LlamaLogLevel.error,
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

/** Threads for a context: the configured count, or the runtime's own choice. */
export function threadsFor(options: LoadOptions): number | undefined {
  return options.threads > 0 ? options.threads : undefined;
}

/** Loads a GGUF file through the shared runtime. */
export async function loadGguf(file: string): Promise<LlamaModel> {
  const runtime = await getRuntime();
  return runtime.loadModel({ modelPath: file });
}
