import type { Llama } from 'node-llama-cpp';

/**
 * A GGUF model (any llama.cpp architecture) decoded from input embeddings
 * instead of tokens, through lserve's binding in the threadpool addon
 * (scripts/llama/lserveEmbedDecode.cpp): each decode returns the last row's
 * logits and its hidden state — the post-final-norm state that feeds the
 * output head. Qwen3-TTS's talker and code predictor take sums of codebook
 * embeddings as input and need both, one frame at a time, with the cache cut
 * back per frame; node-llama-cpp only decodes tokens.
 *
 * One model, one context, one sequence: the caller feeds positions in order
 * (a decode continues the cache; `truncate` cuts it back). Calls on one
 * decoder run one after another, in the order made. Decoders with the same
 * thread count share one persistent CPU threadpool, their decodes taking
 * turns on it.
 */

export interface EmbedDecodeResult {
  /** The last row's hidden state (hiddenWidth floats). */
  hidden: Float32Array;
  /** The last row's logits, [from, to) of the vocabulary. */
  logits: Float32Array;
}

interface NativeEmbedModel {
  load(): Promise<{ width: number; hiddenWidth: number; vocab: number; heads: number; headRows: number }>;
  decode(rows: Float32Array, count: number, position: number, logitsFrom: number, logitsTo: number, head: number, spin: boolean): Promise<EmbedDecodeResult>;
  /** The same on the calling thread (binaries built before it lack it). */
  decodeSync?(rows: Float32Array, count: number, position: number, logitsFrom: number, logitsTo: number, head: number, spin: boolean): EmbedDecodeResult;
  truncate(position: number): void;
  dispose(): Promise<void>;
}

type NativeEmbedModelClass = new (path: string, options: { contextSize: number; batchSize: number; threads: number; poll: boolean; heads?: string }) => NativeEmbedModel;

/** The binding, where the loaded llama.cpp binary has it (the threadpool addon does, the prebuilt one not). */
export function embedModelBinding(llama: Llama): NativeEmbedModelClass | undefined {
  return (llama as unknown as { _bindings?: { LserveEmbedModel?: NativeEmbedModelClass } })._bindings?.LserveEmbedModel;
}

export class EmbedDecoder {
  /** Floats per input row. */
  readonly width: number;
  /** Floats in a hidden state (the same as width for the usual architectures). */
  readonly hiddenWidth: number;
  readonly vocab: number;
  /** Extra heads loaded from the `heads` file, and the rows each scores. */
  readonly heads: { count: number; rows: number };
  readonly contextSize: number;
  /** The last call queued: the next waits for it, whatever its outcome. */
  private queue: Promise<unknown> = Promise.resolve();
  private cached = 0;
  private disposed = false;

  private constructor(
    private readonly native: NativeEmbedModel,
    shape: { width: number; hiddenWidth: number; vocab: number; heads: number; headRows: number },
    contextSize: number,
    /** Whether decodes run on the calling thread (open's `blocking`, where the binary can). */
    readonly blocking: boolean,
  ) {
    this.width = shape.width;
    this.hiddenWidth = shape.hiddenWidth;
    this.vocab = shape.vocab;
    this.heads = { count: shape.heads, rows: shape.headRows };
    this.contextSize = contextSize;
  }

  /**
   * Loads `file` (read into memory, not mapped; on the CPU) with a context of `contextSize`
   * positions that decodes up to `batchSize` rows a graph (default: all of
   * the context, up to 512); undefined where `llama`'s binary lacks the binding.
   * `poll`: the pool's workers spin after a decode (while setThreadpoolPolling
   * allows it) rather than sleep at once — off by default, so that work
   * beside the decodes (Qwen3-TTS's codec decoder) keeps its cores
   * (bench/tts.md: RTF 1.04 → 0.80 on 2 cores, the loop no slower).
   * `heads`: a GGUF file of extra output heads over the hidden state
   * (tensors head.0 …, each [width, rows]), which a decode may score with
   * in place of the model's own output (lserveEmbedDecode.cpp).
   * `blocking`: each decode runs on the calling thread, which waits for it,
   * instead of on libuv's pool with its result sent back: for a worker
   * thread that does nothing else meanwhile (Qwen3-TTS's frame loop: 16
   * decodes a frame, the predictor's 15 taking ≈ 2 ms less a frame). Never
   * on a thread that serves anything.
   */
  static async open(llama: Llama, file: string, options: { contextSize: number; threads: number; batchSize?: number; poll?: boolean; heads?: string; blocking?: boolean }): Promise<EmbedDecoder | undefined> {
    const Native = embedModelBinding(llama);
    if (!Native) return undefined;
    const batchSize = options.batchSize ?? Math.min(options.contextSize, 512);
    const native = new Native(file, { contextSize: options.contextSize, batchSize, threads: options.threads, poll: options.poll ?? false, heads: options.heads });
    try {
      return new EmbedDecoder(native, await native.load(), options.contextSize, options.blocking === true && typeof native.decodeSync === 'function');
    } catch (error) {
      await native.dispose();
      throw error;
    }
  }

  /** The positions the cache holds (0 … length − 1): where the next decode starts. */
  get length(): number {
    return this.cached;
  }

  /**
   * Decodes `count` rows (count × width floats, row-major) at positions
   * `position` … position + count − 1, which must continue the cache
   * (position = length; truncate first to go back). Resolves the last row's
   * hidden state and its logits in `logits` (default: the whole vocabulary),
   * from the model's output or, where `head` ≥ 0, from that extra head alone.
   * A failed decode rejects (a llama_decode failure with its `code`) and
   * leaves the cache as it was. `spin`: the pool's workers keep polling
   * after it, for a decode that follows at once (the code predictor's next
   * step), instead of sleeping as it ends; they sleep after llama.cpp's
   * polling rounds, or with the next decode made without it.
   */
  decode(rows: Float32Array, count: number, position: number, logits?: { from: number; to: number }, head = -1, spin = false): Promise<EmbedDecodeResult> {
    return this.enqueue(async () => {
      const args = [rows, count, position, logits?.from ?? 0, logits?.to ?? (head >= 0 ? this.heads.rows : this.vocab), head, spin] as const;
      const result = this.blocking ? this.native.decodeSync!(...args) : await this.native.decode(...args);
      this.cached = position + count;
      return result;
    });
  }

  /** Drops the cache from `position` on (the next decode starts there). */
  truncate(position: number): Promise<void> {
    return this.enqueue(async () => {
      this.native.truncate(position);
      this.cached = Math.min(this.cached, position);
    });
  }

  /** Frees the context and the model (and the shared threadpool with its last user), after the calls already made. */
  dispose(): Promise<void> {
    if (this.disposed) return this.queue.then(() => undefined);
    this.disposed = true;
    return this.enqueue(() => this.native.dispose(), true);
  }

  private enqueue<T>(call: () => Promise<T>, disposing = false): Promise<T> {
    if (this.disposed && !disposing) return Promise.reject(new Error('the embedding decoder is disposed'));
    const next = this.queue.then(call);
    this.queue = next.catch(() => undefined);
    return next;
  }
}
