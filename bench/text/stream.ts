/**
 * Streams one OpenAI chat completion (our server or llama.cpp's llama-server)
 * and times it on the client: time to first token, and decode rate from the
 * first to the last token.
 */

export interface StreamTiming {
  /** ms from sending the request to the first generated token arriving. */
  ttftMs: number;
  /** Tokens generated (the server's usage count). */
  tokens: number;
  /** Prompt tokens evaluated (the server's usage count; 0 when it sends none). */
  promptTokens: number;
  /** ms from the first token to the last. */
  decodeMs: number;
  /** ms from sending the request to the end of the stream. */
  totalMs: number;
}

/** Tokens per second after the first token (excludes prompt processing). */
export function decodeRate(t: StreamTiming): number {
  return t.tokens > 1 && t.decodeMs > 0 ? ((t.tokens - 1) * 1000) / t.decodeMs : 0;
}

interface Chunk {
  choices?: Array<{ delta?: { content?: string | null; reasoning_content?: string | null } }>;
  usage?: { completion_tokens?: number; prompt_tokens?: number } | null;
}

/** A streamed answer: its timing and the answer's text (what a client sends back as the assistant turn). */
export interface StreamResult extends StreamTiming {
  text: string;
}

/** The `data:` payloads of a server-sent event stream, parsed as JSON (`[DONE]` left out). */
async function* sseData(res: Response): AsyncIterable<unknown> {
  if (!res.ok || !res.body) throw new Error(`stream failed: HTTP ${res.status} ${await res.text()}`);
  let buffer = '';
  const decoder = new TextDecoder();
  for await (const bytes of res.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').find((l) => l.startsWith('data: '))?.slice(6);
      if (data && data !== '[DONE]') yield JSON.parse(data);
    }
  }
}

/** Times the generated text as it arrives: the first and last piece, and how many. */
class Clock {
  readonly start = performance.now();
  first = 0;
  last = 0;
  pieces = 0;
  text = '';

  piece(content: string, reasoning = ''): void {
    if (!content && !reasoning) return;
    const now = performance.now();
    if (!this.first) this.first = now;
    this.last = now;
    this.pieces++;
    this.text += content;
  }

  result(tokens: number | undefined, promptTokens: number): StreamResult {
    const done = performance.now();
    return { ttftMs: this.first - this.start, tokens: tokens ?? this.pieces, promptTokens, decodeMs: this.last - this.first, totalMs: done - this.start, text: this.text };
  }
}

export async function streamChat(baseUrl: string, body: Record<string, unknown>): Promise<StreamResult> {
  const clock = new Clock();
  const res = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  let usage: number | undefined;
  let promptTokens = 0;
  for await (const data of sseData(res)) {
    const chunk = data as Chunk;
    const delta = chunk.choices?.[0]?.delta;
    clock.piece(delta?.content ?? '', delta?.reasoning_content ?? '');
    if (chunk.usage?.completion_tokens !== undefined) usage = chunk.usage.completion_tokens;
    if (chunk.usage?.prompt_tokens !== undefined) promptTokens = chunk.usage.prompt_tokens;
  }
  return clock.result(usage, promptTokens);
}

interface ResponseEvent {
  type: string;
  delta?: string;
  response?: { id: string; usage?: { input_tokens: number; input_tokens_details: { cached_tokens: number }; output_tokens: number } | null };
}

/** Streams one `POST /v1/responses`; the first text is the first output_text or reasoning_text delta. */
export async function streamResponse(baseUrl: string, body: Record<string, unknown>): Promise<StreamResult & { id: string; cachedTokens: number }> {
  const clock = new Clock();
  const res = await fetch(`${baseUrl}/v1/responses`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }) });
  let final: ResponseEvent['response'];
  for await (const data of sseData(res)) {
    const event = data as ResponseEvent;
    if (event.type === 'response.output_text.delta') clock.piece(event.delta ?? '');
    else if (event.type === 'response.reasoning_text.delta') clock.piece('', event.delta ?? '');
    else if (event.type === 'response.completed' || event.type === 'response.incomplete') final = event.response;
    else if (event.type === 'error' || event.type === 'response.failed') throw new Error(`response failed: ${JSON.stringify(event)}`);
  }
  if (!final) throw new Error('response stream ended without a final response');
  return { ...clock.result(final.usage?.output_tokens, final.usage?.input_tokens ?? 0), id: final.id, cachedTokens: final.usage?.input_tokens_details.cached_tokens ?? 0 };
}

/** Runs `streams` requests at once; aggregate tokens/s is all tokens over the wall time. */
export async function concurrentStreams(baseUrl: string, body: Record<string, unknown>, streams: number): Promise<{ aggregate: number; perStream: number; tokens: number }> {
  const start = performance.now();
  const runs = await Promise.all(Array.from({ length: streams }, () => streamChat(baseUrl, body)));
  const wall = performance.now() - start;
  const tokens = runs.reduce((s, r) => s + r.tokens, 0);
  return { aggregate: (tokens * 1000) / wall, perStream: runs.reduce((s, r) => s + decodeRate(r), 0) / streams, tokens };
}
