import { Router } from 'express';
import { z } from 'zod';
import { inputItems, parseResponseCreate, toChatRequest, type ResponseCreateBody } from '../../api/responses/request.js';
import { MAX_MCP_CALLS, RequestMcpServers } from '../mcp-tools.js';
import { itemId, storedInputItem, type ResponseItem } from '../../api/responses/items.js';
import { ResponseAssembler, responseObject, usageOf, type ResponseObject } from '../../api/responses/output.js';
import { OmittedToolsReporter } from '../omitted-tools.js';
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

/** What the reasoning in encrypted_content is sealed for. */
const REASONING = 'responses-reasoning';

/** A streamed response says something at least this often (an SSE comment) while the prompt is evaluated. */
const KEEPALIVE_MS = 10_000;

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

/** Items that are calls: a response that made one is complete, whatever stopped the generation; one the client must answer ends the tool loop. */
const CALL_ITEMS = new Set(['function_call', 'custom_tool_call', 'tool_search_call', 'mcp_call', 'mcp_approval_request']);

const limitMessage = (limit: number) => `Not run: this response reached its limit of ${limit} MCP tool calls.`;

const inputItemsQuery = z.object({
  after: z.string().min(1).optional(),
  limit: z.coerce.number().int().min(1).max(100).default(20),
  order: z.enum(['asc', 'desc']).default('desc'),
});

