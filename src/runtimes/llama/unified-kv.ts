import type { Llama, LlamaContext, LlamaContextOptions, LlamaModel } from 'node-llama-cpp';

/**
 * One KV cache that every sequence of a context may fill (llama.cpp's
 * unified KV cache, llama-server's `--kv-unified`, its default with
 * `--parallel auto`): a context of 40960 cells with 4 sequences lets one
 * conversation use all 40960 while short requests run beside it, where a
 * split cache gives each sequence a fixed quarter.
 *
 * node-llama-cpp (3.21.1, pinned) always splits: it creates a context of
 * `contextSize × sequences` cells and gives each sequence `contextSize`.
 * lserve's threadpool addon (threadpool.patch) takes one more context
 * parameter, `lserveUnifiedKvCells`: the cells of the one shared cache. It is
 * added here, on the way from node-llama-cpp's LlamaContext to the addon's
 * constructor, for the models that asked for it; node-llama-cpp then sees
 * sequences of `contextSize` tokens each, which is right: any one of them
 * may hold that many. Whether the cells run out for all of them together is
 * the caller's to keep track of (families/llama/kv-ledger.ts).
 */

type AddonClass = (new (model: unknown, params: Record<string, unknown>) => unknown) & { lserveUnifiedKv?: boolean };
type Bindings = { AddonContext?: AddonClass };

/** Cells asked for per native model, read by the constructor hook. */
const pending = new WeakMap<object, number>();
const hooked = new WeakSet<Llama>();

function bindingsOf(runtime: Llama): Bindings | undefined {
  return (runtime as unknown as { _bindings?: Bindings })._bindings;
}

/** Whether contexts of this runtime can share one KV cache across their sequences (lserve's threadpool addon only). */
export function supportsUnifiedKv(runtime: Llama): boolean {
  return bindingsOf(runtime)?.AddonContext?.lserveUnifiedKv === true;
}

function hook(runtime: Llama): void {
  if (hooked.has(runtime)) return;
  const bindings = bindingsOf(runtime)!;
  const Original = bindings.AddonContext!;
  bindings.AddonContext = new Proxy(Original, {
    construct(target, args: unknown[], newTarget) {
      const [nativeModel, params] = args as [object, Record<string, unknown>];
      const cells = pending.get(nativeModel);
      return Reflect.construct(target, cells === undefined ? args : [nativeModel, { ...params, lserveUnifiedKvCells: cells }], newTarget) as object;
    },
  });
  hooked.add(runtime);
}

/**
 * Creates a context whose sequences share one KV cache of `contextSize`
 * cells, each sequence allowed to fill it. Requires supportsUnifiedKv.
 * The memory checks are the caller's (context-plan.ts): node-llama-cpp's own
 * would count `sequences` caches.
 */
export async function createUnifiedContext(model: LlamaModel, options: LlamaContextOptions & { contextSize: number }): Promise<LlamaContext> {
  const runtime = model.llama;
  if (!supportsUnifiedKv(runtime)) throw new Error('this llama.cpp binary has no unified KV cache');
  hook(runtime);
  const nativeModel = (model as unknown as { _model?: object })._model;
  if (!nativeModel) throw new Error('this node-llama-cpp version hides its native model: no unified KV cache');
  pending.set(nativeModel, options.contextSize);
  try {
    return await model.createContext({ ...options, ignoreMemorySafetyChecks: true });
  } finally {
    pending.delete(nativeModel);
  }
}
