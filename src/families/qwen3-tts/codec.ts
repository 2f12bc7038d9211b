import type { OnnxSession } from '../../runtimes/onnx/session.js';

/**
 * Codes → audio with the 12 Hz tokenizer's decoder (tok_decoder), block by
 * block while the talker is still generating. The decoder is causal: a
 * frame's samples depend on that frame and earlier ones only. So a block is
 * decoded as [left context | new frames | padding] in the graph's fixed
 * window, and only the new frames' samples are kept — exactly what a decode of
 * everything so far would give for them, while the padding (repeats of the
 * last frame) never reaches a kept sample.
 */

/** When blocks are cut: the first after `first` frames, each next one `growth` times larger, up to `max`. */
export interface BlockPolicy {
  first: number;
  growth: number;
  max: number;
}

/**
 * Audio starts after 2 frames (160 ms of speech), then blocks of 4, 8 and 12
 * frames: later blocks still get 13+ frames of left context in the 25-frame
 * window, and the decoder runs about twice per second of audio. Measured at
 * the 0.6B model's size on 2 cores (bench/tts.ts), a first block of 2
 * instead of 4 frames brings the first audio of a sentence from 2.4–2.9 s to
 * 1.4–1.7 s (int4) for one more decoder call per sentence.
 */
export const STREAMING_BLOCKS: BlockPolicy = { first: 2, growth: 2, max: 12 };

/** The block after `previous` frames (0 for the first). */
export function nextBlockSize(policy: BlockPolicy, previous: number): number {
  return previous === 0 ? policy.first : Math.min(policy.max, Math.max(1, Math.round(previous * policy.growth)));
}

export class CodecDecoder {
  /** Frames per decoder call; the graph's fixed frame axis (25), or the context cap when the axis is open. */
  readonly window: number;
  /** Whether the frame axis is fixed (short windows are padded). */
  readonly fixed: boolean;
  readonly samplesPerFrame: number;
  private readonly input: string;
  private readonly output: string;

  constructor(
    private readonly session: OnnxSession,
    readonly groups: number,
  ) {
    this.input = session.inputName;
    this.output = session.outputName;
    const frames = session.inputShape()[1];
    this.fixed = typeof frames === 'number' && frames > 0;
    this.window = this.fixed ? (frames as number) : 25;
    const samples = session.outputShape().at(-1);
    this.samplesPerFrame = this.fixed && typeof samples === 'number' && samples > 0 ? samples / this.window : 1920;
  }

  /**
   * Samples of frames [from, to) of `frames`, decoded with up to a window of
   * left context; clamped to [−1, 1], in a new array.
   */
  async decode(frames: readonly Int32Array[], from: number, to: number): Promise<Float32Array> {
    const start = Math.max(0, to - this.window);
    const length = this.fixed ? this.window : to - start;
    const codes = new BigInt64Array(length * this.groups);
    for (let f = 0; f < length; f++) {
      // Past the last real frame: repeats of it, which no kept sample depends on.
      const frame = frames[Math.min(start + f, to - 1)]!;
      for (let g = 0; g < this.groups; g++) codes[f * this.groups + g] = BigInt(frame[g]!);
    }
    const out = await this.session.runWith({ [this.input]: { type: 'int64', data: codes, dims: [1, length, this.groups] } }, { fetch: [this.output] });
    const wave = out[this.output]!.data as Float32Array;
    const samples = wave.slice((from - start) * this.samplesPerFrame, (to - start) * this.samplesPerFrame);
    for (let i = 0; i < samples.length; i++) samples[i] = Math.max(-1, Math.min(1, samples[i]!));
    return samples;
  }
}

/**
 * Collects frames and cuts them into blocks by a policy. `context` frames
 * (an in-context reference's codes) are decoded as left context but never
 * emitted, as upstream cuts the reference's share of the audio.
 */
export class StreamingBlocks {
  private readonly frames: Int32Array[];
  private emitted: number;
  private lastBlock = 0;

  constructor(
    private readonly policy: BlockPolicy,
    private readonly window: number,
    context: readonly Int32Array[] = [],
  ) {
    this.frames = [...context];
    this.emitted = this.frames.length;
  }

  push(codes: Int32Array): void {
    this.frames.push(codes);
  }

  /** The next block `[from, to)` if enough frames are waiting (or any, when `final`); advances past it. */
  take(final: boolean): { frames: readonly Int32Array[]; from: number; to: number } | undefined {
    const waiting = this.frames.length - this.emitted;
    const size = Math.min(nextBlockSize(this.policy, this.lastBlock), this.window);
    if (waiting === 0 || (!final && waiting < size)) return undefined;
    const count = Math.min(waiting, size);
    const from = this.emitted;
    this.emitted += count;
    this.lastBlock = count;
    return { frames: this.frames, from, to: from + count };
  }
}
