import { randomUUID } from 'node:crypto';
import { Router, type Request, type Response } from 'express';
import { parseMessages, toChatRequest, type ContentBlock, type MessageResponse, type StopReason } from '../../api/anthropic.js';
import { chat, collectChat, type FinishReason } from '../../core/tasks/chat.js';
import { requestSignal, type ServerContext } from '../context.js';
import { anthropicError, toLserveError } from '../errors.js';
import { SseWriter } from '../sse.js';
import { prepareChatMedia } from '../chat-media.js';

/**
 * The Anthropic Messages API over the same chat task, at every path the
 * official SDK may use: base URL `…/v1/anthropic` or the server root.
 */

export const ANTHROPIC_PATHS = ['/v1/anthropic/messages', '/v1/anthropic/v1/messages', '/v1/messages'];

function stopReason(reason: FinishReason, stopSequence: string | null): StopReason {
  if (reason === 'length') return 'max_tokens';
  return stopSequence ? 'stop_sequence' : 'end_turn';
}

export function anthropicRouter({ engine, shutdown, inputs }: ServerContext): Router {
  const router = Router();

  const handle = async (req: Request, res: Response) => {
    const body = parseMessages(req.body);
    const request = toChatRequest(body);
    const signal = requestSignal(req, res, shutdown);
    await prepareChatMedia(engine, request, inputs, signal);
    const id = `msg_${randomUUID().replaceAll('-', '')}`;

    if (!body.stream) {
      const result = await collectChat(chat(engine, request, signal));
      const content: ContentBlock[] = [];
      if (result.reasoning) content.push({ type: 'thinking', thinking: result.reasoning, signature: '' });
      content.push({ type: 'text', text: result.content });
      const response: MessageResponse = {
        id,
        type: 'message',
        role: 'assistant',
        content,
        model: body.model,
        stop_reason: stopReason(result.finishReason, result.stopSequence),
        stop_sequence: result.stopSequence,
        usage: { input_tokens: result.usage.promptTokens, output_tokens: result.usage.completionTokens },
      };
      res.json(response);
      return;
    }

    const deltas = chat(engine, request, signal)[Symbol.asyncIterator]();
    // Until the request holds a sequence, failures are plain HTTP errors in Anthropic's shape.
    let next = await deltas.next();
    const sse = new SseWriter(res);
    let index = -1;
    let open: 'text' | 'thinking' | null = null;
    const openBlock = (type: 'text' | 'thinking') => {
      if (open === type) return;
      if (open) sse.event('content_block_stop', { type: 'content_block_stop', index });
      open = type;
      index++;
      const block = type === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' };
      sse.event('content_block_start', { type: 'content_block_start', index, content_block: block });
    };
    try {
      for (; !next.done; next = await deltas.next()) {
        const delta = next.value;
        if (delta.type === 'start') {
          sse.event('message_start', {
            type: 'message_start',
            message: { id, type: 'message', role: 'assistant', content: [], model: body.model, stop_reason: null, stop_sequence: null, usage: { input_tokens: delta.promptTokens, output_tokens: 0 } },
          });
        } else if (delta.type === 'reasoning') {
          openBlock('thinking');
          sse.event('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: delta.text } });
        } else if (delta.type === 'content') {
          openBlock('text');
          sse.event('content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: delta.text } });
        } else if (delta.type === 'done') {
          // Clients expect a text block even for an empty answer.
          openBlock('text');
          sse.event('content_block_stop', { type: 'content_block_stop', index });
          sse.event('message_delta', {
            type: 'message_delta',
            delta: { stop_reason: stopReason(delta.finishReason, delta.stopSequence), stop_sequence: delta.stopSequence },
            usage: { output_tokens: delta.usage.completionTokens },
          });
          sse.event('message_stop', { type: 'message_stop' });
        }
      }
    } catch (error) {
      if (!signal.aborted) sse.event('error', anthropicError(toLserveError(error)));
    } finally {
      sse.end();
    }
  };

  for (const path of ANTHROPIC_PATHS) router.post(path, handle);
  return router;
}
