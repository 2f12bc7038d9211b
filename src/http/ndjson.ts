import type { Response } from 'express';

/**
 * Newline-delimited JSON on an Express response (Ollama's streaming): one
 * object a line, each written the moment it exists, headers sent at once.
 */
export class NdjsonWriter {
  constructor(private readonly res: Response) {
    res.status(200);
    res.setHeader('Content-Type', 'application/x-ndjson');
    res.setHeader('Cache-Control', 'no-cache, no-transform');
    res.setHeader('X-Accel-Buffering', 'no');
    res.socket?.setNoDelay(true);
    res.flushHeaders();
  }

  get closed(): boolean {
    return this.res.destroyed || this.res.writableEnded;
  }

  line(payload: unknown): void {
    if (!this.closed) this.res.write(`${JSON.stringify(payload)}\n`);
  }

  end(): void {
    if (!this.closed) this.res.end();
  }
}
