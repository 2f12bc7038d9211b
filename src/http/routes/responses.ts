import { Router } from 'express';
import { z } from 'zod';
import { inputItems, parseResponseCreate, toChatRequest, type ResponseCreateBody } from '../../api/responses.js';
import { itemId, storedInputItem, type ResponseItem } from '../../api/responses-items.js';
import { ResponseAssembler, responseObject, usageOf, type ResponseObject } from '../../api/responses-output.js';
import { parseRequest } from '../../api/validate.js';
import type { Engine } from '../../core/engine.js';
import { LserveError, NotFoundError } from '../../core/errors.js';
import type { ResponseRepository } from '../../core/state/store.js';
import { chat, collectChat, type ChatDelta, type ChatMessage, type ChatRequest, type ChatUsage, type FinishReason } from '../../core/tasks/chat.js';
import { requestSignal, type ServerContext } from '../context.js';
import { toLserveError } from '../errors.js';
import { SseWriter } from '../sse.js';
import { prepareChatMedia } from '../chat-media.js';

/**
 * The Responses API (OpenAI's): POST /v1/responses over the chat task, and
 * the stored responses (`store`, default true) that `previous_response_id`
 * continues: GET and DELETE /v1/responses/{id}, GET …/{id}/input_items.
 */

const notFound = (id: string, param: string) => new NotFoundError(`No stored response with id '${id}'.`, { param });

async function storedOrThrow(store: ResponseRepository, id: string) {
  const entry = await store.get(id);
  if (!entry) throw notFound(id, 'response_id');
  return entry;
}

/** The conversation so far, when the request continues one. */
async function previousItems(store: ResponseRepository, id: string | null | undefined): Promise<ResponseItem[]> {
  if (!id) return [];
  const items = await store.conversation(id);
  if (!items) throw notFound(id, 'previous_response_id');
  // Items this route stored: they passed the input schema or are its own output items.
  return items as ResponseItem[];
}

/**
 * With truncation 'auto', a conversation too long for the context loses its
 * oldest turns (a user message and what answered it) until it fits, as
 * OpenAI does; system messages and the last user turn always stay.
 */
function withoutOldestTurn(messages: ChatMessage[]): ChatMessage[] | undefined {
  const first = messages.findIndex((m) => m.role !== 'system');
  const nextUser = messages.findIndex((m, i) => i > first && m.role === 'user');
  if (first < 0 || nextUser < 0) return undefined;
  return [...messages.slice(0, first), ...messages.slice(nextUser)];
}

/** The chat task names chat completions' fields in its errors; this route's client sent these. */
const OWN_FIELDS: Record<string, string> = { messages: 'input', 'response_format.json_schema.schema': 'text.format.schema', response_format: 'text.format' };

function inOwnFields(error: unknown): unknown {
  const param = error instanceof LserveError && error.param !== null ? OWN_FIELDS[error.param] : undefined;
  if (!param || !(error instanceof LserveError)) return error;
  const message = error.message.startsWith(`${error.param} `) ? `${param}${error.message.slice(error.param!.length)}` : error.message;
  return new LserveError(error.status, error.type, message, { code: error.code, param, cause: error });
}

/** Starts the generation: failures until its first delta (lookup, load, context size) are plain HTTP errors. */
async function begin(engine: Engine, request: ChatRequest, truncate: boolean, signal: AbortSignal) {
  for (let messages = request.messages; ; ) {
    const deltas = chat(engine, { ...request, messages }, signal)[Symbol.asyncIterator]();
    try {
      return { deltas, first: await deltas.next() };
    } catch (error) {
      const shorter = truncate ? withoutOldestTurn(messages) : undefined;
      if (!shorter || !(error instanceof LserveError && error.code === 'context_length_exceeded')) throw inOwnFields(error);
      messages = shorter;
    }
  }
}

async function* resume(first: IteratorResult<ChatDelta>, deltas: AsyncIterator<ChatDelta>): AsyncIterable<ChatDelta> {
  try {
    for (let next = first; !next.done; next = await deltas.next()) yield next.value;
  } finally {
    await deltas.return?.();
  }
}

