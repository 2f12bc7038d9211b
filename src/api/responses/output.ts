import type { ChatDelta, ChatResult, ChatToolCall, ChatUsage, FinishReason } from '../../core/tasks/chat.js';
import { chatLogprobs, type ChatLogprobs } from '../chat.js';
import type { ResponseCreateBody } from './request.js';
import { itemId } from './items.js';
import type { McpListedTool, ToolIdentity } from './tools.js';

/**
 * The Responses API's output side: the response object as OpenAI documents
 * it, and the assembler that turns the chat task's deltas into output items
 * and, when streamed, into the documented event sequence. A non-streamed
 * response is the same assembler fed the collected result, so both carry
 * the same items.
 */

export type ItemStatus = 'in_progress' | 'completed' | 'incomplete';

/** A token of the answer's text with its log-probability (include message.output_text.logprobs). */
export type OutputLogprob = ChatLogprobs['content'][number];

export type OutputItem =
  | { id: string; type: 'message'; role: 'assistant'; status: ItemStatus; content: Array<{ type: 'output_text'; text: string; annotations: []; logprobs: OutputLogprob[] }> }
  | { id: string; type: 'reasoning'; summary: []; content: Array<{ type: 'reasoning_text'; text: string }>; encrypted_content?: string; status: ItemStatus }
  | { id: string; type: 'function_call'; call_id: string; name: string; namespace?: string; arguments: string; status: ItemStatus }
  | { id: string; type: 'custom_tool_call'; call_id: string; name: string; namespace?: string; input: string; status: ItemStatus }
  | { id: string; type: 'tool_search_call'; call_id: string; arguments: unknown; execution: 'client'; status: ItemStatus }
  | { id: string; type: 'mcp_list_tools'; server_label: string; tools: McpListedTool[]; error: string | null }
  | { id: string; type: 'mcp_call'; server_label: string; name: string; arguments: string; output: string | null; error: string | null; approval_request_id: string | null; status: McpCallStatus }
  | { id: string; type: 'mcp_approval_request'; server_label: string; name: string; arguments: string };

export type McpCallStatus = 'in_progress' | 'calling' | 'completed' | 'failed';

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number; cache_write_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete' | 'failed';

export interface ResponseObject extends Record<string, unknown> {
  id: string;
  object: 'response';
  created_at: number;
  status: ResponseStatus;
  output: OutputItem[];
  usage: ResponseUsage | null;
}

/*
 * usage: cached_tokens is the part of the prompt the slot's KV cache already
 * held (a stored conversation's earlier turns, continued on the sequence that
 * generated them). How many generated tokens were reasoning is not measured,
 * so that detail is 0 (as OpenAI reports for a model without it) rather than
 * guessed.
 */
export function usageOf(usage: ChatUsage): ResponseUsage {
  return {
    input_tokens: usage.promptTokens,
    // cache_write_tokens: both SDKs' usage types require it; a local KV cache has no separately counted writes.
    input_tokens_details: { cached_tokens: usage.cachedPromptTokens, cache_write_tokens: 0 },
    output_tokens: usage.completionTokens,
    output_tokens_details: { reasoning_tokens: usage.reasoningTokens },
    total_tokens: usage.promptTokens + usage.completionTokens,
  };
}

/** The response object; the settings are the request's, echoed back with OpenAI's defaults where it gave none. */
export function responseObject(
  body: ResponseCreateBody,
  id: string,
  createdAt: number,
  state: { status: ResponseStatus; output?: OutputItem[]; usage?: ResponseUsage | null; error?: { code: string; message: string } | null },
): ResponseObject {
  const incomplete = state.status === 'incomplete';
  return {
    id,
    object: 'response',
    created_at: createdAt,
    status: state.status,
    background: false,
    completed_at: state.status === 'completed' ? Math.floor(Date.now() / 1000) : null,
    error: state.error ?? null,
    incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    model: body.model,
    output: state.output ?? [],
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    safety_identifier: body.safety_identifier ?? null,
    service_tier: 'default',
    store: body.store ?? true,
    temperature: body.temperature ?? null,
    text: { format: body.text?.format ?? { type: 'text' }, verbosity: body.text?.verbosity ?? 'medium' },
    tool_choice: body.tool_choice ?? 'auto',
    tools: (body.tools ?? []).map((t) =>
      t.type === 'function'
        ? { ...t, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? true }
        : t.type === 'custom'
          ? { ...t, description: t.description ?? null, format: t.format ?? { type: 'text' } }
          : t.type === 'mcp'
            ? // What an MCP tool carries for its server (headers, authorization) is never echoed or stored.
              { ...t, headers: null, authorization: undefined }
            : t,
    ),
    top_logprobs: body.top_logprobs ?? 0,
    top_p: body.top_p ?? null,
    truncation: body.truncation ?? 'disabled',
    usage: state.usage ?? null,
    user: body.user ?? null,
    metadata: body.metadata ?? {},
  };
}

