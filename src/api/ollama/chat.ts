import { z } from 'zod';
import { ollamaModelName } from './models.js';
import { MEDIA_MARKER, type ChatMedia, type ChatMessage, type ChatRequest, type ChatToolCall, type ChatUsage, type FinishReason } from '../../core/tasks/chat.js';
import { MAX_CHAT_MESSAGES, MAX_TOOLS, toolName } from '../chat.js';
import { MAX_MEDIA_PER_REQUEST } from '../chat-media.js';
import { ollamaFormat, ollamaKeepAlive, ollamaOptions, ollamaThink, samplingOf } from './options.js';

/**
 * POST /api/chat, as Ollama's API reference describes it: `messages` with
 * base64 `images`, `tool_calls` (arguments as objects) and `tool_name` on
 * tool results; `tools`, `think`, `format`, `options`, `keep_alive`,
 * `stream` (default true). Unknown fields are ignored, as Ollama ignores
 * them. An empty `messages` only loads the model (or unloads it with
 * `keep_alive: 0`).
 */

const toolCall = z.object({
  function: z.object({
    name: toolName,
    arguments: z.record(z.string(), z.unknown()).default({}),
  }),
});

const message = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string().default(''),
  /** Base64 pictures (no data: prefix), for a model that takes images. */
  images: z.array(z.string().min(1)).max(MAX_MEDIA_PER_REQUEST).nullish(),
  thinking: z.string().nullish(),
  tool_calls: z.array(toolCall).max(MAX_TOOLS).nullish(),
  tool_name: z.string().max(256).nullish(),
});

const tool = z.object({
  type: z.literal('function').default('function'),
  function: z.object({
    name: toolName,
    description: z.string().optional(),
    parameters: z.record(z.string(), z.unknown()).optional(),
  }),
});

export const ollamaChatSchema = z.object({
  model: ollamaModelName,
  messages: z.array(message).max(MAX_CHAT_MESSAGES, `must contain at most ${MAX_CHAT_MESSAGES} messages`).default([]),
  tools: z.array(tool).max(MAX_TOOLS).nullish(),
  /** lserve's extension, OpenAI's values: whether the answer must call a tool (Ollama leaves it to the model). */
  tool_choice: z.union([z.enum(['auto', 'none', 'required']), z.object({ name: toolName })]).optional(),
  think: ollamaThink,
  format: ollamaFormat,
  options: ollamaOptions,
  keep_alive: ollamaKeepAlive,
  stream: z.boolean().default(true),
});
export type OllamaChatBody = z.output<typeof ollamaChatSchema>;

/** The media of one message: its base64 pictures, each at a marker before the text (as Ollama places them). */
export function imagesOf(images: readonly string[] | null | undefined, param: string): { prefix: string; media: ChatMedia[] } {
  const media = (images ?? []).map((base64, i): ChatMedia => ({ kind: 'image', param: `${param}.${i}`, source: { base64 } }));
  return { prefix: media.map(() => MEDIA_MARKER).join(''), media };
}

/**
 * The chat task's request. Ollama's tool results name their tool, not a
 * call: each is paired with the first call of that name, not yet answered,
 * of the assistant turns before it.
 */
export function toChatRequest(body: OllamaChatBody, model: string): ChatRequest {
  const open: ChatToolCall[] = [];
  const messages = body.messages.map((m, i): ChatMessage => {
    const clean = m.content.split(MEDIA_MARKER).join('');
    if (m.role === 'assistant') {
      const toolCalls = (m.tool_calls ?? []).map((call, j) => ({ id: `call_${i}_${j}`, name: call.function.name, arguments: JSON.stringify(call.function.arguments) }));
      open.push(...toolCalls);
      return { role: 'assistant', content: clean, ...(m.thinking ? { reasoning: m.thinking } : {}), ...(toolCalls.length ? { toolCalls } : {}) };
    }
    if (m.role === 'tool') {
      const index = open.findIndex((call) => m.tool_name == null || call.name === m.tool_name);
      const [call] = index >= 0 ? open.splice(index, 1) : [];
      return { role: 'tool', content: clean, ...(call ? { toolCallId: call.id } : {}) };
    }
    const { prefix, media } = m.role === 'user' ? imagesOf(m.images, `messages.${i}.images`) : { prefix: '', media: [] };
    return { role: m.role, content: prefix + clean, ...(media.length ? { media } : {}) };
  });
  return {
    model,
    messages,
    ...samplingOf(body.options, body.think, body.format),
    tools: body.tools?.map((t) => ({ name: t.function.name, description: t.function.description, parameters: t.function.parameters })),
    toolChoice: body.tool_choice,
    keepAliveMs: body.keep_alive,
  };
}

/** Ollama's durations, in nanoseconds, and counts: what every final object carries. */
export interface OllamaTimings {
  total_duration: number;
  load_duration: number;
  prompt_eval_count: number;
  prompt_eval_duration: number;
  eval_count: number;
  eval_duration: number;
}

export interface OllamaToolCall {
  function: { index: number; name: string; arguments: Record<string, unknown> };
}

export interface OllamaChatMessage {
  role: 'assistant';
  content: string;
  thinking?: string;
  tool_calls?: OllamaToolCall[];
}

export interface OllamaChatChunk {
  model: string;
  created_at: string;
  message: OllamaChatMessage;
  done: boolean;
  done_reason?: 'stop' | 'length' | 'load' | 'unload';
}

export type OllamaChatResponse = OllamaChatChunk & Partial<OllamaTimings>;

/** A call as Ollama returns it: the arguments an object (the model's JSON text parsed; kept whole under `arguments` if it is not an object). */
export function ollamaToolCall(call: ChatToolCall, index: number): OllamaToolCall {
  let args: unknown;
  try {
    args = JSON.parse(call.arguments);
  } catch {
    args = undefined;
  }
  return { function: { index, name: call.name, arguments: args && typeof args === 'object' && !Array.isArray(args) ? (args as Record<string, unknown>) : { arguments: call.arguments } } };
}

/** Ollama's done_reason for how an answer ended: one that called tools is a `stop`, as the call is its end (OpenAI's route says tool_calls). */
export function doneReason(finish: FinishReason, calledTools = false): 'stop' | 'length' {
  return finish === 'length' && !calledTools ? 'length' : 'stop';
}

/**
 * Timings from what the route measured (milliseconds since the request
 * came: the model held, the first token out, the end): the load (and
 * queue), the prompt's evaluation, the generation, and their sum.
 */
export function timingsOf(usage: ChatUsage | undefined, marks: { started: number; held: number; firstToken: number; ended: number }): OllamaTimings {
  const ns = (ms: number) => Math.max(0, Math.round(ms * 1e6));
  const firstToken = Math.max(marks.firstToken, marks.held);
  return {
    total_duration: ns(marks.ended - marks.started),
    load_duration: ns(marks.held - marks.started),
    prompt_eval_count: usage?.promptTokens ?? 0,
    prompt_eval_duration: ns(firstToken - marks.held),
    eval_count: usage?.completionTokens ?? 0,
    eval_duration: ns(marks.ended - firstToken),
  };
}
