import path from 'node:path';
import type { LlamaContext, LlamaContextOptions, LlamaModel } from 'node-llama-cpp';
import type { Loader, LoadOptions } from '../../core/loader.js';
import type { InstalledModel } from '../../core/store.js';
import { formatBytes } from '../../core/units.js';
import {
  chatKvTypes,
  contextBudget,
  DEFAULT_BATCH,
  describePlan,
  estimateContextBytes,
  kvCacheContextOptions,
  MIN_CONTEXT,
  planContext,
  requestedContext,
  type ContextRequest,
} from '../../runtimes/llama/context-plan.js';
import { installDecodeGate } from '../../runtimes/llama/decode-gate.js';
import { KvCells } from '../../runtimes/llama/kv-cells.js';
import { MediaProjector } from '../../runtimes/llama/mtmd.js';
import { sampleAfterReorder } from '../../runtimes/llama/output-reorder.js';
import { describeRuntime, loadGguf, threadsFor } from '../../runtimes/llama/runtime.js';
import { SequenceStateCache } from '../../runtimes/llama/state-cache.js';
import { createUnifiedContext, supportsUnifiedKv } from '../../runtimes/llama/unified-kv.js';
import type { ChatContextInfo, ChatContextState } from './chat-context.js';
import { LlamaChatModel } from './chat.js';
import { ConversationSlots, type Slot } from './conversation-slots.js';
import { SlotPool } from './chat-slots.js';

/**
 * Loads a GGUF chat model: one context whose `parallel` sequences serve
 * requests side by side.
 *
 * The context: where lserve's threadpool addon runs it, one KV cache that
 * every sequence may fill (unified-kv.ts), as llama-server's default: one
 * conversation can use all of it while short requests run beside it. Its
 * size, unless `--ctx-size` says otherwise, is the training context up to
 * DEFAULT_CONTEXT.chat, as much as the memory budget holds, with an 8-bit
 * cache before a smaller one (context-plan.ts), or with the one cache type
 * `--kv-cache-type` names (a smaller context then); a conversation longer than
 * that grows it later where memory allows (LlamaChatModel). Elsewhere (the
 * prebuilt binary, GPUs) every sequence has a cache of its own: a default
 * size is each one's, an explicit size is shared by them, as llama-server's
 * `-c` with `-np` without `--kv-unified`.
 *
 * Conversations a sequence must give up are kept in host memory up to
 * `--cache-ram` (state-cache.ts), and restored when they come back.
 */

/** Host memory for conversations whose sequence is needed elsewhere, unless `--cache-ram` says: 8 GB, as documented (llama-server's default is 8192 MiB). */
export const DEFAULT_CACHE_RAM_BYTES = 8_000_000_000;

export const chatLoader: Loader<LlamaChatModel> = {
  async load(installed: InstalledModel, options: LoadOptions): Promise<LlamaChatModel> {
    const file = installed.files.model ?? Object.values(installed.files)[0];
    if (!file) throw new Error(`model '${installed.id}' has no GGUF file`);
    const model = await loadGguf(file);
    try {
      return await loadOn(model, installed, options);
    } catch (error) {
      await model.dispose();
      throw error;
    }
  },
};

async function loadOn(model: LlamaModel, installed: InstalledModel, options: LoadOptions): Promise<LlamaChatModel> {
  const log = options.log ?? (() => {});
  const parallel = Math.max(1, options.parallel ?? 4);
  // A projector's images take more KV cells than their positions, which the count of a shared cache (kv-cells.ts) follows by positions: split.
  const unified = parallel > 1 && supportsUnifiedKv(model.llama) && !installed.files.mmproj;
  const asked = requestedContext(installed, options, 'chat');
  const planned = await createChatContext(model, installed, options, { parallel, unified, asked });
  let projector: MediaProjector | undefined;
  try {
    projector = await loadProjector(installed, model, options);
  } catch (error) {
    await planned.context.dispose();
    throw error;
  }
  const cacheBytes = options.cacheRamBytes ?? DEFAULT_CACHE_RAM_BYTES;
  const cache = cacheBytes > 0 ? SequenceStateCache.create(cacheBytes) : undefined;
  log(`${installed.id}: ${cache ? `conversations a sequence gives up are kept in host memory, up to ${formatBytes(cache.limitBytes)}` : 'no host cache (--cache-ram 0)'}`);
  // The decode gate goes on after the projector's hook, so that it wraps it and sees whole requests.
  const ready = async ({ context, info }: ChatContext): Promise<ChatContextState> => {
    await projector?.installDecode(context);
    const slots: Slot[] = Array.from({ length: parallel }, (_, index) => ({ index, sequence: context.getSequence(), held: [], lastUsed: 0 }));
    return { context, info, gate: installDecodeGate(context, { cells: info.cells }), slots: new ConversationSlots(new SlotPool(slots, options.maxQueue ?? 64), slots, info.cells, cache, log) };
  };
  const temperature = installed.entry.defaults.temperature;
  return new LlamaChatModel(model, await ready(planned), projector, {
    temperature: typeof temperature === 'number' ? temperature : undefined,
    log,
    cache,
    // A size the user chose stays; a default one grows (and the manager makes room for it first).
    grow: asked.explicit
      ? undefined
      : async (tokens) => {
          const estimate = await estimateContextBytes(model, { contextSize: tokens, batchSize: DEFAULT_BATCH, sequences: unified ? 1 : parallel, kvType: options.kvCacheType });
          if (estimate !== undefined) await options.reserve?.(model.size + estimate);
          return ready(await createChatContext(model, installed, options, { parallel, unified, perSequence: true, asked: { tokens, explicit: true, source: `grown for a longer conversation (${asked.source})` } }));
        },
  });
}

