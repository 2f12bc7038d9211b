import type { Engine } from '../engine.js';
import { UnsupportedError } from '../errors.js';
import type { ChatDelta, ChatModel, CompletionRequest } from './chat.js';

/**
 * The completion task: a chat model continues a prompt as it is, with no
 * chat template (CompletionRequest, in chat.ts beside the chat model that
 * runs it). The deltas are the chat task's: `start`, the `content` as it is
 * generated, `done`.
 */
export async function* complete(engine: Engine, request: CompletionRequest, signal: AbortSignal): AsyncIterable<ChatDelta> {
  const lease = await engine.acquire<ChatModel>(request.model, ['chat'], { keepAliveMs: request.keepAliveMs });
  const model = lease.installed.id;
  try {
    if (!lease.model.complete) throw new UnsupportedError(`Model '${model}' runs on a backend that only chats: it cannot continue a raw prompt.`, { param: 'raw' });
    for await (const delta of lease.model.complete({ ...request, model }, signal)) {
      if (delta.type === 'done') engine.report({ type: 'chat', model, promptTokens: delta.usage.promptTokens, completionTokens: delta.usage.completionTokens, decodeTokensPerSecond: null });
      yield delta.type === 'start' ? { ...delta, model } : delta;
    }
  } catch (error) {
    engine.reportRejection(model, error);
    throw error;
  } finally {
    lease.release();
  }
}

