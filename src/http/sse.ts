import type { Response } from 'express';

/**
 * Server-sent events on an Express response. Headers go out at once, Nagle
 * is off and every event is one write, so each token reaches the client the
 * moment it is generated (nothing here buffers or compresses).
 */
export class SseWriter {
  private lastWrite = performance.now();
  private beat: NodeJS.Timeout | undefined;

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
    this.raw(`data: ${JSON.stringify(payload)}\n\n`);
  }

  /** `event: <name>` + `data: <json>` (Anthropic style). */
  event(name: string, payload: unknown): void {
    this.raw(`event: ${name}\ndata: ${JSON.stringify(payload)}\n\n`);
  }

  raw(text: string): void {
    if (this.closed) return;
    this.lastWrite = performance.now();
    this.res.write(text);
  }

  /**
   * Calls `beat` whenever the stream has been silent for `ms`: a long prompt
   * evaluates for minutes on a CPU before the first token, and proxies and
   * clients drop a connection that says nothing for that long. `beat`
   * writes whatever the protocol has for it (Anthropic's ping event, an SSE
   * comment). Stops when the stream ends.
   */
  heartbeat(ms: number, beat: () => void = () => this.raw(': keepalive\n\n')): void {
    clearInterval(this.beat);
    this.beat = setInterval(() => {
      if (this.closed) clearInterval(this.beat);
      else if (performance.now() - this.lastWrite >= ms) beat();
    }, Math.max(10, ms / 4));
    this.beat.unref();
  }

  end(): void {
    clearInterval(this.beat);
    if (!this.closed) this.res.end();
  }
}