interface ChatContext {
  context: LlamaContext;
  info: ChatContextInfo;
}

/** Plans and creates the context (with its decode gate), and logs what was chosen. */
async function createChatContext(
  model: LlamaModel,
  installed: InstalledModel,
  options: LoadOptions,
  shape: { parallel: number; unified: boolean; asked: ContextRequest; perSequence?: boolean },
): Promise<ChatContext> {
  const log = options.log ?? (() => {});
  const { parallel, unified, asked } = shape;
  // A split cache shares an explicit size between the sequences; a default is each one's.
  const perSequence = unified || !asked.explicit || shape.perSequence ? asked.tokens : Math.max(Math.min(MIN_CONTEXT, asked.tokens), Math.floor(asked.tokens / parallel));
  const request = { ...asked, tokens: perSequence, source: perSequence < asked.tokens ? `${asked.source}; shared by ${parallel} sequences` : asked.source };
  const sequences = unified ? 1 : parallel;
  const plan = await planContext({
    id: installed.id,
    request,
    trainContextSize: model.trainContextSize,
    maxContexts: 1,
    sequences,
    kvTypes: chatKvTypes(options),
    kvTypeSource: options.kvCacheType ? `--kv-cache-type ${options.kvCacheType}` : undefined,
    batchFor: (size) => Math.min(DEFAULT_BATCH, size * sequences),
    estimate: (s) => estimateContextBytes(model, s),
    budgetBytes: contextBudget(model, options),
    weightBytes: model.size,
  });
  const sharing = unified ? `one KV cache shared by ${parallel} sequences` : parallel > 1 ? `a KV cache per sequence (×${parallel})` : 'one sequence';
  log(`${describePlan(installed.id, plan, request)}; ${sharing}; llama.cpp binary: ${describeRuntime(model.llama)}`);
  const started = Date.now();
  const common: LlamaContextOptions = {
    sequences: parallel,
    batchSize: plan.batchSize,
    threads: threadsFor(options),
    // The default remedy retries a failed creation 16 times, each time allocating a multi-GiB cache 16% smaller,
    // silently; the plan above already chose a size that fits, so a failure is reported.
    failedCreationRemedy: false,
    ...kvCacheContextOptions(plan.kvType),
  };
  const context = unified
    ? await createUnifiedContext(model, { ...common, contextSize: plan.contextSize })
    : // A default size may still shrink to what node-llama-cpp finds free in RAM right now (logged below); an
      // explicit one is created as asked or fails with node-llama-cpp's InsufficientMemoryError.
      await model.createContext({ ...common, contextSize: request.explicit ? plan.contextSize : { min: Math.min(MIN_CONTEXT, plan.contextSize), max: plan.contextSize } });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  if (context.contextSize < plan.contextSize) {
    log(`${installed.id}: context shrunk to fit free RAM: ${context.contextSize} tokens per sequence instead of ${plan.contextSize} (${seconds} s)`);
  } else {
    log(`${installed.id}: context ready in ${seconds} s: ${unified ? `${context.contextSize} tokens shared by ${parallel} sequences` : `${context.totalSequences} × ${context.contextSize} tokens`}, batch ${context.batchSize}`);
  }
  sampleAfterReorder(context);
  const info: ChatContextInfo = {
    contextSize: context.contextSize,
    trainContextSize: model.trainContextSize,
    explicit: asked.explicit,
    source: asked.source,
    unified,
    sequences: parallel,
    cells: unified ? new KvCells(context.contextSize) : undefined,
    bytes: plan.bytes * (context.contextSize / plan.contextSize),
  };
  return { context, info };
}

/** The model's projector (its mmproj file) on llama.cpp's multimodal library, where the binary has it; logs what the model takes. */
async function loadProjector(installed: InstalledModel, model: LlamaModel, options: LoadOptions): Promise<MediaProjector | undefined> {
  const file = installed.files.mmproj;
  if (!file) return undefined;
  const log = options.log ?? (() => {});
  const projector = await MediaProjector.load(model, file, threadsFor(options) ?? model.llama.cpuMathCores);
  if (!projector) {
    log(`${installed.id}: this llama.cpp binary (${describeRuntime(model.llama)}) has no multimodal library: the model answers text only`);
    return undefined;
  }
  log(`${installed.id}: projector ${path.basename(file)} loaded: takes ${['text', ...projector.takes].join(', ')}`);
  return projector;
}
