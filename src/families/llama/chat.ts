import { randomUUID } from 'node:crypto';
import path from 'node:path';
import {
  LlamaChat,
  TokenBias,
  type ChatHistoryItem,
  type ChatModelFunctions,
  type GbnfJsonSchema,
  type LlamaChatResponse,
  type LlamaChatResponseChunk,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaGrammar,
  type LlamaModel,
  type LLamaChatGenerateResponseOptions,
  type Token,
} from 'node-llama-cpp';
import type { Loader, LoadOptions } from '../../core/loader.js';
import { InvalidRequestError, OverloadedError, UnsupportedError } from '../../core/errors.js';
import type { InstalledModel } from '../../core/store.js';
import { MEDIA_MARKER, type ChatDelta, type ChatModel, type ChatRequest, type FinishReason } from '../../core/tasks/chat.js';
import { describeRuntime, loadGguf, threadsFor, vocabularySize } from '../../runtimes/llama/runtime.js';
import { contextBudget, DEFAULT_BATCH, describePlan, estimateContextBytes, MIN_CONTEXT, planContext, requestedContext, type ContextPlan } from '../../runtimes/llama/context-plan.js';
import { toChatHistory, toFunctions } from './chat-history.js';
import { QueueFullError, SlotPool } from './chat-slots.js';
import { PushQueue } from '../../core/push-queue.js';
import { ChatWrappers } from './chat-wrapper.js';
import { installDecodeGate, type DecodeGate } from '../../runtimes/llama/decode-gate.js';
import { sampleAfterReorder } from '../../runtimes/llama/output-reorder.js';
import { MediaProjector, type RequestMedia } from '../../runtimes/llama/mtmd.js';

/**
 * The llama.cpp chat backend: one model, one context with `parallel`
 * sequences, and a pool handing a sequence to each request (queueing beyond,
 * 503 beyond the queue). Requests on different sequences are decoded in the
 * same batches by node-llama-cpp, so they really run at the same time, in
 * lock step (decode-gate.ts: each batch carries every generating sequence). A
 * sequence keeps its tokens between requests, and a request is given the
 * free sequence that already holds most of its conversation, so the next
 * turn only evaluates what is new. A model registered with its projector
 * takes images and audio in user turns (runtimes/llama/mtmd.ts).
 */

interface Slot {
  /** The sequence's id in the context (0 … parallel − 1). */
  index: number;
  sequence: LlamaContextSequence;
  /** Fingerprints of the messages (and reply) the sequence holds now. */
  held: string[];
  /** When a request last took it (performance.now()); 0 never. */
  lastUsed: number;
}

export class LlamaChatModel implements ChatModel {
  private readonly wrappers: ChatWrappers;
  private jsonGrammar: Promise<LlamaGrammar> | undefined;
  /** Running generations by their caller's name (ChatRequest.generationId), for hold: their sequence, what stops them, and what resumes one held. */
  private readonly generations = new Map<string, { slot: Slot; stopped: AbortSignal; resume?: () => void }>();
  /** Warm-ups under way (prefill): the messages each evaluates, and when it is done. */
  private readonly prefilling = new Set<{ fingerprints: readonly string[]; done: Promise<void> }>();

  constructor(
    readonly model: LlamaModel,
    readonly context: LlamaContext,
    private readonly pool: SlotPool<Slot>,
    private readonly gate: DecodeGate,
    private readonly defaults: { temperature?: number; contextBytes: number },
    private readonly projector?: MediaProjector,
  ) {
    this.wrappers = new ChatWrappers(model);
  }

  get memoryBytes(): number {
    // context.stateSize is 0 until tokens are evaluated, but the KV cache is allocated whole at creation.
    return this.model.size + Math.max(this.context.stateSize, this.defaults.contextBytes) + (this.projector?.bytes ?? 0);
  }

  get contextSize(): number {
    return this.context.contextSize;
  }

  /** Requests waiting for a free sequence right now. */
  get queued(): number {
    return this.pool.waiting;
  }

  async dispose(): Promise<void> {
    this.pool.rejectAll(new OverloadedError('The model was unloaded while this request waited.'));
    await this.projector?.dispose();
    await this.context.dispose();
    await this.model.dispose();
  }

