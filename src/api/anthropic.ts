import { z } from 'zod';
import type { ChatMessage, ChatRequest } from '../core/tasks/chat.js';
import { logitBias, MAX_OUTPUT_TOKENS, messageList, outputTokens, stopList, tokenBias } from './chat.js';
import { stringOr, textContent } from './common.js';
import { anthropicImageBlock, partsToContent } from './chat-media.js';
import { parseKnownFields } from './validate.js';

/**
 * POST /v1/anthropic/messages (and /v1/messages): the Anthropic Messages
 * request schema and wire shapes. Supported: system, stream, temperature,
 * top_p, top_k, stop_sequences, metadata.user_id (accepted; it only labels
 * the request upstream), thinking (mapped to the thinking switch and budget).
 * Extension: logit_bias, as chat completions take it (Anthropic's API has no
 * way to ban or favour a token; this route shares chat's sampler).
 * Image blocks (base64 or url) in user turns (api/chat-media.ts); tools,
 * tool_choice and other content blocks are 400s naming the field.
 * The bounds on messages, max_tokens, stop_sequences and the thinking
 * budget are chat's (src/api/chat.ts).
 */

const textBlock = z.object({
  type: z.literal('text'),
  text: z.string(),
  cache_control: z.unknown().optional(),
  citations: z.unknown().optional(),
});
const content = z.union([z.string(), z.array(textBlock).min(1)]);
/** A user turn may carry images (api/chat-media.ts). */
const userContent = stringOr(z.array(z.discriminatedUnion('type', [textBlock, anthropicImageBlock], { error: "only 'text' and 'image' content blocks are supported" })).min(1));
const turn = z.discriminatedUnion('role', [z.object({ role: z.literal('user'), content: userContent }), z.object({ role: z.literal('assistant'), content })]);

export const messagesSchema = z.object({
  model: z.string().min(1),
  messages: messageList(turn),
  max_tokens: outputTokens,
  system: content.optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().gt(0).max(1).optional(),
  top_k: z.int().min(0).optional(),
  stop_sequences: stopList.optional(),
  logit_bias: logitBias.optional(),
  stream: z.boolean().optional(),
  metadata: z.object({ user_id: z.string().nullish() }).optional(),
  thinking: z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('enabled'), budget_tokens: z.int().min(0).max(MAX_OUTPUT_TOKENS, `must be at most ${MAX_OUTPUT_TOKENS}`) }),
      z.object({ type: z.literal('disabled') }),
    ])
    .optional(),
});
export type MessagesBody = z.output<typeof messagesSchema>;

export function parseMessages(body: unknown): MessagesBody {
  return parseKnownFields(messagesSchema, body);
}

export function toChatRequest(body: MessagesBody): ChatRequest {
  const messages: ChatMessage[] = [];
  if (body.system !== undefined) messages.push({ role: 'system', content: textContent(body.system) });
  body.messages.forEach((m, i) => {
    if (m.role === 'assistant') {
      messages.push({ role: 'assistant', content: textContent(m.content) });
      return;
    }
    const { content, media } = partsToContent(m.content, `messages.${i}.content`);
    messages.push({ role: 'user', content, ...(media.length ? { media } : {}) });
  });
  return {
    model: body.model,
    messages,
    maxTokens: body.max_tokens,
    temperature: body.temperature,
    topP: body.top_p,
    topK: body.top_k,
    stop: body.stop_sequences,
    logitBias: tokenBias(body.logit_bias),
    // Anthropic semantics: no extended thinking unless asked for.
    thinking: body.thinking?.type === 'enabled',
    thinkingBudget: body.thinking?.type === 'enabled' ? body.thinking.budget_tokens : undefined,
  };
}

// ---- wire shapes ----

export type ContentBlock = { type: 'text'; text: string } | { type: 'thinking'; thinking: string; signature: string };

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence';

export interface MessageResponse {
  id: string;
  type: 'message';
  role: 'assistant';
  content: ContentBlock[];
  model: string;
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: { input_tokens: number; output_tokens: number };
}
