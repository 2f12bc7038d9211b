import type { Engine } from '../engine.js';
import type { LoadedModel } from '../loader.js';
import type { Lease } from '../manager.js';
import type { RgbImage } from '../../image/types.js';
import { InvalidRequestError, UnsupportedError } from '../errors.js';
import type { InstalledModel } from '../store.js';

/**
 * The chat task: one neutral request type that the OpenAI and Anthropic
 * adapters and the CLI all translate into, and one stream of deltas that they
 * all translate back out of. The task knows nothing about HTTP.
 */

export interface ChatToolCall {
  id: string;
  name: string;
  /** JSON text of the arguments, as OpenAI carries it. */
  arguments: string;
}

/** Where an image or audio clip sits in a message's text: llama.cpp's multimodal marker (mtmd's default). */
export const MEDIA_MARKER = '<__media__>';

/**
 * An image or audio clip of a user turn, in the order of the turn's
 * MEDIA_MARKERs. The API layer records what the client sent (`source`); the
 * server fetches and decodes it (http/chat-media.ts) into `image` (upright
 * RGB) or `audio` (16 kHz mono), with the SHA-256 of what was decoded: the
 * prompt cache's identity for it.
 */
export interface ChatMedia {
  kind: 'image' | 'audio';
  /** The request field it came from, for errors: 'messages.1.content.2'. */
  param: string;
  /** A data URI, URL or local path; base64 bytes in a named format (OpenAI's input_audio, Anthropic's base64 source); or the bytes (the CLI's files). */
  source: { url: string } | { base64: string; format?: string } | { bytes: Uint8Array };
  image?: RgbImage;
  audio?: Float32Array;
  hash?: string;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  /** User turns: images and audio, one per MEDIA_MARKER in `content`. */
  media?: ChatMedia[];
  /** Assistant turns: earlier reasoning (dropped from the prompt by most templates). */
  reasoning?: string;
  /** Assistant turns: the calls it made. */
  toolCalls?: ChatToolCall[];
  /** Tool turns: which call this is the result of. */
  toolCallId?: string;
}

export interface ChatTool {
  name: string;
  description?: string;
  /** JSON schema of the arguments object. */
  parameters?: Record<string, unknown>;
  /**
   * Callable, but left out of the tool list the prompt begins with: the
   * conversation itself brought its definition in where a tool search
   * found it (Anthropic's tool_reference, the Responses API's
   * tool_search_output), so that the prompt before that point, and the
   * cache of it, stays the same.
   */
  deferred?: boolean;
}

export type ChatToolChoice = 'auto' | 'none' | 'required' | { name: string };

export type ChatResponseFormat = { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; schema: Record<string, unknown> };

export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  maxTokens?: number;
  temperature?: number;
  topP?: number;
  topK?: number;
  seed?: number;
  stop?: string[];
  presencePenalty?: number;
  frequencyPenalty?: number;
  /** Minimum probability relative to the likeliest token (llama.cpp's min_p); the backend's default when absent. */
  minP?: number;
  /** llama.cpp's multiplicative repetition penalty (Ollama's repeat_penalty); 1 or absent: none. */
  repeatPenalty?: number;
  /** Log-probabilities of the answer's tokens wanted, with this many likeliest alternatives each (0–20). */
  logprobs?: number;
  /** Token id → additive logit bias (OpenAI's logit_bias). */
  logitBias?: Record<number, number>;
  /** Template's enable-thinking switch; undefined = the model's default. */
  thinking?: boolean;
  /** Most tokens spent thinking before the answer is forced. */
  thinkingBudget?: number;
  reasoningEffort?: 'low' | 'medium' | 'high';
  responseFormat?: ChatResponseFormat;
  tools?: ChatTool[];
  toolChoice?: ChatToolChoice;
  /** false: at most one tool call per turn. */
  parallelToolCalls?: boolean;
  /** How long the model stays loaded after this request (ms; negative = forever). */
  keepAliveMs?: number;
  /** The caller's name for this generation, by which ChatModel.hold pauses it. */
  generationId?: string;
}

/**
 * A raw prompt to continue, with no chat template (Ollama's `raw` generate
 * and its `suffix`; text completion). With `suffix`, the model fills the
 * middle between `prompt` and `suffix` with the fill-in-the-middle tokens
 * its GGUF declares; a model without them is a 400 that names it.
 */
export interface CompletionRequest
  extends Pick<
    ChatRequest,
    'model' | 'maxTokens' | 'temperature' | 'topP' | 'topK' | 'minP' | 'seed' | 'stop' | 'presencePenalty' | 'frequencyPenalty' | 'repeatPenalty' | 'logitBias' | 'responseFormat' | 'keepAliveMs'
  > {
  /** The text to continue, special tokens (`<|im_start|>`) read as such. */
  prompt: string;
  /** The prompt as token ids instead, evaluated as they are (after the BOS token where the model wants one). */
  promptTokens?: number[];
  /** The text after the gap to fill. */
  suffix?: string;
  /** Log-probabilities wanted, with this many likeliest alternatives per token (0–20). */
  logprobs?: number;
  /** With `logprobs`: the prompt's tokens scored too. */
  echo?: boolean;
}


