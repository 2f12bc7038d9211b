import { Router, type Response } from 'express';
import {
  applyTemplateSchema,
  detokenizeSchema,
  infillSchema,
  llamaTimings,
  pickFields,
  tokenizeSchema,
  toInfillRequest,
  toTemplateRequest,
  type InfillChunk,
  type InfillResult,
} from '../../api/llamacpp.js';
import { parseRequest } from '../../api/validate.js';
import type { Engine } from '../../core/engine.js';
import type { InstalledModel } from '../../core/store.js';
import type { ChatDelta, ChatUsage, FinishReason } from '../../core/tasks/chat.js';
import { infill } from '../../core/tasks/infill.js';
import { detokenizeWith, renderChatPrompt, tokenizeWith, tokenPieces } from '../../core/tasks/tokenize.js';
import { requestSignal, type ServerContext } from '../context.js';
import { openAIError, toLserveError } from '../errors.js';
import { GenerationMarks } from '../generation-marks.js';
import { SseWriter } from '../sse.js';

/**
 * llama.cpp's server utility routes (api/llamacpp.ts): POST /tokenize,
 * /detokenize, /apply-template and /infill, on the chat model a body names
 * in `model` or else the default chat model. Errors are OpenAI's shape, as
 * every route outside /api/* answers them; /infill streams as llama.cpp's
 * /completion does, `data: {…}` lines with no `[DONE]`.
 */
export function llamacppRouter({ engine, shutdown }: ServerContext): Router {
  const router = Router();

  router.post('/tokenize', async (req, res) => {
    const body = parseRequest(tokenizeSchema, req.body);
    const installed = await chatModel(engine, body.model);
    const ids = await tokenizeWith(engine, installed, body.content, { addSpecial: body.add_special, parseSpecial: body.parse_special });
    res.json({ tokens: body.with_pieces ? await tokenPieces(engine, installed, ids) : ids });
  });

  router.post('/detokenize', async (req, res) => {
    const body = parseRequest(detokenizeSchema, req.body);
    const installed = await chatModel(engine, body.model);
    res.json({ content: await detokenizeWith(engine, installed, body.tokens) });
  });

  router.post('/apply-template', async (req, res) => {
    const body = parseRequest(applyTemplateSchema, req.body);
    const installed = await chatModel(engine, body.model);
    res.json({ prompt: await renderChatPrompt(engine, toTemplateRequest(body, installed.id)) });
  });

  router.post('/infill', async (req, res) => {
    const started = performance.now();
    const body = parseRequest(infillSchema, req.body);
    const installed = await chatModel(engine, body.model);
    const request = toInfillRequest(body, installed.id);
    const signal = requestSignal(req, res, shutdown);
    let prompt = '';
    const deltas = infill(engine, request, signal, (text) => (prompt = text));
    const settings = {
      n_predict: request.maxTokens ?? -1,
      temperature: request.temperature ?? null,
      top_k: request.topK ?? null,
      top_p: request.topP ?? null,
      min_p: request.minP ?? null,
      seed: request.seed ?? null,
      stop: request.stop ?? [],
      stream: body.stream,
    };
    const result = (gathered: Gathered, marks: GenerationMarks, content: string): InfillResult => {
      const usage = gathered.usage;
      const promptTokens = usage?.promptTokens ?? 0;
      const cached = usage?.cachedPromptTokens ?? 0;
      const predicted = usage?.completionTokens ?? 0;
      return {
        index: 0,
        content,
        tokens: [],
        id_slot: 0,
        stop: true,
        model: installed.id,
        tokens_predicted: predicted,
        tokens_evaluated: promptTokens,
        generation_settings: settings,
        prompt,
        has_new_line: gathered.content.includes('\n'),
        truncated: false,
        stop_type: stopType(gathered.finishReason, gathered.stopSequence),
        stopping_word: gathered.stopSequence ?? '',
        tokens_cached: cached,
        timings: llamaTimings(promptTokens, cached, marks.firstToken - marks.held, predicted, marks.ended - marks.firstToken),
      };
    };
    await answer(res, body.stream, started, deltas, signal, {
      piece: (text, gathered) => pickFields({ index: 0, content: text, tokens: [], stop: false, id_slot: 0, tokens_predicted: gathered.pieces, tokens_evaluated: gathered.promptTokens } satisfies InfillChunk, body.response_fields),
      last: (gathered, marks) => pickFields(result(gathered, marks, ''), body.response_fields),
      whole: (gathered, marks) => pickFields(result(gathered, marks, gathered.content), body.response_fields),
    });
  });

  return router;
}

/** The chat model a body names, or the default chat model when it names none. */
async function chatModel(engine: Engine, name: string | null | undefined): Promise<InstalledModel> {
  return engine.resolve(name ?? (await engine.defaultModel('chat')), ['chat']);
}

function stopType(finish: FinishReason, stopSequence: string | null): InfillResult['stop_type'] {
  if (finish === 'length') return 'limit';
  return stopSequence !== null ? 'word' : 'eos';
}

interface Gathered {
  content: string;
  /** Pieces of text streamed so far (a piece is a token, or the few tokens of one character). */
  pieces: number;
  promptTokens: number;
  usage?: ChatUsage;
  finishReason: FinishReason;
  stopSequence: string | null;
}

/**
 * Runs the deltas and answers: with `stream`, a `data:` line per piece from
 * the first delta on and a last one with the counts and timings; otherwise
 * one object at the end. A failure before the first delta is an ordinary
 * error answer; after it, a last `data:` line with the error.
 */
async function answer(
  res: Response,
  stream: boolean,
  started: number,
  deltas: AsyncIterable<ChatDelta>,
  signal: AbortSignal,
  shapes: { piece(text: string, gathered: Gathered): object; last(gathered: Gathered, marks: GenerationMarks): object; whole(gathered: Gathered, marks: GenerationMarks): object },
): Promise<void> {
  const marks = new GenerationMarks(started);
  const gathered: Gathered = { content: '', pieces: 0, promptTokens: 0, finishReason: 'stop', stopSequence: null };
  const iterator = deltas[Symbol.asyncIterator]();
  let next = await iterator.next();
  const sse = stream ? new SseWriter(res) : undefined;
  try {
    for (; !next.done; next = await iterator.next()) {
      const delta = next.value;
      marks.see(delta);
      if (delta.type === 'start') {
        gathered.promptTokens = delta.promptTokens;
      } else if (delta.type === 'done') {
        gathered.usage = delta.usage;
        gathered.finishReason = delta.finishReason;
        gathered.stopSequence = delta.stopSequence;
      } else if (delta.type === 'content') {
        gathered.content += delta.text;
        gathered.pieces++;
        sse?.data(shapes.piece(delta.text, gathered));
      }
    }
    marks.finish();
    if (sse) sse.data(shapes.last(gathered, marks));
    else res.json(shapes.whole(gathered, marks));
  } catch (error) {
    if (!sse) throw error;
    if (!signal.aborted) sse.data(openAIError(toLserveError(error)));
  } finally {
    sse?.end();
  }
}