  async *generate(request: ChatRequest, signal: AbortSignal): AsyncIterable<ChatDelta> {
    const media = await this.prepareMedia(request);
    try {
      yield* this.generateWith(request, media, signal);
    } finally {
      media?.release();
    }
  }

  /** The request's images and audio, tokenized for the model; undefined for a text-only request. */
  private async prepareMedia(request: ChatRequest): Promise<RequestMedia | undefined> {
    const first = request.messages.flatMap((m) => m.media ?? [])[0];
    if (!first) return undefined;
    if (!this.projector) {
      throw new UnsupportedError(
        `This build of lserve has no image or audio input here: llama.cpp's multimodal library comes with lserve's own llama.cpp binary for linux-x64, and model '${request.model}' runs on another (LSERVE_LLAMA_BUILD, or another platform). Send text only.`,
        { param: first.param, code: 'no_media_runtime' },
      );
    }
    return this.projector.prepare(request.messages, MEDIA_MARKER);
  }

  async prefill(request: ChatRequest, signal: AbortSignal): Promise<void> {
    // Never queued (a warm-up that would wait is late), and with several sequences one stays free for whatever request comes meanwhile.
    const keepFree = this.pool.size > 1 ? 1 : 0;
    if (request.messages.some((m) => m.media?.length) || this.pool.available <= keepFree || this.pool.waiting > 0) return;
    const { prompt } = this.promptOf(request, request.messages);
    if (prompt.length >= this.context.contextSize) return;
    const fingerprints = request.messages.map((m) => fingerprint(m));
    const slot = await this.pool.acquire(signal, (free) => pickSlot(free, fingerprints));
    const done = (async () => {
      try {
        // What the sequence holds beyond the common prefix goes; the rest of the prompt is evaluated.
        await slot.sequence.adaptStateToTokens(prompt, false);
        slot.held = [];
        const from = slot.sequence.nextTokenIndex;
        if (from < prompt.length && !signal.aborted) await slot.sequence.evaluateWithoutGeneratingNewTokens(prompt.slice(from));
        slot.held = fingerprints;
      } finally {
        this.gate.leave(slot.sequence);
        this.pool.release(slot);
      }
    })();
    const entry = { fingerprints, done };
    this.prefilling.add(entry);
    await done.finally(() => this.prefilling.delete(entry));
  }

  async hold(generationId: string, ms: number): Promise<void> {
    const generation = this.generations.get(generationId);
    if (!generation || generation.resume || generation.stopped.aborted) return;
    let ended!: () => void;
    const until = new Promise<void>((resolve) => (ended = resolve));
    const resume = () => {
      clearTimeout(timer);
      generation.stopped.removeEventListener('abort', resume);
      generation.resume = undefined;
      ended();
    };
    const timer = setTimeout(resume, ms);
    // A generation stopped while held (a barge-in) stops at once, not when the hold runs out.
    generation.stopped.addEventListener('abort', resume, { once: true });
    generation.resume = resume;
    this.gate.pause(generation.slot.sequence, until);
  }

  async resume(generationId: string): Promise<void> {
    this.generations.get(generationId)?.resume?.();
  }

  /** The tokenized prompt of `request` with these messages, and how it was made. */
  private promptOf(request: ChatRequest, messages: ChatRequest['messages']) {
    const history = toChatHistory(messages);
    const useTools = request.tools !== undefined && request.tools.length > 0 && request.toolChoice !== 'none';
    const functions = useTools ? this.functionsFor(request) : undefined;
    const wrapper = this.wrappers.get({
      thinking: request.thinking,
      effort: request.reasoningEffort,
      requireFunctionCall: functions !== undefined && (request.toolChoice === 'required' || typeof request.toolChoice === 'object'),
    });
    const prompt = wrapper
      .generateContextState({ chatHistory: history, availableFunctions: functions, documentFunctionParams: true })
      .contextText.tokenize(this.model.tokenizer);
    return { history, functions, wrapper, prompt };
  }

