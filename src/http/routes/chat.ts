import { randomUUID } from 'node:crypto';
import { Router } from 'express';
import { chatCompletionFrom, chatLogprobs, parseChatCompletion, SYSTEM_FINGERPRINT, toChatRequest, usageOf, type ChatCompletion, type ChatCompletionChunk } from '../../api/chat.js';
import { chat, collectChat, type ChatDelta } from '../../core/tasks/chat.js';
import { requestSignal, type ServerContext } from '../context.js';
import { openAIError, toLserveError } from '../errors.js';
import { SseWriter } from '../sse.js';
import { prepareChatMedia } from '../chat-media.js';

/** POST /v1/chat/completions (OpenAI), streamed as SSE or not. */

export function chatRouter({ engine, shutdown, inputs }: ServerContext): Router {
  const router = Router();

  router.post('/v1/chat/completions', async (req, res) => {
    const body = parseChatCompletion(req.body);
    const request = toChatRequest(body);
    const signal = requestSignal(req, res, shutdown);
    await prepareChatMedia(engine, request, inputs, signal);
    const id = `chatcmpl-${randomUUID()}`;
    const created = Math.floor(Date.now() / 1000);

    if (!body.stream) {
      const result = await collectChat(chat(engine, request, signal));
      // The installed model that answered, as OpenAI answers an alias with the model's own name.
      const response: ChatCompletion = chatCompletionFrom(result, result.model ?? body.model, id, created);
      res.json(response);
      return;
    }

    const includeUsage = body.stream_options?.include_usage === true;
    let model = body.model;
    const chunk = (delta: ChatCompletionChunk['choices'][0]['delta'], finish: ChatCompletionChunk['choices'][0]['finish_reason'] = null): ChatCompletionChunk => ({
      id,
      object: 'chat.completion.chunk',
      created,
      model,
      system_fingerprint: SYSTEM_FINGERPRINT,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      ...(includeUsage ? { usage: null } : {}),
    });
    const deltas = chat(engine, request, signal)[Symbol.asyncIterator]();
    // The first delta comes after lookup, load, validation and queueing: until then, failures are plain HTTP errors.
    let next = await deltas.next();
    if (!next.done && next.value.type === 'start') model = next.value.model ?? model;
    const sse = new SseWriter(res);
    sse.data(chunk({ role: 'assistant', content: '' }));
    let sawToolCall = false;
    try {
      for (; !next.done; next = await deltas.next()) {
        const delta: ChatDelta = next.value;
        if (delta.type === 'start') continue;
        if (delta.type === 'content') sse.data(chunk({ content: delta.text }));
        else if (delta.type === 'reasoning') sse.data(chunk({ reasoning_content: delta.text }));
        else if (delta.type === 'tool_call') {
          sawToolCall = true;
          const { call } = delta;
          sse.data(chunk({ tool_calls: [{ index: delta.index, id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } }] }));
        } else if (delta.type === 'logprobs') {
          // Scored once the answer is generated: its tokens' log-probabilities come in one chunk before the last.
          sse.data({ ...chunk({}), choices: [{ index: 0, delta: {}, logprobs: chatLogprobs(delta.tokens), finish_reason: null }] });
        } else if (delta.type === 'done') {
          sse.data(chunk({}, sawToolCall ? 'tool_calls' : delta.finishReason));
          if (includeUsage) sse.data({ ...chunk({}), choices: [], usage: usageOf(delta.usage) });
        }
      }
      sse.raw('data: [DONE]\n\n');
    } catch (error) {
      // Headers are out: report in-band, the way OpenAI-compatible servers do.
      if (!signal.aborted) sse.data(openAIError(toLserveError(error)));
    } finally {
      sse.end();
    }
  });

  return router;
}
