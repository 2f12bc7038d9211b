import { Router, type Response } from 'express';
import { doneReason, ollamaChatSchema, ollamaToolCall, timingsOf, toChatRequest, type OllamaChatChunk, type OllamaChatResponse, type OllamaTimings } from '../../api/ollama/chat.js';
import { isCompletion, ollamaGenerateSchema, toCompletionRequest, toGenerateChatRequest, type OllamaGenerateChunk, type OllamaGenerateResponse } from '../../api/ollama/generate.js';
import { parseRequest } from '../../api/validate.js';
import type { Engine } from '../../core/engine.js';
import { chat, type ChatDelta, type ChatUsage, type FinishReason } from '../../core/tasks/chat.js';
import { complete } from '../../core/tasks/complete.js';
import { detokenizeWith, tokenizeWith } from '../../core/tasks/tokenize.js';
import { prepareChatMedia } from '../chat-media.js';
import { requestSignal, type ServerContext } from '../context.js';
import { toLserveError } from '../errors.js';
import { GenerationMarks } from '../generation-marks.js';
import { NdjsonWriter } from '../ndjson.js';
import { resolveOllamaModel } from '../ollama-model.js';

/**
 * POST /api/chat and /api/generate, Ollama's generation routes, on the same
 * chat and completion tasks as /v1/chat/completions: one object, or NDJSON
 * (the default) with one object per piece as it is generated and a last
 * `done: true` object with the measured timings. Failures before the first
 * piece are plain `{"error"}` answers with their status; after it, a last
 * `{"error"}` line.
 */
export function ollamaChatRouter({ engine, shutdown, inputs }: ServerContext): Router {
  const router = Router();

  router.post('/api/chat', async (req, res) => {
    const started = performance.now();
    const body = parseRequest(ollamaChatSchema, req.body);
    const installed = await resolveOllamaModel(engine, body.model, ['chat']);
    const stamp = () => ({ model: body.model, created_at: new Date().toISOString() });
    if (body.messages.length === 0) {
      const reason = await loadOrUnload(engine, installed.id, body.keep_alive);
      res.json({ ...stamp(), message: { role: 'assistant', content: '' }, done: true, done_reason: reason } satisfies OllamaChatResponse);
      return;
    }
    if (body.options?.num_ctx) await engine.setContextSize(installed.id, body.options.num_ctx);
    const request = toChatRequest(body, installed.id);
    const signal = requestSignal(req, res, shutdown);
    await prepareChatMedia(engine, request, inputs, signal);
    await answer<OllamaChatChunk>(res, body.stream, started, chat(engine, request, signal), signal, {
      piece: (delta) => {
        const message = { role: 'assistant' as const, content: '' };
        if (delta.type === 'content') return { ...stamp(), message: { ...message, content: delta.text }, done: false };
        if (delta.type === 'reasoning') return { ...stamp(), message: { ...message, thinking: delta.text }, done: false };
        if (delta.type === 'tool_call') return { ...stamp(), message: { ...message, tool_calls: [ollamaToolCall(delta.call, delta.index)] }, done: false };
        return undefined;
      },
      whole: (result, timings) => ({
        ...stamp(),
        message: {
          role: 'assistant',
          content: result.content,
          ...(result.reasoning ? { thinking: result.reasoning } : {}),
          ...(result.toolCalls.length ? { tool_calls: result.toolCalls.map((call, i) => ollamaToolCall(call.call, i)) } : {}),
        },
        done: true,
        done_reason: doneReason(result.finishReason, result.toolCalls.length > 0),
        ...timings,
      }),
      last: (result, timings) => ({ ...stamp(), message: { role: 'assistant', content: '' }, done: true, done_reason: doneReason(result.finishReason, result.toolCalls.length > 0), ...timings }),
    });
  });

  router.post('/api/generate', async (req, res) => {
    const started = performance.now();
    const body = parseRequest(ollamaGenerateSchema, req.body);
    const installed = await resolveOllamaModel(engine, body.model, ['chat']);
    const stamp = () => ({ model: body.model, created_at: new Date().toISOString() });
    if (body.prompt === '' && !body.suffix && !body.images?.length) {
      const reason = await loadOrUnload(engine, installed.id, body.keep_alive);
      res.json({ ...stamp(), response: '', done: true, done_reason: reason } satisfies OllamaGenerateResponse);
      return;
    }
    if (body.options?.num_ctx) await engine.setContextSize(installed.id, body.options.num_ctx);
    const signal = requestSignal(req, res, shutdown);
    // The text of an earlier answer's `context` comes before this prompt.
    const earlier = body.context?.length ? await detokenizeWith(engine, installed, body.context, 'context') : '';
    let deltas: AsyncIterable<ChatDelta>;
    if (isCompletion(body)) {
      deltas = complete(engine, toCompletionRequest(body, installed.id, earlier), signal);
    } else {
      const request = toGenerateChatRequest(body, installed.id, earlier);
      await prepareChatMedia(engine, request, inputs, signal);
      deltas = chat(engine, request, signal);
    }
    // What `context` returns: this exchange's text after the earlier one's, as tokens.
    const context = async (response: string) => tokenizeWith(engine, installed, earlier + body.prompt + response, { addSpecial: false, parseSpecial: true });
    await answer<OllamaGenerateChunk>(res, body.stream, started, deltas, signal, {
      piece: (delta) => {
        if (delta.type === 'content') return { ...stamp(), response: delta.text, done: false };
        if (delta.type === 'reasoning') return { ...stamp(), response: '', thinking: delta.text, done: false };
        return undefined;
      },
      whole: async (result, timings) => ({
        ...stamp(),
        response: result.content,
        ...(result.reasoning ? { thinking: result.reasoning } : {}),
        done: true,
        done_reason: doneReason(result.finishReason),
        context: await context(result.content),
        ...timings,
      }),
      last: async (result, timings) => ({ ...stamp(), response: '', done: true, done_reason: doneReason(result.finishReason), context: await context(result.content), ...timings }),
    });
  });

  return router;
}