export function responsesRouter({ engine, shutdown, state, inputs, sealer, options, mcpServers }: ServerContext): Router {
  const router = Router();
  const { responses } = state;
  const omittedTools = new OmittedToolsReporter(options.strictTools === true, options.log);

  router.post('/v1/responses', async (req, res) => {
    const body = parseResponseCreate(req.body);
    const prefix = await previousItems(responses, body.previous_response_id);
    const input = inputItems(body);
    // Remote MCP servers: refused ones are 400s before any work (http/mcp-tools.ts).
    const mcp = await RequestMcpServers.prepare(mcpServers, body.tools ?? [], [...prefix, ...input], input);
    const openReasoning = (sealed: string) => sealer.open(REASONING, sealed);
    // Checked before any work; with MCP servers, tool_choice is checked once their tools are listed (nextRequest).
    let translated = toChatRequest(mcp.any ? { ...body, tool_choice: undefined } : body, prefix, openReasoning);
    omittedTools.report(req, res, translated.omitted);
    const signal = requestSignal(req, res, shutdown);
    const assembler = new ResponseAssembler({
      identify: (name) => translated.tools.byName.get(name)?.identity,
      sealReasoning: body.include?.includes('reasoning.encrypted_content') ? (text) => sealer.seal(REASONING, text) : undefined,
      hold: true,
    });
    try {
      await answer();
    } finally {
      await mcp.close();
    }

    async function answer() {
      // Listings and the calls the client approved come first in the output, and into the prompt.
      for (const { label, outcome } of await mcp.list(signal)) assembler.mcpListTools(label, outcome);
      const callLimit = Math.min(MAX_MCP_CALLS, body.max_tool_calls ?? MAX_MCP_CALLS);
      let calls = 0;
      for (const { request: asked, approve } of mcp.approvals) {
        const index = assembler.mcpCall(asked.server_label, asked.name, asked.arguments, asked.id);
        const outcome = !approve ? { error: 'The user declined this call.' } : calls++ < callLimit ? await mcp.call(asked.server_label, asked.name, asked.arguments, signal) : { error: limitMessage(callLimit) };
        assembler.mcpCallDone(index, outcome);
      }
      /** The request for the next generation: the conversation with this response's output so far. */
      const nextRequest = (round: number, used: number) => {
        if (mcp.any || round > 0) {
          // After a call the server ran, the model chooses freely (a forced tool would call again and again).
          const later = round > 0 ? { tool_choice: body.tool_choice === 'none' ? ('none' as const) : undefined } : {};
          const max = body.max_output_tokens == null ? {} : { max_output_tokens: Math.max(1, body.max_output_tokens - used) };
          translated = toChatRequest({ ...body, ...later, ...max, input: [...input, ...(assembler.output as ResponseItem[])] }, prefix, openReasoning, mcp.listings());
        }
        return translated.request;
      };
      const request = nextRequest(0, 0);
      await prepareChatMedia(engine, request, inputs, signal);
      const id = itemId('resp');
      const createdAt = Math.floor(Date.now() / 1000);
      let { deltas, first } = await begin(engine, request, body.truncation === 'auto', signal);
      // The response names the installed model that answered, whatever name the request used.
      const answered = { ...body, model: (!first.done && first.value.type === 'start' ? first.value.model : undefined) ?? body.model };
      const stored = input.map(storedInputItem);
      /** Where the output of the last generation begins. */
      let lastFrom = 0;
      const usage: ChatUsage = { promptTokens: 0, completionTokens: 0, cachedPromptTokens: 0, reasoningTokens: 0 };
      const final = async (reason: FinishReason): Promise<ResponseObject> => {
        const output = assembler.finish(reason);
        // A turn that made tool calls is complete (as chat's finish_reason is then 'tool_calls'), whatever stopped it.
        // (The last generation's: one that went on after an MCP call and was cut by the limit leaves the response incomplete.)
        const cut = reason === 'length' && !output.slice(lastFrom).some((item) => CALL_ITEMS.has(item.type));
        const response = responseObject(answered, id, createdAt, { status: cut ? 'incomplete' : 'completed', output, usage: usageOf(usage) });
        // A generation the client left was cut short by that: not an answer to keep.
        if (!signal.aborted) await save(responses, answered, response, stored);
        return response;
      };
      /** One generation's deltas into the output; its finish reason. */
      const generate = async (): Promise<FinishReason> => {
        let reason: FinishReason = 'stop';
        const add = (u: ChatUsage) => {
          usage.promptTokens += u.promptTokens;
          usage.completionTokens += u.completionTokens;
          usage.cachedPromptTokens += u.cachedPromptTokens;
          usage.reasoningTokens += u.reasoningTokens;
        };
        if (!body.stream) {
          const result = await collectChat(resume(first, deltas));
          assembler.replay(result);
          add(result.usage);
          reason = result.finishReason;
        } else {
          for await (const delta of resume(first, deltas)) {
            if (delta.type !== 'done') assembler.push(delta);
            else {
              add(delta.usage);
              reason = delta.finishReason;
            }
          }
        }
        return reason;
      };
      /** Generations until the model makes no MCP call the server runs (or the client must answer, or a limit is reached). */
      const loop = async (): Promise<FinishReason> => {
        for (let round = 0; ; round++) {
          if (round > 0) {
            const next = nextRequest(round, usage.completionTokens);
            await prepareChatMedia(engine, next, inputs, signal);
            ({ deltas, first } = await begin(engine, next, body.truncation === 'auto', signal));
          }
          const from = (lastFrom = assembler.output.length);
          const reason = await generate();
          const ran = assembler.takeMcpCalls();
          let limited = false;
          for (const { index, item } of ran) {
            limited ||= calls >= callLimit;
            assembler.mcpCallDone(index, limited ? { error: limitMessage(callLimit) } : (calls++, await mcp.call(item.server_label, item.name, item.arguments, signal)));
          }
          const waiting = assembler.output.slice(from).some((item) => CALL_ITEMS.has(item.type) && item.type !== 'mcp_call');
          const spent = body.max_output_tokens != null && usage.completionTokens >= body.max_output_tokens;
          if (ran.length === 0 || limited || waiting || spent) return reason;
          // The next generation's text is an item of its own.
          assembler.endGeneration();
        }
      };

      if (!body.stream) {
        res.json(await final(await loop()));
        return;
      }

      const sse = new SseWriter(res);
      sse.heartbeat(KEEPALIVE_MS);
      const snapshot = responseObject(answered, id, createdAt, { status: 'in_progress' });
      assembler.startStream((event) => sse.event(event.type, event), [
        ['response.created', { response: snapshot }],
        ['response.in_progress', { response: snapshot }],
      ]);
      try {
        const response = await final(await loop());
        assembler.event(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
      } catch (error) {
        // Headers are out: the failure is reported in-band, then the response as failed.
        if (!signal.aborted) {
          const failure = toLserveError(error);
          assembler.event('error', { code: failure.code, message: failure.message, param: failure.param });
          const failed = responseObject(answered, id, createdAt, { status: 'failed', output: assembler.output, error: { code: 'server_error', message: failure.message } });
          assembler.event('response.failed', { response: failed });
        }
      } finally {
        sse.end();
      }
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
