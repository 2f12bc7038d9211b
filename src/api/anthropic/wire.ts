import type { ChatDelta, ChatResult, ChatToolCall, ChatUsage, FinishReason } from '../../core/tasks/chat.js';
import type { AppliedEdit } from './context-edits.js';

/**
 * The Anthropic Messages API's answer: the message object and its stream
 * events, as the API reference has them. One assembler turns the chat
 * task's deltas into content blocks, emitting the documented events as it
 * goes when the answer is streamed; a non-streamed answer is the same
 * assembler fed the collected result, so both carry the same blocks.
 */

export type ContentBlock =
  | { type: 'text'; text: string }
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown>; caller: { type: 'direct' } };

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use';

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  /** Tokens the prompt cache held and the model did not evaluate again. */
  cache_read_input_tokens: number;
  /** The cache here keeps every evaluated token without a separate write: always 0. */
  cache_creation_input_tokens: number;
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
  server_tool_use: null;
  service_tier: 'standard';
  output_tokens_details: { thinking_tokens: number };
}

export interface MessageResponse {
  id: string;
  type: 'message';
  role: 'assistant';
  content: ContentBlock[];
  model: string;
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  stop_details: null;
  container: null;
  usage: Usage;
  context_management?: { applied_edits: AppliedEdit[] } | null;
}

/**
 * Usage as Anthropic counts it: `input_tokens` are the prompt tokens
 * evaluated now, `cache_read_input_tokens` those the cache already held;
 * together they are the whole prompt.
 */
export function usageOf(promptTokens: number, cachedTokens: number, usage?: Pick<ChatUsage, 'completionTokens' | 'reasoningTokens'>): Usage {
  return {
    input_tokens: promptTokens - cachedTokens,
    output_tokens: usage?.completionTokens ?? 0,
    cache_read_input_tokens: cachedTokens,
    cache_creation_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
    server_tool_use: null,
    service_tier: 'standard',
    output_tokens_details: { thinking_tokens: usage?.reasoningTokens ?? 0 },
  };
}

export function stopReason(reason: FinishReason, stopSequence: string | null, calledTools: boolean): StopReason {
  if (calledTools) return 'tool_use';
  if (reason === 'length') return 'max_tokens';
  return stopSequence ? 'stop_sequence' : 'end_turn';
}

/** Anthropic's tool use ids: `toolu_…` (the chat task's `call_…` ids keep their random part). */
export function toolUseId(call: ChatToolCall): string {
  return call.id.startsWith('toolu_') ? call.id : `toolu_${call.id.replace(/^call_/, '')}`;
}

export interface AssemblerOptions {
  /** Thinking blocks carry their text, or only the signature (`display: omitted`). */
  display: 'summarized' | 'omitted';
  /** Seals a block's reasoning into its signature (core/sealed.ts). */
  sign: (reasoning: string) => string;
  /** Receives each stream event, when the answer is streamed. */
  emit?: (event: { type: string } & Record<string, unknown>) => void;
}

export class MessageAssembler {
  readonly content: ContentBlock[] = [];
  private open: { index: number; kind: 'text' | 'thinking'; text: string } | null = null;

  constructor(private readonly options: AssemblerOptions) {}

  push(delta: ChatDelta): void {
    if (delta.type === 'reasoning') this.append('thinking', delta.text);
    else if (delta.type === 'content') this.append('text', delta.text);
    else if (delta.type === 'tool_call') this.toolUse(delta.call);
  }

  /** Closes the last block; an answer with no block gets an empty text block, as clients expect one. */
  finish(): ContentBlock[] {
    if (this.content.length === 0) this.openBlock('text');
    this.close();
    return this.content;
  }

  get calledTools(): boolean {
    return this.content.some((block) => block.type === 'tool_use');
  }

  /** A collected (non-streamed) result, in the order the deltas come. */
  replay(result: ChatResult): ContentBlock[] {
    if (result.reasoning) this.push({ type: 'reasoning', text: result.reasoning });
    if (result.content) this.push({ type: 'content', text: result.content });
    result.toolCalls.forEach((call, index) => this.push({ type: 'tool_call', index, call }));
    return this.finish();
  }

  private emit(type: string, fields: Record<string, unknown>): void {
    this.options.emit?.({ type, ...fields });
  }

  private append(kind: 'text' | 'thinking', text: string): void {
    const open = this.open?.kind === kind ? this.open : this.openBlock(kind);
    open.text += text;
    if (kind === 'text') this.emit('content_block_delta', { index: open.index, delta: { type: 'text_delta', text } });
    else if (this.options.display === 'summarized') this.emit('content_block_delta', { index: open.index, delta: { type: 'thinking_delta', thinking: text } });
  }

  private openBlock(kind: 'text' | 'thinking') {
    this.close();
    const index = this.content.length;
    const block: ContentBlock = kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' };
    this.content.push(block);
    this.emit('content_block_start', { index, content_block: { ...block } });
    this.open = { index, kind, text: '' };
    return this.open;
  }

  private close(): void {
    const open = this.open;
    if (!open) return;
    this.open = null;
    const block = this.content[open.index]!;
    if (block.type === 'text') block.text = open.text;
    else if (block.type === 'thinking') {
      block.signature = this.options.sign(open.text);
      block.thinking = this.options.display === 'omitted' ? '' : open.text;
      this.emit('content_block_delta', { index: open.index, delta: { type: 'signature_delta', signature: block.signature } });
    }
    this.emit('content_block_stop', { index: open.index });
  }

  private toolUse(call: ChatToolCall): void {
    this.close();
    const index = this.content.length;
    const block: ContentBlock = { type: 'tool_use', id: toolUseId(call), name: call.name, input: parseInput(call.arguments), caller: { type: 'direct' } };
    this.content.push(block);
    this.emit('content_block_start', { index, content_block: { ...block, input: {} } });
    this.emit('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) } });
    this.emit('content_block_stop', { index });
  }
}

/** The call's arguments as an object (the engine's tool calls are JSON objects by grammar). */
function parseInput(args: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(args);
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : { value };
  } catch {
    return {};
  }
}