/** A token's log-probability (null for a prompt's first token, which nothing predicts) and the likeliest tokens at its position. */
export interface TokenLogprob {
  id: number;
  text: string;
  logprob: number | null;
  top: Array<{ id: number; text: string; logprob: number }>;
}

export type FinishReason = 'stop' | 'length' | 'tool_calls';

export interface ChatUsage {
  promptTokens: number;
  /** Prompt tokens the model's cache already held (not evaluated again); 0 where a backend cannot tell. */
  cachedPromptTokens: number;
  completionTokens: number;
  /** Completion tokens generated inside the model's thinking (part of completionTokens). */
  reasoningTokens: number;
}

export type ChatDelta =
  /** First, once the request holds a sequence: the prompt size is known, generation starts. */
  | { type: 'start'; promptTokens: number; cachedPromptTokens: number; /** The installed model answering (the request may have named an alias). */ model?: string }
  | { type: 'reasoning'; text: string }
  | { type: 'content'; text: string }
  | { type: 'tool_call'; index: number; call: ChatToolCall }
  /** Asked for (CompletionRequest.logprobs): the prompt's tokens scored (with `echo`), before any content; the answer's, before `done`. */
  | { type: 'logprobs'; part: 'prompt' | 'answer'; tokens: TokenLogprob[] }
  | { type: 'done'; finishReason: FinishReason; stopSequence: string | null; usage: ChatUsage };

/** What a chat backend's loaded model offers the task. */
export interface ChatModel extends LoadedModel {
  /** Tokens one conversation may hold: its prompt and answer together. */
  readonly contextSize: number;
  generate(request: ChatRequest, signal: AbortSignal): AsyncIterable<ChatDelta>;
  /** Tokens the request's prompt takes (its messages and tools, as the model's template renders them). */
  countTokens(request: ChatRequest): Promise<number>;
  /** Tokens each text takes, as plain text. */
  tokenCounts(texts: readonly string[]): Promise<number[]>;
  /**
   * Evaluates the prompt of `request` ahead of time into the sequence a
   * request continuing its conversation will be given, so that one only
   * evaluates what it adds (a voice session's next turn, while the user is
   * still speaking). Best effort: nothing happens unless a sequence is free
   * (and, with several, another stays free for other requests).
   */
  prefill?(request: ChatRequest, signal: AbortSignal): Promise<void>;
  /** The prompt `request` becomes in the model's chat template, as text (special tokens spelled out). */
  renderPrompt?(request: ChatRequest): Promise<string>;
  /**
   * The model's token ids for `text` (no BOS added): special tokens' text read
   * as those tokens, or with `parseSpecial` false, as llama.cpp's
   * `parse_special: false`, control tokens' text as plain text; and the text of ids.
   */
  tokenize?(text: string, parseSpecial?: boolean): Promise<number[]>;
  detokenize?(tokens: readonly number[]): Promise<string>;
  /** Continues a raw prompt, no template (tasks/complete.ts); with `suffix`, fills the middle with the model's own FIM tokens. */
  complete?(request: CompletionRequest, signal: AbortSignal): AsyncIterable<ChatDelta>;
  /** Pauses the running generation named `generationId` (ChatRequest.generationId) after its current token, for at most `ms` or until `resume`. */
  hold?(generationId: string, ms: number): Promise<void>;
  resume?(generationId: string): Promise<void>;
}

/** The kinds of media a model takes besides text (its catalog entry's `input`, read from its projector at pull). */
export function mediaInputs(installed: InstalledModel): ReadonlySet<ChatMedia['kind']> {
  return new Set(installed.files.mmproj ? (installed.entry.input ?? []) : []);
}

/** A 400 naming the model and the part when a request carries media the model cannot take; never a silent drop. */
export function checkMediaInputs(installed: InstalledModel, request: ChatRequest): void {
  const takes = mediaInputs(installed);
  for (const item of request.messages.flatMap((m) => m.media ?? [])) {
    // Whether this model's runtime has llama.cpp's multimodal library is known where it loads (no_media_runtime there).
    if (takes.has(item.kind)) continue;
    const what = takes.size ? `text and ${[...takes].join(' and ')}` : 'text only';
    throw new InvalidRequestError(`Model '${installed.id}' takes ${what}: ${item.param} is ${item.kind === 'image' ? 'an image' : 'audio'}.`, { param: item.param, code: 'unsupported_input' });
  }
}

/** checkMediaInputs for the request's model, before anything loads; nothing to do for a request without media. */
export async function checkChatMedia(engine: Engine, request: ChatRequest): Promise<void> {
  if (request.messages.some((m) => m.media?.length)) checkMediaInputs(await engine.resolve(request.model, ['chat']), request);
}

/**
 * Runs one chat request. The model is leased only while the generation runs;
 * breaking out of the iteration (or aborting `signal`) stops generation and
 * frees the sequence.
 */
