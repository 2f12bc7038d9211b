import type { GgmlType, LlamaContextOptions, LlamaModel } from 'node-llama-cpp';
import type { KvCacheType, LoadOptions } from '../../core/loader.js';
import { InsufficientMemoryError } from '../../core/errors.js';
import type { InstalledModel } from '../../core/store.js';
import { formatBytes } from '../../core/units.js';

/**
 * How big a llama.cpp context to create, for every llama kind (chat,
 * embedding, rerank): from the context the model was trained on, what a
 * token of it costs (KV cache + compute buffers, estimated by llama.cpp's own
 * dry run), the memory budget and the number of contexts or sequences.
 * Never blindly the training context: a GGUF declaring 40960 tokens
 * (Qwen3-Embedding) would otherwise ask for gigabytes per context.
 *
 * A size the user asked for (`serve --ctx-size`, `pull FILE --ctx-size`) is
 * honoured or refused with the numbers; a default shrinks to fit (halving,
 * fewer pooled contexts first) and the loader logs what it chose.
 */

/** Tokens a context gets when nobody asked for a size (capped at the training context). */
export const DEFAULT_CONTEXT: Record<'chat' | 'embedding' | 'rerank', number> = {
  // Room for a coding agent's first request (≈ 12k tokens of system prompt and tools) and a long session after
  // it: the training context up to this cap, as much of it as the memory budget holds (with an 8-bit KV cache
  // before less than AGENT_CONTEXT); a conversation that outgrows it grows the context (families/llama).
  chat: 65_536,
  // Long enough for whole documents; a causal embedder's KV cache costs
  // ~112 KiB a token at 0.6B size, so 8192 is ≈0.9 GiB per pooled context.
  embedding: 8192,
  rerank: 8192,
};

/** No default shrinks below this many tokens. */
export const MIN_CONTEXT = 512;

/** Below this many tokens a default chat context takes an 8-bit KV cache before it shrinks further: agents' prompts need the room. */
export const AGENT_CONTEXT = 32_768;

export type { KvCacheType } from '../../core/loader.js';

/**
 * What a KV cache type takes besides node-llama-cpp's defaults: ggml's type
 * id (node-llama-cpp's GgmlType; a value import would load node-llama-cpp
 * with this module) and its name, and flash attention. f16 is the default
 * cache and keeps the default attention ('auto': on where the backend has
 * it, as on CPU). q8_0 needs flash attention. f32 is for logprobs as close
 * to an fp32 reference as llama.cpp gets, which takes flash attention off:
 * with it on, an f32 cache measures no better than f16 against transformers
 * (1.9e-2 nats either way; off, f32 measures 3.7e-4 and f16 8.7e-3:
 * test/golden/qwen3-logprobs/README.md).
 */
const KV_CACHE: Record<Exclude<KvCacheType, 'f16'>, { ggml: GgmlType; name: 'F32' | 'Q8_0'; flashAttention: boolean }> = {
  f32: { ggml: 0 as GgmlType, name: 'F32', flashAttention: false },
  q8_0: { ggml: 8 as GgmlType, name: 'Q8_0', flashAttention: true },
};

/** The context options that give a context a KV cache of this type (none for f16, node-llama-cpp's default). */
export function kvCacheContextOptions(kvType: KvCacheType | undefined): Pick<LlamaContextOptions, 'experimentalKvCacheKeyType' | 'experimentalKvCacheValueType' | 'flashAttention'> {
  if (kvType === undefined || kvType === 'f16') return {};
  const { name, flashAttention } = KV_CACHE[kvType];
  return { experimentalKvCacheKeyType: name, experimentalKvCacheValueType: name, flashAttention };
}

/** The KV cache types a chat context may take, best first: the one `--kv-cache-type` names, else f16 and, where memory is short, q8_0. */
export function chatKvTypes(options: Pick<LoadOptions, 'kvCacheType'>): readonly KvCacheType[] {
  return options.kvCacheType ? [options.kvCacheType] : ['f16', 'q8_0'];
}

/** llama.cpp's default ubatch: tokens per decode when an input may span several. */
export const DEFAULT_BATCH = 512;

export interface ContextRequest {
  /** Tokens per sequence. */
  tokens: number;
  /** Asked for by the user: honoured or refused, never shrunk. */
  explicit: boolean;
  /** Where the number came from, for logs and errors. */
  source: string;
}