/** An empty request: load the model and keep it for `keepAliveMs` (Ollama's preload), or with 0 unload it. */
async function loadOrUnload(engine: Engine, id: string, keepAliveMs: number | undefined): Promise<'load' | 'unload'> {
  if (keepAliveMs === 0) {
    await engine.manager.unload(id);
    return 'unload';
  }
  const lease = await engine.acquire(id, ['chat'], { keepAliveMs });
  lease.release();
  return 'load';
}

/** What one answer gathered, for the single-object form. */
interface Gathered {
  content: string;
  reasoning: string;
  toolCalls: Array<{ call: Extract<ChatDelta, { type: 'tool_call' }>['call'] }>;
  finishReason: FinishReason;
}

interface Shapes<T> {
  /** The streamed object for one delta (undefined: nothing to send). */
  piece(delta: ChatDelta): T | undefined;
  /** The one object of `stream: false`. */
  whole(result: Gathered, timings: OllamaTimings): T | Promise<T>;
  /** The last streamed object (after every piece of `result` went out). */
  last(result: Gathered, timings: OllamaTimings): T | Promise<T>;
}

/**
 * Runs the deltas and answers: with `stream`, an NDJSON line per piece from
 * the first delta on; otherwise one object at the end. The timings are
 * measured here: from `started` to the model held (`start`: the load and
 * any queue), to the first piece out (the prompt's evaluation), to the end.
 */
async function answer<T>(res: Response, stream: boolean, started: number, deltas: AsyncIterable<ChatDelta>, signal: AbortSignal, shapes: Shapes<T>): Promise<void> {
  const marks = new GenerationMarks(started);
  const gathered: Gathered = { content: '', reasoning: '', toolCalls: [], finishReason: 'stop' };
  let usage: ChatUsage | undefined;
  const iterator = deltas[Symbol.asyncIterator]();
  // Until the first delta (lookup, load, queue), a failure is an ordinary error answer.
  let next = await iterator.next();
  const out = stream ? new NdjsonWriter(res) : undefined;
  try {
    for (; !next.done; next = await iterator.next()) {
      const delta = next.value;
      marks.see(delta);
      if (delta.type === 'done') {
        usage = delta.usage;
        gathered.finishReason = delta.finishReason;
      } else if (delta.type !== 'start' && delta.type !== 'logprobs') {
        if (delta.type === 'content') gathered.content += delta.text;
        else if (delta.type === 'reasoning') gathered.reasoning += delta.text;
        else gathered.toolCalls.push({ call: delta.call });
      }
      const piece = out && shapes.piece(delta);
      if (piece) out.line(piece);
    }
    marks.finish();
    const timings = timingsOf(usage, marks);
    if (out) out.line(await shapes.last(gathered, timings));
    else res.json(await shapes.whole(gathered, timings));
  } catch (error) {
    if (!out) throw error;
    if (!signal.aborted) out.line({ error: toLserveError(error).message });
  } finally {
    out?.end();
  }
}