export type ResponseEvent = { type: string; sequence_number: number } & Record<string, unknown>;

/** The text item open for deltas: reasoning or the answer. */
type OpenText = { kind: 'reasoning' | 'message'; index: number; id: string; text: string };

export interface AssemblerOptions {
  /** What a name the model called stands for (a namespaced tool, a custom tool, the client's tool search); a plain function when unknown. */
  identify: (name: string) => ToolIdentity | undefined;
  /** Seals a reasoning item's text into its encrypted_content, when the request includes it. */
  sealReasoning?: (text: string) => string;
  /** Receives each stream event, when the answer is streamed. */
  emit?: (event: ResponseEvent) => void;
  /** Keep the events until startStream (work done before the stream opens: MCP tool listings, approved calls). */
  hold?: boolean;
}

export class ResponseAssembler {
  readonly output: OutputItem[] = [];
  private sequence = 0;
  private open: OpenText | null = null;
  /** The answer's tokens scored, given to the message's text when it closes. */
  private logprobs: OutputLogprob[] = [];

  private held: Array<[string, Record<string, unknown>]> | null;
  private emit: ((event: ResponseEvent) => void) | undefined;

  constructor(private readonly options: AssemblerOptions) {
    this.held = options.hold ? [] : null;
    this.emit = options.emit;
  }

  /** Sends one event, numbered in order from 0 (or keeps it, while held). */
  event(type: string, fields: Record<string, unknown>): void {
    if (this.held) this.held.push([type, fields]);
    else this.emit?.({ type, ...fields, sequence_number: this.sequence++ });
  }

  /** Opens the stream: `first` (response.created, …), then the events held until now, then the rest as they come. */
  startStream(emit: (event: ResponseEvent) => void, first: Array<[string, Record<string, unknown>]>): void {
    const held = this.held ?? [];
    this.held = null;
    this.emit = emit;
    for (const [type, fields] of [...first, ...held]) this.event(type, fields);
  }

  push(delta: ChatDelta): void {
    if (delta.type === 'reasoning' || delta.type === 'content') {
      const kind = delta.type === 'reasoning' ? 'reasoning' : 'message';
      const open = this.openText(kind);
      open.text += delta.text;
      const name = kind === 'reasoning' ? 'response.reasoning_text.delta' : 'response.output_text.delta';
      this.event(name, { item_id: open.id, output_index: open.index, content_index: 0, delta: delta.text, ...(kind === 'message' ? { logprobs: [] } : {}) });
    } else if (delta.type === 'tool_call') {
      this.closeText('completed');
      this.toolCall(delta.call);
    } else if (delta.type === 'logprobs') {
      // Scored once the answer is generated, before it ends: its text's part carries them when it closes.
      this.logprobs = chatLogprobs(delta.tokens).content;
    }
  }

  /** MCP calls the model made that the server is to run now (require_approval: never), by output index; taken once. */
  private mcpCalls: number[] = [];

  /** Closes the open text between two generations of one response (the MCP tool loop). */
  endGeneration(): void {
    this.closeText('completed');
  }

  /** A server's tool listing (or its failure), as one item with its events. */
  mcpListTools(serverLabel: string, outcome: { tools: McpListedTool[] } | { error: string }): void {
    const index = this.output.length;
    const id = itemId('mcpl');
    const item: OutputItem = { id, type: 'mcp_list_tools', server_label: serverLabel, tools: 'tools' in outcome ? outcome.tools : [], error: 'error' in outcome ? outcome.error : null };
    this.output.push(item);
    this.event('response.output_item.added', { output_index: index, item: { ...item, tools: [], error: null } });
    this.event('response.mcp_list_tools.in_progress', { item_id: id, output_index: index });
    this.event('error' in outcome ? 'response.mcp_list_tools.failed' : 'response.mcp_list_tools.completed', { item_id: id, output_index: index });
    this.event('response.output_item.done', { output_index: index, item: structuredClone(item) });
  }

