import type { OnnxSession } from './session.js';

/**
 * A session made the first time it is needed and kept from then on: for a
 * graph that only some requests use (a VAE encoder: img2img and edits), so
 * that a model serving only the others never holds its weights. A failed
 * opening is not remembered: the next use tries again.
 */
export class LazySession {
  private opening?: Promise<OnnxSession>;

  constructor(
    readonly path: string,
    private readonly open: (path: string) => Promise<OnnxSession>,
  ) {}

  /** Whether the session has been opened (or is being opened). */
  get opened(): boolean {
    return this.opening !== undefined;
  }

  get(): Promise<OnnxSession> {
    this.opening ??= this.open(this.path).catch((error: unknown) => {
      this.opening = undefined;
      throw error;
    });
    return this.opening;
  }

  async release(): Promise<void> {
    const opening = this.opening;
    this.opening = undefined;
    const session = await opening?.catch(() => undefined);
    await session?.release();
  }
}
