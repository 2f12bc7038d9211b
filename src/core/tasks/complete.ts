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

/** The token ids of `text` on a chat model (tokens of its vocabulary; special tokens read as such). */
export async function tokenizeText(engine: Engine, model: string, text: string): Promise<number[]> {
  return engine.withModel<ChatModel, number[]>(model, ['chat'], async (loaded, installed) => {
    if (!loaded.tokenize) throw new UnsupportedError(`Model '${installed.id}' runs on a backend that does not expose its tokens.`);
    return loaded.tokenize(text);
  });
}

/** The text of token ids on a chat model; an id outside its vocabulary is a 400. */
export async function detokenizeTokens(engine: Engine, model: string, tokens: readonly number[]): Promise<string> {
  if (tokens.length === 0) return '';
  return engine.withModel<ChatModel, string>(model, ['chat'], async (loaded, installed) => {
    if (!loaded.detokenize) throw new UnsupportedError(`Model '${installed.id}' runs on a backend that does not expose its tokens.`);
    return loaded.detokenize(tokens);
  });
}
