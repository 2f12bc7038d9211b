import type { EngineEvent } from './events.js';
import type { InstalledModel, ModelStore } from './store.js';

/**
 * The contract between the engine and a runtime. A backend module exports a
 * Loader per model kind it serves; a loaded model is a runtime-owned object
 * that the kind's task module knows how to drive.
 */
export interface LoadedModel {
  /** Resident memory this model holds, in bytes (an estimate is fine). */
  readonly memoryBytes: number;
  /** Requests waiting for this model right now, when it keeps a line of its own (chat: for a free sequence). */
  readonly queued?: number;
  /** The process that holds the model, when it is not the server's own (a runner). */
  readonly pid?: number;
  /** Text models: tokens one conversation (or input) may hold, as loaded. */
  readonly contextSize?: number;
  dispose(): Promise<void>;
}

export interface LoadOptions {
  /** CPU threads the runtime may use; 0 lets the runtime decide. */
  threads: number;
  /** Concurrent generations a model should serve (chat: sequences of one context). */
  parallel?: number;
  /** Requests that may wait for a free sequence before the model answers 503. */
  maxQueue?: number;
  /** Context sizes the user asked for (`serve --ctx-size`): for every model, or per model id or alias. */
  contextSizes?: ContextSizes;
  /** Bytes this model may take in all (weights, caches, buffers): the manager's budget. */
  memoryBudgetBytes?: number;
  /** Host memory a chat model may keep conversations in when their sequence is needed for another (`serve --cache-ram`; 0 none). */
  cacheRamBytes?: number;
  /** The KV cache type of chat contexts (`serve --kv-cache-type`); undefined: f16, or q8_0 where memory is short. */
  kvCacheType?: KvCacheType;
  /** Where a loader reports what it chose (context sizes, memory) and how long it took. */
  log?: (message: string) => void;
  /** Where a runtime reports what happens after the load (a supervised child process restarted): the engine's events. */
  report?: (event: EngineEvent) => void;
  /**
   * For a loader that learns what its model will take only once it has
   * started (a runner asks the family): makes room for that many bytes
   * (evicting idle models) before the model allocates them.
   */
  reserve?: (bytes: number) => Promise<void>;
  /** The model is gone without an unload (its runner process died): the manager forgets it, and the next request loads it again. */
  onLost?: () => void;
}

/**
 * A llama.cpp KV cache's element type, as llama.cpp's `--cache-type-k/-v`
 * names it: f32 (twice f16's memory; logprobs as close to an fp32 reference
 * as llama.cpp gets), f16 (llama.cpp's default), q8_0 (half f16's memory).
 */
export const KV_CACHE_TYPES = ['f32', 'f16', 'q8_0'] as const;
export type KvCacheType = (typeof KV_CACHE_TYPES)[number];

export interface ContextSizes {
  all?: number;
  models: Record<string, number>;
}

export interface Loader<M extends LoadedModel = LoadedModel> {
  load(model: InstalledModel, options: LoadOptions): Promise<M>;
  /** Memory the model will need once loaded; defaults to the size of its files. */
  estimateMemory?(model: InstalledModel): number;
}

/** Loaders keyed by `${backend}:${kind}`, e.g. `onnx:ocr` or `llama:chat`. */
export type LoaderTable = Record<string, () => Promise<Loader>>;

/**
 * Work a family does once when one of its models is installed (`lserve pull`),
 * e.g. converting graphs beside the model; resolves to the model as installed
 * afterwards.
 */
export interface Preparer {
  prepare(store: ModelStore, model: InstalledModel, say?: (line: string) => void): Promise<InstalledModel>;
}

/** Preparers keyed like loaders; most kinds have none. */
export type PreparerTable = Record<string, () => Promise<Preparer>>;

/**
 * A model family as the composition root sees it (`families/<name>/index.ts`):
 * its loaders and install-time preparers, each module imported on first use,
 * so that a command that loads none of the family's models never pays for
 * its runtime.
 */
export interface Family {
  loaders: LoaderTable;
  preparers?: PreparerTable;
  /**
   * Keys whose models run in supervised processes of the family's own
   * (sherpa-onnx's): loaded in the server's process even where every other
   * model runs in a runner.
   */
  ownProcesses?: readonly string[];
}

export function loaderKey(backend: string, kind: string): string {
  return `${backend}:${kind}`;
}