/**
 * The context size asked for, by precedence: `serve --ctx-size ID=N`, then
 * `serve --ctx-size N`, then the model's `defaults.context_size` (the catalog's,
 * or the one given at `lserve pull FILE --ctx-size`), then the kind's default.
 */
export function requestedContext(installed: InstalledModel, options: LoadOptions, kind: keyof typeof DEFAULT_CONTEXT): ContextRequest {
  const sizes = options.contextSizes;
  const names = [installed.id, ...installed.entry.aliases];
  const named = names.map((name) => sizes?.models[name]).find((n) => n !== undefined);
  if (named !== undefined) return { tokens: named, explicit: true, source: `--ctx-size ${installed.id}=${named}` };
  if (sizes?.all !== undefined) return { tokens: sizes.all, explicit: true, source: `--ctx-size ${sizes.all}` };
  const configured = installed.entry.defaults.context_size;
  if (typeof configured === 'number' && configured > 0) {
    // A user's own file carries the size its owner gave at pull; the catalog's is a default.
    const own = installed.entry.owned_by === 'user';
    return { tokens: configured, explicit: own, source: own ? `context_size ${configured} (set at pull)` : `catalog context_size ${configured}` };
  }
  return { tokens: DEFAULT_CONTEXT[kind], explicit: false, source: `default ${DEFAULT_CONTEXT[kind]}` };
}

export interface PlanInput {
  id: string;
  request: ContextRequest;
  trainContextSize: number;
  /** Contexts wanted (a pool's size); fewer are used when memory is short. */
  maxContexts: number;
  /** Sequences per context (chat's parallel requests). */
  sequences: number;
  /** Batch for a context size: the whole context for models that must see an input in one batch. */
  batchFor(contextSize: number): number;
  /** KV cache types to try at each size, in order (default f16 only). */
  kvTypes?: readonly KvCacheType[];
  /** Where the KV cache type came from when the user chose it (`--kv-cache-type f32`), for the error. */
  kvTypeSource?: string;
  /** Bytes one context of this shape needs; undefined when it cannot be told. */
  estimate(shape: ContextShape): Promise<number | undefined>;
  /** Bytes all contexts together may take. */
  budgetBytes: number;
  /** Memory the weights already take, for the error message. */
  weightBytes: number;
}

export interface ContextShape {
  contextSize: number;
  batchSize: number;
  sequences: number;
  kvType?: KvCacheType;
}

export interface ContextPlan {
  contexts: number;
  sequences: number;
  /** Tokens per sequence. */
  contextSize: number;
  batchSize: number;
  kvType: KvCacheType;
  /** Estimated bytes of all contexts together (0 when unknown). */
  bytes: number;
  budgetBytes: number;
  /** Why the plan differs from what was asked, if it does. */
  adjusted?: string;
}

/**
 * Shapes to try, best first: the request alone if explicit, else halvings
 * down to MIN_CONTEXT; at each size every KV type in turn, so that a
 * smaller cache type is taken before a smaller context.
 */
function candidates(request: ContextRequest, trainContextSize: number, kvTypes: readonly KvCacheType[]): Array<{ contextSize: number; kvType: KvCacheType }> {
  const first = Math.max(1, Math.min(request.tokens, trainContextSize));
  const sizes = [first];
  if (!request.explicit) {
    for (let size = first; size > MIN_CONTEXT; ) {
      size = Math.max(MIN_CONTEXT, Math.floor(size / 2));
      sizes.push(size);
    }
  }
  return sizes.flatMap((contextSize) => kvTypes.map((kvType) => ({ contextSize, kvType })));
}

/**
 * The largest context that fits the budget: a default size keeps its pool
 * and halves, then gives up contexts; an explicit size only gives up
 * contexts. Throws InsufficientMemoryError, with the numbers, when nothing fits.
 */