  private async *generateWith(request: ChatRequest, media: RequestMedia | undefined, signal: AbortSignal): AsyncIterable<ChatDelta> {
    // Everything that can reject the request happens before it takes a sequence.
    const messages = media ? request.messages.map((m, i) => ({ ...m, content: media.contents[i]! })) : request.messages;
    const { history, functions, wrapper, prompt } = this.promptOf(request, messages);
    const grammar = await this.grammarFor(request, functions !== undefined);
    // KV cells, which is what the context holds and what llama.cpp's server counts: a media item's embeddings, not its positions.
    const promptTokens = prompt.length + (this.projector?.extraCellsIn(prompt) ?? 0);
    const room = this.context.contextSize - promptTokens;
    if (room <= 0) {
      throw new InvalidRequestError(`The conversation is ${promptTokens} tokens; this model's context holds ${this.context.contextSize}.`, {
        param: 'messages',
        code: 'context_length_exceeded',
      });
    }
    const tokenBias = this.tokenBiasFor(request);
    const fingerprints = request.messages.map((m, i) => fingerprint(m, media?.hashes[i]));

    // A warm-up under way of this conversation (all but its last message, the turn it left open, the same): the sequence it fills is the one to take.
    const warming = [...this.prefilling].filter((p) => p.fingerprints.slice(0, -1).every((f, i) => f === fingerprints[i]));
    if (warming.length > 0) await Promise.allSettled(warming.map((p) => p.done));
    let slot: Slot;
    try {
      slot = await this.pool.acquire(signal, (free) => pickSlot(free, fingerprints));
      slot.lastUsed = performance.now();
    } catch (error) {
      if (error instanceof QueueFullError) throw new OverloadedError();
      throw error;
    }
    const reused = reusedTokens(slot.sequence, prompt);
    const cachedPromptTokens = reused + (this.projector?.extraCellsIn(prompt.slice(0, reused)) ?? 0);
    const stop = new AbortController();
    const abort = AbortSignal.any([signal, stop.signal]);
    const { generationId } = request;
    if (generationId) this.generations.set(generationId, { slot, stopped: abort });
    const queue = new PushQueue<ChatDelta>();
    queue.push({ type: 'start', promptTokens });
    const chat = new LlamaChat({ contextSequence: slot.sequence, chatWrapper: wrapper });
    const outputBefore = slot.sequence.tokenMeter.usedOutputTokens;
    let content = '';
    let afterThought = false;
    let reasoningTokens = 0;
    const onResponseChunk = (chunk: LlamaChatResponseChunk) => {
      if (chunk.type === 'segment') reasoningTokens += chunk.tokens.length;
      if (chunk.text === '') return;
      if (chunk.type === 'segment') {
        afterThought = true;
        queue.push({ type: 'reasoning', text: chunk.text });
        return;
      }
      // Templates put a blank line between </think> and the answer; it is not part of the answer.
      const text = afterThought && content === '' ? chunk.text.trimStart() : chunk.text;
      if (text === '') return;
      content += text;
      queue.push({ type: 'content', text });
    };
    let calls = 0;
    const options: LLamaChatGenerateResponseOptions<ChatModelFunctions | undefined> = {
      signal: abort,
      stopOnAbortSignal: true,
      maxTokens: Math.min(request.maxTokens ?? room, room),
      ...this.sampling(request),
      tokenBias,
      customStopTriggers: request.stop?.length ? request.stop : undefined,
      budgets: { thoughtTokens: request.thinkingBudget ?? Infinity },
      onResponseChunk,
      ...(functions
        ? {
            functions,
            documentFunctionParams: true,
            maxParallelFunctionCalls: request.parallelToolCalls === false ? 1 : undefined,
            onFunctionCall: (call) => {
              queue.push({
                type: 'tool_call',
                index: calls++,
                call: { id: `call_${randomUUID().replaceAll('-', '').slice(0, 24)}`, name: call.functionName, arguments: JSON.stringify(call.params ?? {}) },
              });
            },
          }
        : { grammar }),
    };
    const done = chat.generateResponse(history, options).finally(() => this.gate.leave(slot.sequence)).then(
      (response) => {
        queue.push({
          type: 'done',
          ...finishOf(response),
          usage: { promptTokens, cachedPromptTokens, completionTokens: slot.sequence.tokenMeter.usedOutputTokens - outputBefore, reasoningTokens },
        });
        queue.end();
        slot.held = [...fingerprints, fingerprint({ role: 'assistant', content })];
      },
      (error: unknown) => {
        slot.held = [];
        queue.fail(error);
      },
    );
    try {
      yield* queue;
    } finally {
      // Consumer gone early (client disconnect, error downstream): stop at the next token.
      stop.abort();
      if (generationId) {
        this.generations.get(generationId)?.resume?.();
        this.generations.delete(generationId);
      }
      await done;
      chat.dispose({ disposeSequence: false });
      this.pool.release(slot);
    }
  }

