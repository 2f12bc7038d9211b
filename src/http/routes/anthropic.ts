import { randomUUID } from 'node:crypto';
import { Router, type Request, type Response } from 'express';
import { applyContextEdits, type AppliedEdit, type TokenCounter } from '../../api/anthropic/context-edits.js';
import { parseCountTokens, parseMessages } from '../../api/anthropic/schema.js';
import { countTokensRequest, toChatRequest, type ReasoningSeal } from '../../api/anthropic/to-chat.js';
import { MessageAssembler, stopReason, usageOf, type MessageResponse } from '../../api/anthropic/wire.js';
import type { Engine } from '../../core/engine.js';
import { LserveError } from '../../core/errors.js';
import type { Sealer } from '../../core/sealed.js';
import { chat, chatTokenCounts, collectChat, countChatTokens, prefillChat, type ChatDelta } from '../../core/tasks/chat.js';
import { prepareChatMedia } from '../chat-media.js';
import { requestSignal, type ServerContext } from '../context.js';
import { anthropicError, toLserveError } from '../errors.js';
import { OmittedToolsReporter } from '../omitted-tools.js';
import { SseWriter } from '../sse.js';

/**
 * The Anthropic Messages API over the same chat task, at every path the
 * official SDKs may use (base URL `…/v1/anthropic` or the server root):
 * POST …/messages and …/messages/count_tokens. Query strings (`?beta=true`)
 * and `anthropic-beta` / `anthropic-version` headers are accepted as they
 * come: the request fields say what is wanted (api/anthropic/fields.ts).
 */

export const ANTHROPIC_PATHS = ['/v1/anthropic/messages', '/v1/anthropic/v1/messages', '/v1/messages'];

/** What the thinking signatures this server hands out are sealed for. */
const THINKING = 'anthropic-thinking';

/** A streamed answer says something at least this often (Anthropic's ping) while the prompt is evaluated. */
const PING_MS = 10_000;

/** Errors the chat task names in chat completions' fields; a client of this route sent these. */
const OWN_FIELDS: Record<string, string> = { response_format: 'output_config.format', 'response_format.json_schema.schema': 'output_config.format.schema' };

function inOwnFields(error: unknown): unknown {
  const param = error instanceof LserveError && error.param !== null ? OWN_FIELDS[error.param] : undefined;
  if (!param || !(error instanceof LserveError)) return error;
  return new LserveError(error.status, error.type, error.message.replaceAll(error.param!, param), { code: error.code, param, cause: error });
}

function sealFor(sealer: Sealer): ReasoningSeal & { sign: (text: string) => string } {
  return { open: (signature) => sealer.open(THINKING, signature), sign: (text) => sealer.seal(THINKING, text) };
}

function counterFor(engine: Engine, model: string): TokenCounter {
  return { prompt: (request) => countChatTokens(engine, request), texts: (texts) => chatTokenCounts(engine, model, texts) };
}

