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

export async function streamChat(baseUrl: string, body: Record<string, unknown>): Promise<StreamTiming> {
  const start = performance.now();
  const res = await fetch(`${baseUrl}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok || !res.body) throw new Error(`chat stream failed: HTTP ${res.status} ${await res.text()}`);
  let first = 0;
  let last = 0;
  let deltas = 0;
  let usage: number | undefined;
  let promptTokens = 0;
  let buffer = '';
  const decoder = new TextDecoder();
  for await (const bytes of res.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').find((l) => l.startsWith('data: '))?.slice(6);
      if (!data || data === '[DONE]') continue;
      const chunk = JSON.parse(data) as Chunk;
      const delta = chunk.choices?.[0]?.delta;
      if (delta?.content || delta?.reasoning_content) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
        deltas++;
      }
      if (chunk.usage?.completion_tokens !== undefined) usage = chunk.usage.completion_tokens;
      if (chunk.usage?.prompt_tokens !== undefined) promptTokens = chunk.usage.prompt_tokens;
    }
  }
  const done = performance.now();
  return { ttftMs: first - start, tokens: usage ?? deltas, promptTokens, decodeMs: last - first, totalMs: done - start };
}

/** Runs `streams` requests at once; aggregate tokens/s is all tokens over the wall time. */
export async function concurrentStreams(baseUrl: string, body: Record<string, unknown>, streams: number): Promise<{ aggregate: number; perStream: number; tokens: number }> {
  const start = performance.now();
  const runs = await Promise.all(Array.from({ length: streams }, () => streamChat(baseUrl, body)));
  const wall = performance.now() - start;
  const tokens = runs.reduce((s, r) => s + r.tokens, 0);
  return { aggregate: (tokens * 1000) / wall, perStream: runs.reduce((s, r) => s + decodeRate(r), 0) / streams, tokens };
}
