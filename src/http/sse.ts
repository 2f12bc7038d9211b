import type { Response } from 'express';

/**
 * Server-sent events on an Express response. Headers go out at once, Nagle
 * is off and every event is one write, so each token reaches the client the
 * moment it is generated (nothing here buffers or compresses).
 */
export class SseWriter {
  constructor(private readonly res: Response) {
    res.status(200);
    res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
    res.setHeader('Cache-Control', 'no-cache, no-transform');
    res.setHeader('Connection', 'keep-alive');
    // Reverse proxies (nginx) must not hold the stream back either.
    res.setHeader('X-Accel-Buffering', 'no');
    res.socket?.setNoDelay(true);
    res.flushHeaders();
  }

  get closed(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  /** `data: <json>` (OpenAI style). */
  data(payload: unknown): void {
    if (!this.closed) this.res.write(`data: ${JSON.stringify(payload)}\n\n`);
  }

  /** `event: <name>` + `data: <json>` (Anthropic style). */
  event(name: string, payload: unknown): void {
    if (!this.closed) this.res.write(`event: ${name}\ndata: ${JSON.stringify(payload)}\n\n`);
  }

  raw(text: string): void {
    if (!this.closed) this.res.write(text);
  }

  end(): void {
    if (!this.closed) this.res.end();
  }
}