  private sampling(request: ChatRequest): Pick<LLamaChatGenerateResponseOptions, 'temperature' | 'topP' | 'topK' | 'minP' | 'seed' | 'repeatPenalty'> {
    const temperature = request.temperature ?? this.defaults.temperature ?? 0.8;
    const penalties = (request.presencePenalty ?? 0) !== 0 || (request.frequencyPenalty ?? 0) !== 0;
    return {
      temperature,
      // llama.cpp server's sampling defaults where the request says nothing.
      topP: request.topP ?? 0.95,
      topK: request.topK ?? 40,
      minP: 0.05,
      seed: request.seed,
      // OpenAI semantics: no repetition penalty unless presence/frequency penalties are asked for.
      repeatPenalty: penalties
        ? { penalty: 1, presencePenalty: request.presencePenalty ?? 0, frequencyPenalty: request.frequencyPenalty ?? 0, lastTokens: 64, penalizeNewLine: true }
        : false,
    };
  }

  private functionsFor(request: ChatRequest): ChatModelFunctions {
    let tools = request.tools ?? [];
    if (typeof request.toolChoice === 'object') {
      const name = request.toolChoice.name;
      tools = tools.filter((t) => t.name === name);
      if (tools.length === 0) throw new InvalidRequestError(`tool_choice names '${name}', which is not in tools.`, { param: 'tool_choice' });
    }
    return toFunctions(tools);
  }

  private async grammarFor(request: ChatRequest, hasFunctions: boolean): Promise<LlamaGrammar | undefined> {
    const format = request.responseFormat;
    if (!format || format.type === 'text') return undefined;
    if (hasFunctions) throw new UnsupportedError('response_format cannot be combined with tools on this engine.', { param: 'response_format' });
    // The model's own runtime: a grammar from another (a default binary that changed since this model loaded) is refused.
    const llama = this.model.llama;
    if (format.type === 'json_object') {
      this.jsonGrammar ??= llama.getGrammarFor('json');
      return this.jsonGrammar;
    }
    try {
      return await llama.createGrammarForJsonSchema<GbnfJsonSchema>(format.schema as GbnfJsonSchema);
    } catch (error) {
      throw new UnsupportedError(`response_format.json_schema.schema cannot be enforced: ${(error as Error).message}`, {
        param: 'response_format.json_schema.schema',
      });
    }
  }

  private tokenBiasFor(request: ChatRequest): TokenBias | undefined {
    const entries = Object.entries(request.logitBias ?? {});
    if (entries.length === 0) return undefined;
    const bias = new TokenBias(this.model.tokenizer);
    const vocab = vocabularySize(this.model) || Infinity;
    for (const [key, value] of entries) {
      const token = Number(key);
      if (!Number.isInteger(token) || token < 0 || token >= vocab) {
        throw new InvalidRequestError(`logit_bias: '${key}' is not a token id of this model.`, { param: 'logit_bias' });
      }
      const logit = value <= -100 ? -Infinity : value;
      if (this.model.tokenizer.isEogToken(token as Token)) endBias(bias, token, logit);
      else bias.set(token as Token, logit === -Infinity ? 'never' : { logit });
    }
    return bias;
  }
}

/**
 * A bias on an end-of-generation token (<|im_end|>, <|endoftext|>): what
 * OpenAI's logit_bias and llama.cpp's server do with it, ban or force the end.
 * node-llama-cpp's TokenBias.set skips these tokens without a word, so the
 * entry goes into its bias table directly (node-llama-cpp is pinned to one
 * version in package.json); the sampler applies it like any other.
 */
function endBias(bias: TokenBias, token: number, logit: number): void {
  const table = (bias as unknown as { _biases?: unknown })._biases;
  if (!(table instanceof Map)) throw new UnsupportedError('logit_bias on end-of-generation tokens is not supported by this node-llama-cpp version.', { param: 'logit_bias' });
  table.set(token, logit);
}

