import { randomUUID } from 'node:crypto';
import { Router } from 'express';
import { SYSTEM_FINGERPRINT } from '../../api/chat.js';
import {
  joinLogprobs,
  legacyLogprobs,
  parseCompletion,
  promptsOf,
  toCompletionRequest,
  type Completion,
  type CompletionBody,
  type CompletionChoice,
  type CompletionLogprobs,
} from '../../api/completions.js';
import type { Engine } from '../../core/engine.js';
import type { ChatDelta, CompletionRequest, FinishReason, TokenLogprob } from '../../core/tasks/chat.js';
import { complete } from '../../core/tasks/complete.js';
import { detokenizeWith } from '../../core/tasks/tokenize.js';
import { requestSignal, type ServerContext } from '../context.js';
import { openAIError, toLserveError } from '../errors.js';
import { SseWriter } from '../sse.js';

/**
 * POST /v1/completions (OpenAI's legacy text completions) on the completion
 * task: every prompt of the request and every candidate of each run at once,
 * on the chat model's sequences (prompts scored with `echo` one after
 * another, below). Streamed as SSE chunks of each choice's text (`index`
 * telling them apart), or one object.
 */
export function completionsRouter({ engine, shutdown }: ServerContext): Router {
  const router = Router();

  router.post('/v1/completions', async (req, res) => {
    const body = parseCompletion(req.body);
    const installed = await engine.resolve(body.model, ['chat']);
    const signal = requestSignal(req, res, shutdown);
    const id = `cmpl-${randomUUID()}`;
    const created = Math.floor(Date.now() / 1000);
    const n = body.n ?? 1;
    const candidates = body.best_of ?? n;
    const prompts = await Promise.all(promptsOf(body).map(async (p) => (typeof p === 'string' ? { text: p } : { text: await detokenizeWith(engine, installed, p, 'prompt'), ids: p })));
    // best_of above n ranks candidates by their mean token log-probability: they are scored whether or not the client asked.
    const rank = candidates > n;
    const requestFor = (prompt: { text: string; ids?: number[] }, candidate: number): CompletionRequest => ({
      ...toCompletionRequest({ ...body, model: installed.id } as CompletionBody, prompt.text),
      ...(prompt.ids ? { promptTokens: prompt.ids } : {}),
      // Several candidates of one seed would all be the same.
      ...(body.seed != null && candidate > 0 ? { seed: body.seed + candidate } : {}),
      ...(rank && body.logprobs == null ? { logprobs: 0 } : {}),
    });

    if (!body.stream) {
      const jobsOf = (prompt: { text: string; ids?: number[] }) => Array.from({ length: candidates }, (_, c) => () => run(engine, requestFor(prompt, c), signal));
      let runs: Run[];
      if (body.echo && body.logprobs != null) {
        // Prompts scored position by position go one after another, each prompt's first candidate
        // before the others: prompts that share a context (a multiple-choice item's continuations)
        // then evaluate it once (families/llama/scored-prefixes.ts).
        runs = [];
        for (const prompt of prompts) {
          const [first, ...rest] = jobsOf(prompt);
          runs.push(await first!(), ...(await Promise.all(rest.map((job) => job()))));
        }
      } else {
        runs = await Promise.all(prompts.flatMap((prompt) => jobsOf(prompt).map((job) => job())));
      }
      const choices: CompletionChoice[] = [];
      prompts.forEach((prompt, p) => {
        const mine = runs.slice(p * candidates, (p + 1) * candidates);
        const kept = rank ? [...mine].sort((a, b) => meanLogprob(b.answer) - meanLogprob(a.answer)).slice(0, n) : mine;
        kept.forEach((r, j) => choices.push(choiceOf(body, prompt.text, r, p * n + j)));
      });
      const promptTokens = prompts.reduce((sum, _, p) => sum + (runs[p * candidates]?.promptTokens ?? 0), 0);
      const completionTokens = runs.reduce((sum, r) => sum + r.completionTokens, 0);
      const answer: Completion = {
        id,
        object: 'text_completion',
        created,
        model: installed.id,
        system_fingerprint: SYSTEM_FINGERPRINT,
        choices,
        usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens },
      };
      res.json(answer);
      return;
    }

    const chunk = (choice: CompletionChoice): Completion => ({ id, object: 'text_completion', created, model: installed.id, system_fingerprint: SYSTEM_FINGERPRINT, choices: [choice] });
    // Each choice's deltas, all started before the first byte goes out, so a bad request or model is still a plain error.
    const streams = prompts.flatMap((prompt, p) => Array.from({ length: n }, (_, j) => ({ prompt, index: p * n + j, deltas: complete(engine, requestFor(prompt, j), signal)[Symbol.asyncIterator]() })));
    const firsts = await Promise.all(streams.map((s) => s.deltas.next()));
    const sse = new SseWriter(res);
    let promptTokens = 0;
    let completionTokens = 0;
    try {
      await Promise.all(
        streams.map(async (s, k) => {
          if (body.echo) sse.data(chunk({ text: s.prompt.text, index: s.index, logprobs: null, finish_reason: null }));
          let written = body.echo ? s.prompt.text.length : 0;
          for (let next = firsts[k]!; !next.done; next = await s.deltas.next()) {
            const delta = next.value;
            if (delta.type === 'start') {
              if (s.index % n === 0) promptTokens += delta.promptTokens;
            } else if (delta.type === 'content') {
              sse.data(chunk({ text: delta.text, index: s.index, logprobs: null, finish_reason: null }));
            } else if (delta.type === 'logprobs' && body.logprobs != null) {
              const offset = delta.part === 'prompt' ? 0 : written;
              sse.data(chunk({ text: '', index: s.index, logprobs: legacyLogprobs(delta.tokens, offset), finish_reason: null }));
            } else if (delta.type === 'done') {
              completionTokens += delta.usage.completionTokens;
              sse.data(chunk({ text: '', index: s.index, logprobs: null, finish_reason: finishOf(delta.finishReason) }));
            }
            if (delta.type === 'content') written += delta.text.length;
          }
        }),
      );
      if (body.stream_options?.include_usage) {
        sse.data({ ...chunk({ text: '', index: 0, logprobs: null, finish_reason: null }), choices: [], usage: { prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens } });
      }
      sse.raw('data: [DONE]\n\n');
    } catch (error) {
      // Headers are out: report in-band, as OpenAI-compatible servers do.
      if (!signal.aborted) sse.data(openAIError(toLserveError(error)));
    } finally {
      sse.end();
    }
  });

  return router;
}

