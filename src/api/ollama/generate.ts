import { z } from 'zod';
import { ollamaModelName } from './models.js';
import type { ChatRequest } from '../../core/tasks/chat.js';
import type { CompletionRequest } from '../../core/tasks/chat.js';
import { MAX_MEDIA_PER_REQUEST } from '../chat-media.js';
import { imagesOf, type OllamaTimings } from './chat.js';
import { ollamaFormat, ollamaKeepAlive, ollamaOptions, ollamaThink, samplingOf } from './options.js';

/** Longest `context` (Ollama's deprecated token array) taken back. */
export const MAX_CONTEXT_TOKENS = 1 << 20;

/**
 * POST /api/generate, as Ollama's API reference describes it. With `raw`
 * (or a `suffix`, filled in the middle) the prompt is the model's input as
 * it is; otherwise `system` and `prompt` (with `images`) are one exchange in
 * the model's chat template. An empty prompt only loads the model (or
 * unloads it with `keep_alive: 0`). `template` is Ollama's Go template,
 * which lserve does not run: the GGUF's own chat template is used, and a
 * `template` sent is ignored (docs/ollama.md). `context`, the deprecated
 * token array of an earlier answer, continues it: its text comes before the
 * prompt.
 */
export const ollamaGenerateSchema = z.object({
  model: ollamaModelName,
  prompt: z.string().default(''),
  suffix: z.string().nullish(),
  system: z.string().nullish(),
  template: z.string().nullish(),
  raw: z.boolean().default(false),
  images: z.array(z.string().min(1)).max(MAX_MEDIA_PER_REQUEST).nullish(),
  format: ollamaFormat,
  options: ollamaOptions,
  think: ollamaThink,
  keep_alive: ollamaKeepAlive,
  stream: z.boolean().default(true),
  context: z.array(z.int().min(0)).max(MAX_CONTEXT_TOKENS).nullish(),
});
export type OllamaGenerateBody = z.output<typeof ollamaGenerateSchema>;

/** Whether the request goes to the model as it is (a raw prompt, or a middle to fill) rather than through its chat template. */
export function isCompletion(body: OllamaGenerateBody): boolean {
  return body.raw || (body.suffix != null && body.suffix !== '');
}

/** The completion task's request for a raw or fill-in-the-middle generate; `earlier` is the text of `context`. */
export function toCompletionRequest(body: OllamaGenerateBody, model: string, earlier: string): CompletionRequest {
  const { thinking: _t, reasoningEffort: _e, ...sampling } = samplingOf(body.options, body.think, body.format);
  return { model, prompt: earlier + body.prompt, suffix: body.suffix || undefined, ...sampling, keepAliveMs: body.keep_alive };
}

/** The chat task's request for a templated generate: `system`, then `prompt` with its images (after the text of `context`). */
export function toGenerateChatRequest(body: OllamaGenerateBody, model: string, earlier: string): ChatRequest {
  const { prefix, media } = imagesOf(body.images, 'images');
  return {
    model,
    messages: [...(body.system ? [{ role: 'system' as const, content: body.system }] : []), { role: 'user', content: prefix + earlier + body.prompt, ...(media.length ? { media } : {}) }],
    ...samplingOf(body.options, body.think, body.format),
    keepAliveMs: body.keep_alive,
  };
}

export interface OllamaGenerateChunk {
  model: string;
  created_at: string;
  response: string;
  thinking?: string;
  done: boolean;
  done_reason?: 'stop' | 'length' | 'load' | 'unload';
  /** The exchange's tokens, for a `context` that continues it. */
  context?: number[];
}

export type OllamaGenerateResponse = OllamaGenerateChunk & Partial<OllamaTimings>;