export async function planContext(input: PlanInput): Promise<ContextPlan> {
  const { request, sequences } = input;
  let smallest: { contexts: number; contextSize: number; batchSize: number; kvType: KvCacheType; bytes: number } | undefined;
  const kvTypes = input.kvTypes ?? ['f16'];
  for (const { contextSize, kvType } of candidates(request, input.trainContextSize, kvTypes)) {
    const batchSize = input.batchFor(contextSize);
    const each = await input.estimate({ contextSize, batchSize, sequences, kvType });
    for (let contexts = input.maxContexts; contexts >= 1; contexts--) {
      const bytes = (each ?? 0) * contexts;
      smallest = { contexts, contextSize, batchSize, kvType, bytes };
      if (each !== undefined && bytes > input.budgetBytes) continue;
      const changes = [
        contextSize < Math.min(request.tokens, input.trainContextSize) ? `context ${contextSize} instead of ${request.tokens}` : '',
        kvType !== kvTypes[0] ? `a ${kvType} KV cache` : '',
        contexts < input.maxContexts ? `${contexts} context${contexts === 1 ? '' : 's'} instead of ${input.maxContexts}` : '',
      ].filter(Boolean);
      return {
        contexts,
        sequences,
        contextSize,
        batchSize,
        kvType,
        bytes,
        budgetBytes: input.budgetBytes,
        adjusted: changes.length ? `${changes.join(', ')} to fit the ${formatBytes(input.budgetBytes)} budget` : undefined,
      };
    }
  }
  const s = smallest!;
  const kv = s.kvType === 'f16' ? '' : `${s.kvType} KV cache, `;
  const shape = `${s.contexts > 1 ? `${s.contexts} contexts × ` : ''}${sequences > 1 ? `${sequences} sequences × ` : ''}${s.contextSize} tokens, ${kv}batch ${s.batchSize}`;
  const sources = [request.source, input.kvTypeSource].filter(Boolean).join('; ');
  const smaller = [sequences > 1 ? 'fewer --parallel sequences' : '', input.kvTypeSource ? 'a smaller --kv-cache-type' : ''].filter(Boolean);
  throw new InsufficientMemoryError(
    `Model '${input.id}' needs ≈${formatBytes(s.bytes)} of context memory (${shape}; ${sources}) but only ${formatBytes(Math.max(0, input.budgetBytes))} ` +
      `of the memory budget is left after its ${formatBytes(input.weightBytes)} of weights. ` +
      `Set a smaller context with --ctx-size${smaller.length ? ` or ${smaller.join(' or ')}` : ''}, or raise --max-memory.`,
  );
}

/** The memory budget for a model's contexts: the configured budget less its weights. */
export function contextBudget(model: LlamaModel, options: LoadOptions): number {
  return (options.memoryBudgetBytes ?? Number.POSITIVE_INFINITY) - model.size;
}

/** node-llama-cpp's estimate of one context's RAM + VRAM (a llama.cpp dry run, milliseconds); undefined if it cannot tell. */
export async function estimateContextBytes(model: LlamaModel, shape: ContextShape, isEmbeddingContext = false): Promise<number | undefined> {
  try {
    const { kvType, ...rest } = shape;
    const cache = kvType === undefined || kvType === 'f16' ? undefined : KV_CACHE[kvType];
    const cacheType = cache ? { kvCacheKeyType: cache.ggml, kvCacheValueType: cache.ggml, flashAttention: cache.flashAttention } : {};
    const r = await model.fileInsights.estimateContextResourceRequirementsV2({ ...rest, ...cacheType, modelGpuLayers: model.gpuLayers, isEmbeddingContext });
    return r.cpuRam + r.gpuVram;
  } catch {
    return undefined;
  }
}

/** One line for the load log: what was planned against what budget. */
export function describePlan(id: string, plan: ContextPlan, request: ContextRequest): string {
  const contexts = plan.contexts > 1 ? `${plan.contexts} contexts × ` : '';
  const sequences = plan.sequences > 1 ? `${plan.sequences} sequences × ` : '';
  const memory = plan.bytes > 0 ? `≈${formatBytes(plan.bytes)} of a ${formatBytes(plan.budgetBytes)} budget` : 'memory unknown';
  // The cache type is named when it is not llama.cpp's default (f16; encoders such as BERT keep no KV cache at all).
  const kv = plan.kvType === 'f16' ? '' : `${plan.kvType} KV cache, `;
  return `${id}: context plan: ${contexts}${sequences}${plan.contextSize} tokens, ${kv}batch ${plan.batchSize}, ${memory} (${request.source}${plan.adjusted ? `; ${plan.adjusted}` : ''})`;
}