function finishOf(response: LlamaChatResponse<ChatModelFunctions | undefined>): { finishReason: FinishReason; stopSequence: string | null } {
  const meta = response.metadata;
  if (meta.stopReason === 'customStopTrigger') {
    return { finishReason: 'stop', stopSequence: meta.customStopTrigger.filter((p): p is string => typeof p === 'string').join('') };
  }
  const reason: FinishReason = meta.stopReason === 'maxTokens' ? 'length' : meta.stopReason === 'functionCalls' ? 'tool_calls' : 'stop';
  return { finishReason: reason, stopSequence: null };
}

/**
 * How much of the prompt the sequence's KV state already holds: LlamaChat
 * keeps the sequence's tokens up to the first one that differs from the
 * prompt (adaptStateToTokens without shifting) and evaluates the rest, and it
 * always evaluates the prompt's last token again for its logits.
 */
function reusedTokens(sequence: LlamaContextSequence, prompt: Token[]): number {
  return Math.max(0, Math.min(sequence.compareContextTokens(prompt).firstDifferentIndex, prompt.length - 1));
}

/** A message as the prompt cache tells messages apart: its images and audio by the hash of their decoded content. */
function fingerprint(message: { role: string; content: string; toolCalls?: unknown; toolCallId?: string }, media?: readonly string[]): string {
  return JSON.stringify([message.role, message.content, message.toolCalls ?? null, message.toolCallId ?? null, ...(media?.length ? [media] : [])]);
}

/**
 * The free slot whose held conversation shares the longest message prefix
 * with this one (its tokens need no evaluation). A conversation that shares
 * nothing takes an empty slot if there is one, else the least recently used:
 * the others may hold conversations still going on (a client taking turns
 * with others, an agent between tool calls), whose next turn would otherwise
 * evaluate its whole prompt again. Among equals the lowest sequence, which
 * keeps busy sequences consecutive: llama.cpp decodes consecutive sequence
 * ids in one micro-batch, and a gap splits the batch (decode-gate.ts).
 */
export function pickSlot<S extends { index: number; held: readonly string[]; lastUsed?: number }>(free: readonly S[], messages: readonly string[]): S {
  let best = free[0]!;
  let bestRank: number[] = [];
  for (const slot of free) {
    let shared = 0;
    while (shared < slot.held.length && shared < messages.length && slot.held[shared] === messages[shared]) shared++;
    // Compared in order, greater first: shared messages; for none, empty before held, then older use.
    const rank = shared > 0 ? [shared, 0, 0] : [0, slot.held.length === 0 ? 1 : 0, -(slot.lastUsed ?? 0)];
    if (bestRank.length === 0 || outranks(rank, bestRank) || (!outranks(bestRank, rank) && slot.index < best.index)) {
      best = slot;
      bestRank = rank;
    }
  }
  return best;
}

function outranks(a: readonly number[], b: readonly number[]): boolean {
  const at = a.findIndex((x, i) => x !== b[i]);
  return at >= 0 && a[at]! > b[at]!;
}

/**
 * Per-sequence context for `parallel` sequences. The KV cache is allocated
 * (and zero-filled) up front for every sequence, so its size is
 * sequences × per-sequence tokens: on Qwen3-0.6B (112 KiB of f16 KV per
 * token) 8 × 4096 is 3.5 GiB and 8 × 8192 (the catalog's context_size) 7 GiB,
 * measured at 6–12 s and 26 s of page faulting on a 2-core machine before the
 * first token, with nothing logged. Like llama-server, which divides `-c` by
 * `-np`, the sequences therefore share a budget: the larger of the model's
 * context and CONTEXT_BUDGET tokens. Up to 4 sequences keep the default 4096
 * each; 8 get 2048, 16 get 1024; one sequence always gets the full requested
 * context. Never below MIN_CONTEXT (or the request, if smaller).
 */
export function sequenceContextSize(requested: number, parallel: number): number {
  const budget = Math.max(requested, CONTEXT_BUDGET);
  const share = Math.floor(budget / Math.max(1, parallel));
  return Math.min(requested, Math.max(share, Math.min(requested, MIN_CONTEXT)));
}

const CONTEXT_BUDGET = 16_384;

