import type { ChatHistoryItem, ChatModelFunctions, ChatModelResponse, GbnfJsonSchema } from 'node-llama-cpp';
import { InvalidRequestError } from '../../core/errors.js';
import type { ChatMessage, ChatTool } from '../../core/tasks/chat.js';

/**
 * OpenAI-style messages → node-llama-cpp chat history. Tool calls and their
 * results become function-call items of the assistant turn (that is how the
 * chat wrapper renders `<tool_call>` / `<tool_response>` for the template);
 * consecutive assistant parts merge into one model turn. A final assistant
 * message is kept open so the model continues it (prefill).
 */
export function toChatHistory(messages: readonly ChatMessage[]): ChatHistoryItem[] {
  const history: ChatHistoryItem[] = [];
  const openCalls = new Map<string, { call: { result: unknown }; index: number }>();
  let lastModel: ChatModelResponse | undefined;
  const modelTurn = (): ChatModelResponse => {
    if (lastModel && history.at(-1) === lastModel) return lastModel;
    lastModel = { type: 'model', response: [] };
    history.push(lastModel);
    return lastModel;
  };

  messages.forEach((message, index) => {
    switch (message.role) {
      case 'system':
        history.push({ type: 'system', text: message.content });
        break;
      case 'user':
        history.push({ type: 'user', text: message.content });
        break;
      case 'assistant': {
        const turn = modelTurn();
        // Its reasoning, where the client gave it back: the template keeps what its model would see (the turn in progress).
        if (message.reasoning) turn.response.push({ type: 'segment', segmentType: 'thought', text: message.reasoning, ended: true });
        if (message.content) turn.response.push(message.content);
        // Each assistant message's calls are a chunk of their own, rendered with their results before the next
        // message's calls, as they were generated (one generation, then its results, then the next): without it
        // a template renders consecutive messages' calls as one parallel batch, and every new call changes
        // where the earlier results stand in the prompt, so the cache of it is lost each turn.
        (message.toolCalls ?? []).forEach((call, i) => {
          const item = { type: 'functionCall' as const, name: call.name, params: parseArguments(call.arguments, index), result: undefined as unknown, ...(i === 0 ? { startsNewChunk: true } : {}) };
          turn.response.push(item);
          openCalls.set(call.id, { call: item, index });
        });
        break;
      }
      case 'tool': {
        const open = message.toolCallId === undefined ? undefined : openCalls.get(message.toolCallId);
        if (!open) {
          throw new InvalidRequestError(`messages[${index}] is a tool result for '${message.toolCallId ?? ''}', which no earlier assistant message called.`, {
            param: `messages.${index}.tool_call_id`,
          });
        }
        // The client's text as it is: templates render a tool message's content unchanged.
        open.call.result = message.content;
        openCalls.delete(message.toolCallId!);
        break;
      }
    }
  });
  for (const { index } of openCalls.values()) {
    throw new InvalidRequestError(`messages[${index}] calls a tool whose result is missing: send a 'tool' message with its tool_call_id.`, {
      param: `messages.${index}.tool_calls`,
    });
  }
  // Generation continues an open model turn: after tool results (as node-llama-cpp's own
  // function-calling loop does) or after an assistant prefill; otherwise a new one.
  if (history.at(-1)?.type !== 'model') history.push({ type: 'model', response: [] });
  return history;
}

function parseArguments(text: string, index: number): unknown {
  try {
    return text.trim() === '' ? {} : JSON.parse(text);
  } catch {
    throw new InvalidRequestError(`messages[${index}].tool_calls: arguments must be a JSON string.`, { param: `messages.${index}.tool_calls` });
  }
}

export function toFunctions(tools: readonly ChatTool[]): ChatModelFunctions {
  const functions: Record<string, { description?: string; params?: GbnfJsonSchema }> = {};
  for (const tool of tools) {
    functions[tool.name] = {
      ...(tool.description ? { description: tool.description } : {}),
      ...(tool.parameters && Object.keys(tool.parameters).length > 0 ? { params: tool.parameters as GbnfJsonSchema } : {}),
    };
  }
  return functions;
}
