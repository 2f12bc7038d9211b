/**
 * The chat panel's two streams, read into one shape: chat completions'
 * chunks (POST /v1/chat/completions) and the Responses API's events
 * (POST /v1/responses), so the panel draws a turn the same way from either.
 */
import { readSse } from './api.js';

/** An answer token with its probability and the likeliest alternatives (logprobs: the API's log-probabilities). */
export interface TokenProbability {
  token: string;
  logprob: number;
  top_logprobs: Array<{ token: string; logprob: number }>;
}

/** A piece of the answer as it arrives. */
export interface Piece {
  reasoning?: string;
  content?: string;
  /** The answer's tokens scored (asked with logprobs): they come once the answer is generated. */
  logprobs?: TokenProbability[];
}

/** How the turn ended, filled in as the stream tells it. */
export interface Outcome {
  finish?: string;
  usage?: { prompt: number; completion: number };
  /** The stored response (Responses API only): what the next turn continues. */
  responseId?: string;
}

interface Chunk {
  choices?: Array<{ delta?: { content?: string | null; reasoning_content?: string | null }; logprobs?: { content?: TokenProbability[] | null } | null; finish_reason?: string | null }>;
  usage?: { prompt_tokens: number; completion_tokens: number } | null;
  error?: { message: string };
}

export async function* completionPieces(res: Response, outcome: Outcome): AsyncGenerator<Piece> {
  for await (const message of readSse(res)) {
    if (message.data === '[DONE]') break;
    const chunk = JSON.parse(message.data) as Chunk;
    if (chunk.error) throw new Error(chunk.error.message);
    if (chunk.usage) outcome.usage = { prompt: chunk.usage.prompt_tokens, completion: chunk.usage.completion_tokens };
    const choice = chunk.choices?.[0];
    if (!choice) continue;
    outcome.finish = choice.finish_reason ?? outcome.finish;
    yield { reasoning: choice.delta?.reasoning_content ?? undefined, content: choice.delta?.content ?? undefined, logprobs: choice.logprobs?.content ?? undefined };
  }
}

interface ResponseEvent {
  type: string;
  delta?: string;
  logprobs?: TokenProbability[];
  message?: string;
  response?: { id: string; status: string; usage: { input_tokens: number; output_tokens: number } | null; error: { message: string } | null };
}

export async function* responsePieces(res: Response, outcome: Outcome): AsyncGenerator<Piece> {
  for await (const message of readSse(res)) {
    const event = JSON.parse(message.data) as ResponseEvent;
    const response = event.response;
    if (event.type === 'response.reasoning_text.delta') yield { reasoning: event.delta };
    else if (event.type === 'response.output_text.delta') yield { content: event.delta };
    else if (event.type === 'response.output_text.done' && event.logprobs?.length) yield { logprobs: event.logprobs };
    else if (event.type === 'error') throw new Error(event.message ?? 'the response failed');
    else if (event.type === 'response.failed') throw new Error(response?.error?.message ?? 'the response failed');
    else if ((event.type === 'response.completed' || event.type === 'response.incomplete') && response) {
      outcome.responseId = response.id;
      // Incomplete means the output-token limit was reached: chat completions' 'length'.
      outcome.finish = response.status === 'incomplete' ? 'length' : 'stop';
      if (response.usage) outcome.usage = { prompt: response.usage.input_tokens, completion: response.usage.output_tokens };
    }
  }
}