const inputItemsQuery = z.object({
  after: z.string().min(1).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
  order: z.enum(['asc', 'desc']).default('desc'),
});

export function responsesRouter({ engine, shutdown, state, inputs }: ServerContext): Router {
  const router = Router();
  const { responses } = state;

  router.post('/v1/responses', async (req, res) => {
    const body = parseResponseCreate(req.body);
    const request = toChatRequest(body, await previousItems(responses, body.previous_response_id));
    const customTools = new Set((body.tools ?? []).filter((t) => t.type === 'custom').map((t) => t.name));
    const signal = requestSignal(req, res, shutdown);
    await prepareChatMedia(engine, request, inputs, signal);
    const id = itemId('resp');
    const createdAt = Math.floor(Date.now() / 1000);
    const { deltas, first } = await begin(engine, request, body.truncation === 'auto', signal);
    const input = inputItems(body).map(storedInputItem);
    const final = async (assembler: ResponseAssembler, reason: FinishReason, usage: ChatUsage): Promise<ResponseObject> => {
      const output = assembler.finish(reason);
      // A turn that made tool calls is complete (as chat's finish_reason is then 'tool_calls'), whatever stopped it.
      const cut = reason === 'length' && !output.some((item) => item.type === 'function_call' || item.type === 'custom_tool_call');
      const response = responseObject(body, id, createdAt, { status: cut ? 'incomplete' : 'completed', output, usage: usageOf(usage) });
      // A generation the client left was cut short by that: not an answer to keep.
      if (!signal.aborted) await save(responses, body, response, input);
      return response;
    };

    if (!body.stream) {
      const result = await collectChat(resume(first, deltas));
      const assembler = new ResponseAssembler(customTools);
      assembler.replay(result);
      res.json(await final(assembler, result.finishReason, result.usage));
      return;
    }

    const sse = new SseWriter(res);
    const assembler = new ResponseAssembler(customTools, (event) => sse.event(event.type, event));
    const snapshot = responseObject(body, id, createdAt, { status: 'in_progress' });
    assembler.event('response.created', { response: snapshot });
    assembler.event('response.in_progress', { response: snapshot });
    try {
      for await (const delta of resume(first, deltas)) {
        if (delta.type !== 'done') assembler.push(delta);
        else {
          const response = await final(assembler, delta.finishReason, delta.usage);
          assembler.event(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
        }
      }
    } catch (error) {
      // Headers are out: the failure is reported in-band, then the response as failed.
      if (!signal.aborted) {
        const failure = toLserveError(error);
        assembler.event('error', { code: failure.code, message: failure.message, param: failure.param });
        const failed = responseObject(body, id, createdAt, { status: 'failed', output: assembler.output, error: { code: 'server_error', message: failure.message } });
        assembler.event('response.failed', { response: failed });
      }
    } finally {
      sse.end();
    }
  });

  router.get('/v1/responses/:id', async (req, res) => {
    res.json((await storedOrThrow(responses, req.params.id)).response);
  });

  router.delete('/v1/responses/:id', async (req, res) => {
    if (!(await responses.delete(req.params.id))) throw notFound(req.params.id, 'response_id');
    res.json({ id: req.params.id, object: 'response', deleted: true });
  });

  router.get('/v1/responses/:id/input_items', async (req, res) => {
    const query = parseRequest(inputItemsQuery, req.query);
    const page = await responses.inputItems(req.params.id, query);
    if (!page) throw notFound(req.params.id, 'response_id');
    res.json({ object: 'list', data: page.data, first_id: page.firstId, last_id: page.lastId, has_more: page.hasMore });
  });

  return router;
}

async function save(store: ResponseRepository, body: ResponseCreateBody, response: ResponseObject, input: unknown[]): Promise<void> {
  if (body.store === false) return;
  await store.put({ id: response.id, model: body.model, createdAt: response.created_at, previousResponseId: body.previous_response_id ?? null, input, output: response.output, response });
}