/** What one candidate came to. */
interface Run {
  text: string;
  prompt: TokenLogprob[];
  answer: TokenLogprob[];
  finishReason: FinishReason;
  promptTokens: number;
  completionTokens: number;
}

async function run(engine: Engine, request: CompletionRequest, signal: AbortSignal): Promise<Run> {
  const out: Run = { text: '', prompt: [], answer: [], finishReason: 'stop', promptTokens: 0, completionTokens: 0 };
  for await (const delta of complete(engine, request, signal) as AsyncIterable<ChatDelta>) {
    if (delta.type === 'start') out.promptTokens = delta.promptTokens;
    else if (delta.type === 'content') out.text += delta.text;
    else if (delta.type === 'logprobs') out[delta.part] = delta.tokens;
    else if (delta.type === 'done') {
      out.finishReason = delta.finishReason;
      out.completionTokens = delta.usage.completionTokens;
    }
  }
  return out;
}

function choiceOf(body: CompletionBody, promptText: string, r: Run, index: number): CompletionChoice {
  let logprobs: CompletionLogprobs | null = null;
  if (body.logprobs != null) {
    const answer = legacyLogprobs(r.answer, body.echo ? promptText.length : 0);
    logprobs = body.echo ? joinLogprobs([legacyLogprobs(r.prompt, 0), answer]) : answer;
  }
  return { text: (body.echo ? promptText : '') + r.text, index, logprobs, finish_reason: finishOf(r.finishReason) };
}

function finishOf(reason: FinishReason): 'stop' | 'length' {
  return reason === 'length' ? 'length' : 'stop';
}

function meanLogprob(tokens: readonly TokenLogprob[]): number {
  const values = tokens.map((t) => t.logprob ?? 0);
  return values.length ? values.reduce((a, b) => a + b, 0) / values.length : -Infinity;
}