export async function* chat(engine: Engine, request: ChatRequest, signal: AbortSignal): AsyncIterable<ChatDelta> {
  await checkChatMedia(engine, request);
  const lease = await engine.acquire<ChatModel>(request.model, ['chat'], { keepAliveMs: request.keepAliveMs });
  const model = lease.installed.id;
  // When the first generated text came: the decode rate is measured from there, so prompt evaluation is left out.
  let firstOutput: number | undefined;
  try {
    for await (const delta of lease.model.generate(request, signal)) {
      if (delta.type === 'done') {
        // Reported before the final delta is handed on: a consumer may stop iterating once it has it.
        const { promptTokens, completionTokens } = delta.usage;
        const seconds = firstOutput === undefined ? 0 : (performance.now() - firstOutput) / 1000;
        const decodeTokensPerSecond = completionTokens >= 2 && seconds > 0 ? (completionTokens - 1) / seconds : null;
        engine.report({ type: 'chat', model, promptTokens, completionTokens, decodeTokensPerSecond });
      } else if (delta.type !== 'start') {
        firstOutput ??= performance.now();
      } else {
        yield { ...delta, model };
        continue;
      }
      yield delta;
    }
  } catch (error) {
    engine.reportRejection(model, error);
    throw error;
  } finally {
    lease.release();
  }
}

/** The tokens `request`'s prompt takes on its model (Anthropic's count_tokens; context edits' thresholds). */
export async function countChatTokens(engine: Engine, request: ChatRequest): Promise<number> {
  return engine.withModel<ChatModel, number>(request.model, ['chat'], (model) => model.countTokens(request), { keepAliveMs: request.keepAliveMs });
}

/** The tokens each text takes on `model`. */
export async function chatTokenCounts(engine: Engine, model: string, texts: readonly string[]): Promise<number[]> {
  return texts.length === 0 ? [] : engine.withModel<ChatModel, number[]>(model, ['chat'], (loaded) => loaded.tokenCounts(texts));
}

/**
 * Warms the chat model for a request still to come (ChatModel.prefill):
 * loads it if need be and evaluates `request`'s prompt, which the coming
 * request extends. Never fails: a warm-up that cannot happen changes nothing
 * but the coming request's speed.
 */
export async function prefillChat(engine: Engine, request: ChatRequest, signal: AbortSignal): Promise<void> {
  try {
    const lease = await engine.acquire<ChatModel>(request.model, ['chat'], { keepAliveMs: request.keepAliveMs });
    try {
      await lease.model.prefill?.(request, signal);
    } finally {
      lease.release();
    }
  } catch {
    // The request itself reports what is wrong (an unknown model, a prompt too long).
  }
}

/**
 * Pauses a running generation (ChatModel.hold) for at most `ms`, as a
 * spoken answer does while its first piece is synthesised: the text is far
 * ahead of the speech, and the synthesis then has the cores to itself.
 * Resolves with the function that resumes it; never fails (a generation
 * that cannot be paused runs on).
 */
export async function holdChat(engine: Engine, model: string, generationId: string, ms: number): Promise<() => void> {
  let lease: Lease<ChatModel> | undefined;
  try {
    lease = await engine.acquire<ChatModel>(model, ['chat']);
    await lease.model.hold?.(generationId, ms);
  } catch {
    lease?.release();
    return () => {};
  }
  const held = lease;
  let resumed = false;
  return () => {
    if (resumed) return;
    resumed = true;
    void Promise.resolve(held.model.resume?.(generationId))
      .catch(() => {})
      .finally(() => held.release());
  };
}

export interface ChatResult {
  /** The installed model that answered. */
  model?: string;
  content: string;
  reasoning: string;
  toolCalls: ChatToolCall[];
  finishReason: FinishReason;
  stopSequence: string | null;
  usage: ChatUsage;
  /** The answer's tokens scored, when the request asked (ChatRequest.logprobs). */
  logprobs?: TokenLogprob[];
}

/** Gathers a whole delta stream into one result (the non-streamed responses). */
export async function collectChat(deltas: AsyncIterable<ChatDelta>): Promise<ChatResult> {
  let content = '';
  let reasoning = '';
  const toolCalls: ChatToolCall[] = [];
  let model: string | undefined;
  let logprobs: TokenLogprob[] | undefined;
  for await (const delta of deltas) {
    if (delta.type === 'start') model = delta.model;
    else if (delta.type === 'content') content += delta.text;
    else if (delta.type === 'reasoning') reasoning += delta.text;
    else if (delta.type === 'tool_call') toolCalls.push(delta.call);
    else if (delta.type === 'logprobs') logprobs = delta.tokens;
    else if (delta.type === 'done') return { model, content, reasoning, toolCalls, finishReason: delta.finishReason, stopSequence: delta.stopSequence, usage: delta.usage, ...(logprobs ? { logprobs } : {}) };
  }
  throw new Error('chat stream ended without a final delta');
}
