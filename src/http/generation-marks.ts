import type { ChatDelta } from '../core/tasks/chat.js';

/**
 * When a generation reached each stage, in performance.now() time from the
 * request's arrival (`started`): the model held (the `start` delta: after
 * the load and any queue), the first piece out (after the prompt's
 * evaluation), the end (`done`). What Ollama's and llama.cpp's timings are
 * made of.
 */
export class GenerationMarks {
  held: number;
  firstToken = 0;
  ended = 0;

  constructor(readonly started: number) {
    this.held = started;
  }

  /** Notes when `delta` came. */
  see(delta: ChatDelta, now = performance.now()): void {
    if (delta.type === 'start') this.held = now;
    else if (delta.type === 'done') this.ended = now;
    else if (delta.type !== 'logprobs' && !this.firstToken) this.firstToken = now;
  }

  /** After the last delta: an answer with no piece had its first token at its end. */
  finish(): void {
    if (!this.firstToken) this.firstToken = this.ended;
  }
}
