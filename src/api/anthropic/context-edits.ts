import type { ChatMessage, ChatRequest } from '../../core/tasks/chat.js';
import type { ContextManagement } from './schema.js';

/**
 * Anthropic's context editing (`context_management.edits`): what a client
 * asks the server to drop from a long conversation before the model reads
 * it, while the client keeps the whole history. Applied in the order given,
 * each reported with what it really saved (`cleared_input_tokens`: the
 * prompt's tokens before the edit less after, as the model's template
 * renders it).
 *
 * - clear_thinking_20251015: the reasoning of all but the last `keep`
 *   assistant turns that have some (default 1; `all` keeps everything).
 * - clear_tool_uses_20250919: once `trigger` is reached (default 100 000
 *   input tokens), every tool result but the last `keep` (default 3) and
 *   those of `exclude_tools` is replaced by a placeholder, their calls'
 *   inputs too where `clear_tool_inputs` says so; nothing is cleared when
 *   that would free fewer than `clear_at_least` tokens.
 */

export type AppliedEdit =
  | { type: 'clear_tool_uses_20250919'; cleared_tool_uses: number; cleared_input_tokens: number }
  | { type: 'clear_thinking_20251015'; cleared_thinking_turns: number; cleared_input_tokens: number };

export interface TokenCounter {
  /** The prompt's tokens, as the model renders it. */
  prompt(request: ChatRequest): Promise<number>;
  /** Each text's tokens. */
  texts(texts: readonly string[]): Promise<number[]>;
}

export const CLEARED_TOOL_RESULT = '[tool result cleared to save context]';

const DEFAULT_TRIGGER_TOKENS = 100_000;
const DEFAULT_KEEP_TOOL_USES = 3;

/** The edits lserve applies (compaction is refused by the schema). */
type Edit = Exclude<NonNullable<NonNullable<ContextManagement>['edits']>[number], { type: 'compact_20260112' }>;

export interface EditedRequest {
  request: ChatRequest;
  applied: AppliedEdit[];
  /** The prompt's tokens before any edit (count_tokens reports it), when it was counted. */
  originalInputTokens?: number;
}

export async function applyContextEdits(request: ChatRequest, edits: ReadonlyArray<Edit | { type: 'compact_20260112' }>, count: TokenCounter): Promise<EditedRequest> {
  const applied: AppliedEdit[] = [];
  let current = request;
  let tokens: number | undefined;
  let original: number | undefined;
  const promptTokens = async () => {
    tokens ??= await count.prompt(current);
    original ??= tokens;
    return tokens;
  };
  for (const edit of edits) {
    if (edit.type === 'compact_20260112') continue;
    const edited = edit.type === 'clear_thinking_20251015' ? clearThinking(current.messages, edit) : await clearToolUses(current.messages, edit, promptTokens, count);
    if (!edited) continue;
    const before = await promptTokens();
    current = { ...current, messages: edited.messages };
    tokens = await count.prompt(current);
    const cleared = Math.max(0, before - tokens);
    applied.push(
      edit.type === 'clear_thinking_20251015'
        ? { type: edit.type, cleared_thinking_turns: edited.cleared, cleared_input_tokens: cleared }
        : { type: edit.type, cleared_tool_uses: edited.cleared, cleared_input_tokens: cleared },
    );
  }
  return { request: current, applied, ...(original !== undefined ? { originalInputTokens: original } : {}) };
}

function clearThinking(messages: readonly ChatMessage[], edit: Extract<Edit, { type: 'clear_thinking_20251015' }>): { messages: ChatMessage[]; cleared: number } | undefined {
  const keep = edit.keep ?? { type: 'thinking_turns' as const, value: 1 };
  if (keep === 'all' || keep.type === 'all') return undefined;
  const withReasoning = messages.flatMap((m, i) => (m.role === 'assistant' && m.reasoning ? [i] : []));
  const clear = new Set(withReasoning.slice(0, Math.max(0, withReasoning.length - keep.value)));
  if (clear.size === 0) return undefined;
  return { messages: messages.map((m, i) => (clear.has(i) ? { ...m, reasoning: undefined } : m)), cleared: clear.size };
}

async function clearToolUses(
  messages: readonly ChatMessage[],
  edit: Extract<Edit, { type: 'clear_tool_uses_20250919' }>,
  promptTokens: () => Promise<number>,
  count: TokenCounter,
): Promise<{ messages: ChatMessage[]; cleared: number } | undefined> {
  const calls = new Map(messages.flatMap((m) => (m.toolCalls ?? []).map((call) => [call.id, call.name] as const)));
  const results = messages.flatMap((m, i) => (m.role === 'tool' && m.content !== CLEARED_TOOL_RESULT ? [i] : []));
  const trigger = edit.trigger ?? { type: 'input_tokens' as const, value: DEFAULT_TRIGGER_TOKENS };
  const reached = trigger.type === 'tool_uses' ? calls.size >= trigger.value : (await promptTokens()) >= trigger.value;
  if (!reached) return undefined;
  const keep = edit.keep?.value ?? DEFAULT_KEEP_TOOL_USES;
  const excluded = new Set(edit.exclude_tools ?? []);
  const clear = results.slice(0, Math.max(0, results.length - keep)).filter((i) => !excluded.has(calls.get(messages[i]!.toolCallId ?? '') ?? ''));
  if (clear.length === 0) return undefined;
  if (edit.clear_at_least) {
    const sizes = await count.texts(clear.map((i) => messages[i]!.content));
    if (sizes.reduce((a, b) => a + b, 0) < edit.clear_at_least.value) return undefined;
  }
  const clearedIds = new Set(clear.map((i) => messages[i]!.toolCallId));
  const inputs = edit.clear_tool_inputs;
  const clearsInput = (name: string) => inputs === true || (Array.isArray(inputs) && inputs.includes(name));
  const edited = messages.map((m, i): ChatMessage => {
    if (clear.includes(i)) return { ...m, content: CLEARED_TOOL_RESULT };
    if (!m.toolCalls?.some((c) => clearedIds.has(c.id) && clearsInput(c.name))) return m;
    return { ...m, toolCalls: m.toolCalls.map((c) => (clearedIds.has(c.id) && clearsInput(c.name) ? { ...c, arguments: '{}' } : c)) };
  });
  return { messages: edited, cleared: clear.length };
}
