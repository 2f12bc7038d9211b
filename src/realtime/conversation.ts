import { RealtimeEventError } from '../api/realtime/errors.js';
import { newId } from '../api/realtime/ids.js';
import type { ConversationItem, ItemReference } from '../api/realtime/items.js';
import type { ChatMessage } from '../core/tasks/chat.js';

/**
 * A realtime session's conversation: its items in order, and what the chat
 * model reads of them. The model reads text: a user's audio through its
 * transcript, an assistant's through what was said (cut at what the user
 * heard once the client truncates it).
 */

export type Item = ConversationItem & { id: string };

/** Items a conversation keeps; the oldest go first beyond it (OpenAI truncates old turns too). */
export const MAX_ITEMS = 1000;
/** The most recent items a response reads: a voice conversation's context stays small and fast. */
export const CONTEXT_ITEMS = 64;

export class Conversation {
  private items: Item[] = [];
  /** Changes with every item added or deleted. */
  private changes = 0;

  constructor(readonly id = newId('conv')) {}

  /** Counts the items added and deleted: equal counts, the same items. */
  get version(): number {
    return this.changes;
  }

  /** A copy (same id, same item objects) to add to without changing this one: a turn's answer written before the turn is in. */
  fork(): Conversation {
    const copy = new Conversation(this.id);
    copy.items = [...this.items];
    copy.changes = this.changes;
    return copy;
  }

  get size(): number {
    return this.items.length;
  }

  get last(): Item | undefined {
    return this.items.at(-1);
  }

  get(id: string, param = 'item_id'): Item {
    const item = this.items.find((i) => i.id === id);
    if (!item) throw new RealtimeEventError('invalid_value', `No item '${id}' in the conversation.`, { param });
    return item;
  }

  has(id: string): boolean {
    return this.items.some((i) => i.id === id);
  }

  /** Adds an item after `previousItemId` ('root': first; undefined: last); returns the id of the item before it (null: none). */
  add(item: Item, previousItemId?: string): string | null {
    if (this.has(item.id)) throw new RealtimeEventError('invalid_value', `An item '${item.id}' is already in the conversation.`, { param: 'item.id' });
    let at = this.items.length;
    if (previousItemId === 'root') at = 0;
    else if (previousItemId !== undefined) at = this.items.indexOf(this.get(previousItemId, 'previous_item_id')) + 1;
    this.items.splice(at, 0, item);
    this.changes++;
    if (this.items.length > MAX_ITEMS) this.items.splice(0, this.items.length - MAX_ITEMS);
    return at > 0 ? (this.items[at - 1]?.id ?? null) : null;
  }

  delete(id: string): void {
    this.items.splice(this.items.indexOf(this.get(id)), 1);
    this.changes++;
  }

  /** The items a response reads: its own input (references resolved) or the conversation's latest. */
  context(input?: ReadonlyArray<ConversationItem | ItemReference>): Item[] {
    if (!input) return this.items.slice(-CONTEXT_ITEMS);
    return input.map((entry, index) => (entry.type === 'item_reference' ? this.get(entry.id, `response.input.${index}.id`) : { ...entry, id: entry.id ?? newId('item') }));
  }
}

/**
 * The chat messages of a response: the instructions, then each item as text.
 * A function's output goes right after the call it answers (and the outputs
 * before it), as chat templates expect, even when the response that made the
 * call said more afterwards. A call the client never answered is left out:
 * a template cannot render a call without its result, and the client chose
 * not to run it.
 */
export function chatMessages(instructions: string, items: readonly Item[]): ChatMessage[] {
  const messages: ChatMessage[] = instructions ? [{ role: 'system', content: instructions }] : [];
  for (const item of items) {
    if (item.type === 'function_call') {
      const call = { id: item.callId, name: item.name, arguments: item.arguments };
      const previous = messages.at(-1);
      // Calls made together are one assistant turn, as the chat API carries them.
      if (previous?.role === 'assistant' && previous.toolCalls) previous.toolCalls.push(call);
      else messages.push({ role: 'assistant', content: '', toolCalls: [call] });
    } else if (item.type === 'function_call_output') {
      const output: ChatMessage = { role: 'tool', content: item.output, toolCallId: item.callId };
      let at = messages.findLastIndex((m) => m.toolCalls?.some((c) => c.id === item.callId));
      if (at < 0) {
        messages.push(output);
        continue;
      }
      while (messages[at + 1]?.role === 'tool') at++;
      messages.splice(at + 1, 0, output);
    } else {
      const content = item.content
        .map((part) => ('text' in part ? part.text : (part.transcript ?? '')))
        .filter((text) => text !== '')
        .join('\n');
      if (content || item.role !== 'user') messages.push({ role: item.role, content });
    }
  }
  const answered = new Set(messages.flatMap((m) => (m.toolCallId ? [m.toolCallId] : [])));
  return messages.flatMap((m) => {
    if (!m.toolCalls) return [m];
    const toolCalls = m.toolCalls.filter((c) => answered.has(c.id));
    if (toolCalls.length === 0) return m.content ? [{ role: m.role, content: m.content }] : [];
    return [{ ...m, toolCalls }];
  });
}
