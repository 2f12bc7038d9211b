import type { ChatTool } from '../core/tasks/chat.js';

/**
 * Deferred tools (Anthropic's `defer_loading`, the Responses API's tool
 * search) are not in the tool list a prompt begins with: the conversation
 * brings each one in where a tool search found it, as the providers expand a
 * tool reference in place. This is that expansion: the definitions as text,
 * in the JSON shape chat templates list tools in, placed in the tool result
 * (or item) that named them, so the prompt before it stays what it was.
 */
export function toolDefinitionsText(tools: readonly ChatTool[]): string {
  const lines = tools.map((tool) =>
    JSON.stringify({ type: 'function', function: { name: tool.name, ...(tool.description ? { description: tool.description } : {}), parameters: tool.parameters ?? { type: 'object', properties: {} } } }),
  );
  return `Tools now available to call:\n${lines.join('\n')}`;
}