  /** An MCP call the server runs now: its item in progress; mcpCallDone ends it. Returns its output index. */
  mcpCall(serverLabel: string, name: string, args: string, approvalRequestId: string | null = null): number {
    const index = this.output.length;
    const id = itemId('mcp');
    const item: OutputItem = { id, type: 'mcp_call', server_label: serverLabel, name, arguments: args, output: null, error: null, approval_request_id: approvalRequestId, status: 'in_progress' };
    this.output.push(item);
    this.event('response.output_item.added', { output_index: index, item: { ...item, arguments: '' } });
    this.event('response.mcp_call_arguments.delta', { item_id: id, output_index: index, delta: args });
    this.event('response.mcp_call_arguments.done', { item_id: id, output_index: index, arguments: args });
    this.event('response.mcp_call.in_progress', { item_id: id, output_index: index });
    return index;
  }

  /** The end of the MCP call at `index`: its output, or the error the model is shown. */
  mcpCallDone(index: number, outcome: { output: string; error?: undefined } | { error: string; output?: undefined }): void {
    const item = this.output[index];
    if (item?.type !== 'mcp_call') throw new Error(`output ${index} is not an mcp_call`);
    if (outcome.error !== undefined) {
      item.error = outcome.error;
      item.status = 'failed';
    } else {
      item.output = outcome.output;
      item.status = 'completed';
    }
    this.event(outcome.error !== undefined ? 'response.mcp_call.failed' : 'response.mcp_call.completed', { item_id: item.id, output_index: index });
    this.event('response.output_item.done', { output_index: index, item: structuredClone(item) });
  }

  /** The MCP calls of the last generation that the server is to run (taken once). */
  takeMcpCalls(): Array<{ index: number; item: Extract<OutputItem, { type: 'mcp_call' }> }> {
    const taken = this.mcpCalls.map((index) => ({ index, item: this.output[index] as Extract<OutputItem, { type: 'mcp_call' }> }));
    this.mcpCalls = [];
    return taken;
  }

  /** Closes the open item at the end of the generation and returns the output (an empty message when nothing was said). */
  finish(reason: FinishReason): OutputItem[] {
    if (this.output.length === 0) this.openText('message');
    this.closeText(reason === 'length' && !this.output.some((item) => item.type !== 'message' && item.type !== 'reasoning' && item.type !== 'mcp_list_tools') ? 'incomplete' : 'completed');
    return this.output;
  }

  /** A collected (non-streamed) result, in the order the deltas come (`finish` ends the output). */
  replay(result: ChatResult): void {
    if (result.reasoning) this.push({ type: 'reasoning', text: result.reasoning });
    if (result.content) this.push({ type: 'content', text: result.content });
    if (result.logprobs) this.push({ type: 'logprobs', part: 'answer', tokens: result.logprobs });
    result.toolCalls.forEach((call, index) => this.push({ type: 'tool_call', index, call }));
  }

  private openText(kind: OpenText['kind']): OpenText {
    if (this.open?.kind === kind) return this.open;
    this.closeText('completed');
    const open: OpenText = { kind, index: this.output.length, id: itemId(kind === 'reasoning' ? 'rs' : 'msg'), text: '' };
    const item: OutputItem =
      kind === 'reasoning'
        ? { id: open.id, type: 'reasoning', summary: [], content: [], status: 'in_progress' }
        : { id: open.id, type: 'message', role: 'assistant', status: 'in_progress', content: [] };
    this.output.push(item);
    this.event('response.output_item.added', { output_index: open.index, item: structuredClone(item) });
    this.event('response.content_part.added', { item_id: open.id, output_index: open.index, content_index: 0, part: this.part(kind, '') });
    this.open = open;
    return open;
  }