export function anthropicRouter({ engine, shutdown, inputs, sealer, options }: ServerContext): Router {
  const router = Router();
  const seal = sealFor(sealer);
  const omittedTools = new OmittedToolsReporter(options.strictTools === true, options.log);

  const messages = async (req: Request, res: Response) => {
    const body = parseMessages(req.body);
    const translated = toChatRequest(body, seal);
    omittedTools.report(req, res, translated.omitted);
    const signal = requestSignal(req, res, shutdown);
    await prepareChatMedia(engine, translated.request, inputs, signal);
    const edits = body.context_management?.edits;
    const { request, applied } = edits?.length ? await applyContextEdits(translated.request, edits, counterFor(engine, body.model)) : { request: translated.request, applied: [] };
    const id = `msg_${randomUUID().replaceAll('-', '')}`;
    const contextManagement = edits?.length ? { context_management: { applied_edits: applied } } : {};
    // The installed model that answered, whatever name the request used (an alias, a name apps hard-code).
    const message = (fields: Pick<MessageResponse, 'content' | 'stop_reason' | 'stop_sequence' | 'usage' | 'model'>): MessageResponse => ({
      id,
      type: 'message',
      role: 'assistant',
      stop_details: null,
      container: null,
      ...fields,
      ...contextManagement,
    });

    if (body.max_tokens === 0) {
      // Cache warming: the prompt is evaluated into the sequence a request continuing it will take; nothing is generated.
      const promptTokens = await countChatTokens(engine, request);
      await prefillChat(engine, request, signal);
      res.json(message({ content: [], stop_reason: 'max_tokens', stop_sequence: null, usage: usageOf(promptTokens, 0), model: (await engine.resolve(body.model, ['chat'])).id }));
      return;
    }

    const assemblerOptions = { display: translated.display, sign: seal.sign };
    if (!body.stream) {
      const result = await collectChat(chat(engine, request, signal)).catch((error: unknown) => {
        throw inOwnFields(error);
      });
      const assembler = new MessageAssembler(assemblerOptions);
      const content = assembler.replay(result);
      const { promptTokens, cachedPromptTokens } = result.usage;
      res.json(
        message({
          model: result.model ?? body.model,
          content,
          stop_reason: stopReason(result.finishReason, result.stopSequence, assembler.calledTools),
          stop_sequence: result.stopSequence,
          usage: usageOf(promptTokens, cachedPromptTokens, result.usage),
        }),
      );
      return;
    }
    await stream(res, chat(engine, request, signal), signal, { ...assemblerOptions, message, applied: edits?.length ? applied : undefined });
  };

  const countTokens = async (req: Request, res: Response) => {
    const body = parseCountTokens(req.body);
    const request = countTokensRequest(body, seal);
    // Images count as the embeddings the model would read: decoded as for a message.
    await prepareChatMedia(engine, request, inputs, requestSignal(req, res, shutdown));
    const edits = body.context_management?.edits;
    if (!edits?.length) {
      res.json({ input_tokens: await countChatTokens(engine, request) });
      return;
    }
    const edited = await applyContextEdits(request, edits, counterFor(engine, body.model));
    const inputTokens = await countChatTokens(engine, edited.request);
    res.json({ input_tokens: inputTokens, context_management: { original_input_tokens: edited.originalInputTokens ?? inputTokens } });
  };

  for (const path of ANTHROPIC_PATHS) {
    router.post(path, messages);
    router.post(`${path}/count_tokens`, countTokens);
  }
  return router;
}

/** A streamed answer: Anthropic's event sequence, with a ping while nothing else is said. */
async function stream(
  res: Response,
  deltas: AsyncIterable<ChatDelta>,
  signal: AbortSignal,
  options: {
    display: 'summarized' | 'omitted';
    sign: (text: string) => string;
    message: (fields: Pick<MessageResponse, 'content' | 'stop_reason' | 'stop_sequence' | 'usage' | 'model'>) => MessageResponse;
    applied?: AppliedEdit[];
  },
): Promise<void> {
  const iterator = deltas[Symbol.asyncIterator]();
  // Until the request holds a sequence, failures are plain HTTP errors in Anthropic's shape.
  let next = await iterator.next().catch((error: unknown) => {
    throw inOwnFields(error);
  });
  const sse = new SseWriter(res);
  sse.heartbeat(PING_MS, () => sse.event('ping', { type: 'ping' }));
  const assembler = new MessageAssembler({ display: options.display, sign: options.sign, emit: (event) => sse.event(event.type, event) });
  let prompt = { tokens: 0, cached: 0 };
  try {
    for (; !next.done; next = await iterator.next()) {
      const delta = next.value;
      if (delta.type === 'start') {
        prompt = { tokens: delta.promptTokens, cached: delta.cachedPromptTokens };
        const start = options.message({ content: [], stop_reason: null, stop_sequence: null, usage: usageOf(prompt.tokens, prompt.cached), model: delta.model ?? '' });
        delete start.context_management;
        sse.event('message_start', { type: 'message_start', message: start });
      } else if (delta.type === 'done') {
        assembler.finish();
        sse.event('message_delta', {
          type: 'message_delta',
          delta: { stop_reason: stopReason(delta.finishReason, delta.stopSequence, assembler.calledTools), stop_sequence: delta.stopSequence, stop_details: null, container: null },
          usage: usageOf(prompt.tokens, prompt.cached, delta.usage),
          ...(options.applied ? { context_management: { applied_edits: options.applied } } : {}),
        });
        sse.event('message_stop', { type: 'message_stop' });
      } else {
        assembler.push(delta);
      }
    }
  } catch (error) {
    if (!signal.aborted) sse.event('error', anthropicError(toLserveError(inOwnFields(error))));
  } finally {
    sse.end();
  }
}