export const chatLoader: Loader<LlamaChatModel> = {
  async load(installed: InstalledModel, options: LoadOptions): Promise<LlamaChatModel> {
    const file = installed.files.model ?? Object.values(installed.files)[0];
    if (!file) throw new Error(`model '${installed.id}' has no GGUF file`);
    const log = options.log ?? (() => {});
    const model = await loadGguf(file);
    const parallel = Math.max(1, options.parallel ?? 4);
    const asked = requestedContext(installed, options, 'chat');
    const requested = Math.min(model.trainContextSize, asked.tokens);
    const perSequence = sequenceContextSize(requested, parallel);
    const shared = perSequence < requested ? `; ${requested} shared by ${parallel} sequences` : '';
    const request = { ...asked, tokens: perSequence, source: `${asked.source}${shared}` };
    let plan: ContextPlan;
    try {
      plan = await planContext({
        id: installed.id,
        request,
        trainContextSize: model.trainContextSize,
        maxContexts: 1,
        sequences: parallel,
        batchFor: (size) => Math.min(DEFAULT_BATCH, size * parallel),
        estimate: (shape) => estimateContextBytes(model, shape),
        budgetBytes: contextBudget(model, options),
        weightBytes: model.size,
      });
    } catch (error) {
      await model.dispose();
      throw error;
    }
    log(`${describePlan(installed.id, plan, request)}; llama.cpp binary: ${describeRuntime(model.llama)}`);
    const started = Date.now();
    let context: LlamaContext;
    try {
      context = await model.createContext({
        sequences: parallel,
        // A default size may still shrink to what node-llama-cpp finds free
        // in RAM right now (logged below); an explicit one is created as asked
        // or fails with node-llama-cpp's InsufficientMemoryError.
        contextSize: request.explicit ? plan.contextSize : { min: Math.min(MIN_CONTEXT, plan.contextSize), max: plan.contextSize },
        batchSize: plan.batchSize,
        threads: threadsFor(options),
        // The default remedy retries a failed creation 16 times, each time
        // allocating a multi-GiB cache 16% smaller, silently; the plan above
        // already chose a size that fits, so a failure is reported.
        failedCreationRemedy: false,
      });
    } catch (error) {
      await model.dispose();
      throw error;
    }
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    if (context.contextSize < plan.contextSize) {
      log(`${installed.id}: context shrunk to fit free RAM: ${context.contextSize} tokens per sequence instead of ${plan.contextSize} (${seconds} s)`);
    } else {
      log(`${installed.id}: context ready in ${seconds} s: ${context.totalSequences} × ${context.contextSize} tokens, batch ${context.batchSize}`);
    }
    sampleAfterReorder(context);
    let projector: MediaProjector | undefined;
    try {
      projector = await loadProjector(installed, model, context, options);
    } catch (error) {
      await context.dispose();
      await model.dispose();
      throw error;
    }
    const slots: Slot[] = Array.from({ length: parallel }, (_, index) => ({ index, sequence: context.getSequence(), held: [], lastUsed: 0 }));
    const temperature = installed.entry.defaults.temperature;
    // The decode gate goes on after the projector's hook, so that it wraps it and sees whole requests.
    return new LlamaChatModel(model, context, new SlotPool(slots, options.maxQueue ?? 64), installDecodeGate(context), {
      temperature: typeof temperature === 'number' ? temperature : undefined,
      contextBytes: plan.bytes * (context.contextSize / plan.contextSize),
    }, projector);
  },
};

/** The model's projector (its mmproj file) on llama.cpp's multimodal library, where the binary has it; logs what the model takes. */
async function loadProjector(installed: InstalledModel, model: LlamaModel, context: LlamaContext, options: LoadOptions): Promise<MediaProjector | undefined> {
  const file = installed.files.mmproj;
  if (!file) return undefined;
  const log = options.log ?? (() => {});
  const projector = await MediaProjector.load(model, file, threadsFor(options) ?? model.llama.cpuMathCores);
  if (!projector) {
    log(`${installed.id}: this llama.cpp binary (${describeRuntime(model.llama)}) has no multimodal library: the model answers text only`);
    return undefined;
  }
  await projector.installDecode(context);
  log(`${installed.id}: projector ${path.basename(file)} loaded: takes ${['text', ...projector.takes].join(', ')}`);
  return projector;
}