  private part(kind: OpenText['kind'], text: string, logprobs: OutputLogprob[] = []) {
    return kind === 'reasoning' ? { type: 'reasoning_text' as const, text } : { type: 'output_text' as const, text, annotations: [] as [], logprobs };
  }

  private closeText(status: ItemStatus): void {
    const open = this.open;
    if (!open) return;
    this.open = null;
    const where = { item_id: open.id, output_index: open.index, content_index: 0 };
    if (open.kind === 'reasoning') this.event('response.reasoning_text.done', { ...where, text: open.text });
    else this.event('response.output_text.done', { ...where, text: open.text, logprobs: this.logprobs });
    const part = this.part(open.kind, open.text, open.kind === 'message' ? this.logprobs : []);
    this.event('response.content_part.done', { ...where, part });
    const item = this.output[open.index]!;
    if (item.type === 'reasoning') {
      item.content = [part as { type: 'reasoning_text'; text: string }];
      // Sealed once the reasoning is whole: output_item.done carries it, as the reference tells clients to take it from there.
      if (this.options.sealReasoning) item.encrypted_content = this.options.sealReasoning(open.text);
      item.status = status;
    } else if (item.type === 'message') {
      item.content = [part as Extract<OutputItem, { type: 'message' }>['content'][0]];
      item.status = status;
    }
    this.event('response.output_item.done', { output_index: open.index, item: structuredClone(item) });
  }

  private toolCall(call: ChatToolCall): void {
    const index = this.output.length;
    const identity = this.options.identify(call.name) ?? { kind: 'function' as const, name: call.name };
    const namespace = identity.namespace ? { namespace: identity.namespace } : {};
    if (identity.kind === 'mcp') {
      if (!identity.approval) {
        this.mcpCalls.push(this.mcpCall(identity.namespace!, identity.name, call.arguments));
        return;
      }
      // Waits for the client: an mcp_approval_request ends the response (its id is what mcp_approval_response answers).
      const item: OutputItem = { id: itemId('mcpr'), type: 'mcp_approval_request', server_label: identity.namespace!, name: identity.name, arguments: call.arguments };
      this.output.push(item);
      this.event('response.output_item.added', { output_index: index, item });
    } else if (identity.kind === 'tool_search') {
      const id = itemId('tsc');
      this.output.push({ id, type: 'tool_search_call', call_id: call.id, arguments: parseArguments(call.arguments), execution: 'client', status: 'completed' });
      this.event('response.output_item.added', { output_index: index, item: { ...this.output[index]!, status: 'in_progress' } });
    } else if (identity.kind === 'custom') {
      const id = itemId('ctc');
      const input = customInput(call.arguments);
      this.output.push({ id, type: 'custom_tool_call', call_id: call.id, name: identity.name, ...namespace, input, status: 'completed' });
      this.event('response.output_item.added', { output_index: index, item: { id, type: 'custom_tool_call', call_id: call.id, name: identity.name, ...namespace, input: '', status: 'in_progress' } });
      this.event('response.custom_tool_call_input.delta', { item_id: id, output_index: index, delta: input });
      this.event('response.custom_tool_call_input.done', { item_id: id, output_index: index, input });
    } else {
      const id = itemId('fc');
      this.output.push({ id, type: 'function_call', call_id: call.id, name: identity.name, ...namespace, arguments: call.arguments, status: 'completed' });
      this.event('response.output_item.added', { output_index: index, item: { id, type: 'function_call', call_id: call.id, name: identity.name, ...namespace, arguments: '', status: 'in_progress' } });
      this.event('response.function_call_arguments.delta', { item_id: id, output_index: index, delta: call.arguments });
      this.event('response.function_call_arguments.done', { item_id: id, output_index: index, name: identity.name, arguments: call.arguments });
    }
    this.event('response.output_item.done', { output_index: index, item: structuredClone(this.output[index]) });
  }
}

function parseArguments(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return {};
  }
}

/** A custom tool's free-text input, from the engine's JSON call `{"input": "…"}`. */
function customInput(args: string): string {
  try {
    const parsed: unknown = JSON.parse(args);
    if (parsed !== null && typeof parsed === 'object' && typeof (parsed as { input?: unknown }).input === 'string') return (parsed as { input: string }).input;
  } catch {
    // Not JSON: the text as generated is the input.
  }
  return args;
}
