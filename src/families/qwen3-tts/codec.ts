import { concatFloats } from '../../runtimes/onnx/float-io.js';
import type { Feed, OnnxSession } from '../../runtimes/onnx/session.js';
import { decoderLookBack, type CodecConfig } from './codec-config.js';
import { DECODER_IO } from './prepared/decoder-graph.js';

/**
 * Codes → audio with the 12 Hz tokenizer's decoder (tok_decoder), block by
 * block while the talker is still generating. The decoder is causal with a
 * bounded history: a frame's samples depend on that frame and the `lookBack`
 * frames before it (its sliding-window attention and convolutions, from the
 * speech tokenizer's config: codec-config.ts), nothing later. So a block
 * decoded as [look-back | block] keeps exactly the samples that one decode
 * of the whole utterance gives them — the stream has no seams — and the
 * look-back's own samples are dropped, as upstream drops a chunk's context.
 *
 * One call takes at most `callFrames` frames: the graph's frame axis when it
 * is fixed (the onnx-community export is traced at 25 frames: shorter calls
 * are padded with repeats of the last frame, which no kept sample depends
 * on), else MAX_CALL_FRAMES. Where look-back and block do not fit in one call
 * the block gets the context that is left, and its first samples approximate
 * the whole decode: the released decoder looks back 580 frames, so through a
 * 25-frame graph every block after the first 25 frames is such a seam (the
 * loader logs it).
 */

/**
 * Most frames one call decodes when the graph's frame axis is open: the most
 * upstream's own decode runs at once (chunked_decode: chunks of 300 frames
 * with 25 of context), which bounds the decoder's working memory.
 */
export const MAX_CALL_FRAMES = 325;

/**
 * The streaming decoder's largest block. Decoding costs the same per frame
 * from 8 frames on (no look-back is decoded again: 17 ms a frame at the
 * released decoder's size on 2 cores, in blocks of 8, 16, 32 or 64), while
 * the activations ONNX Runtime's arena keeps grow with the block (measured:
 * 0.13 GB at 8 frames, 0.7 GB at 32, 1.4 GB at 64).
 */
export const STREAMING_MAX_BLOCK = 8;

/** When blocks are cut: the first after `first` frames, each next one `growth` times larger, up to `max` (and the decoder's CodecDecoder.maxBlock). */
export interface BlockPolicy {
  first: number;
  growth: number;
  max: number;
}

/**
 * The published decoder's blocks: audio starts after 2 frames (160 ms of
 * speech); each next block is twice the last, as large as the decoder
 * allows. Measured at the 0.6B model's size on 2 cores (bench/tts.ts), a
 * first block of 2 instead of 4 frames brings the first audio of a sentence
 * from 2.4–2.9 s to 1.4–1.7 s (int4) for one more decoder call; a first block
 * of 1 costs a whole 25-frame call more. Doubling keeps a block's generation
 * no longer than the audio already sent lasts whenever generation keeps up
 * with real time, and fewer, larger blocks pay for the look-back fewer times.
 */
export const STREAMING_BLOCKS: BlockPolicy = { first: 2, growth: 2, max: Number.POSITIVE_INFINITY };

/**
 * The streaming decoder's blocks: audio starts after the first frame. A
 * block costs what its frames cost, so a first block of 1 costs no more
 * decoding: measured at the 0.6B model's size on 2 cores (bench/tts.ts,
 * int4), first audio 0.15–0.20 s against 0.22–0.26 s with a first block of
 * 2, the same RTF (1.08–1.11 against 1.07–1.14).
 */
export const STATEFUL_BLOCKS: BlockPolicy = { first: 1, growth: 2, max: Number.POSITIVE_INFINITY };

/** The block after `previous` frames (0 for the first). */
export function nextBlockSize(policy: BlockPolicy, previous: number): number {
  return previous === 0 ? policy.first : Math.min(policy.max, Math.max(1, Math.round(previous * policy.growth)));
}

/** One utterance's decoding: the samples of its frames [from, to), blocks asked for in order. */
export interface DecodeStream {
  decode(frames: readonly Int32Array[], from: number, to: number): Promise<Float32Array>;
  /** Frees what the stream holds (call once, when the utterance ends). */
  end(): Promise<void>;
}

/** Codes → audio, an utterance at a time. */
export interface BlockDecoder {
  /** The largest block one call decodes. */
  readonly maxBlock: number;
  /** How its blocks are best cut. */
  readonly blocks: BlockPolicy;
  readonly samplesPerFrame: number;
  stream(): DecodeStream;
  release(): Promise<void>;
}

/** The published decoder: each block decoded again with its look-back (the graph carries no state). */
export class CodecDecoder implements BlockDecoder {
  readonly blocks = STREAMING_BLOCKS;
  /** Frames one call takes: the graph's fixed frame axis, or MAX_CALL_FRAMES when the axis is open. */
  readonly callFrames: number;
  /** Whether the frame axis is fixed (short calls are padded). */
  readonly fixed: boolean;
  readonly samplesPerFrame: number;
  /** Frames of history a frame's samples depend on. */
  readonly lookBack: number;
  /**
   * The largest block: what a call leaves after the look-back, but never
   * less than half a call, so that no call spends more than half its frames
   * (and time) on context.
   */
  readonly maxBlock: number;
  private readonly input: string;
  private readonly output: string;

  constructor(
    private readonly session: OnnxSession,
    readonly groups: number,
    codec: CodecConfig,
  ) {
    this.input = session.inputName;
    this.output = session.outputName;
    const frames = session.inputShape()[1];
    this.fixed = typeof frames === 'number' && frames > 0;
    this.callFrames = this.fixed ? (frames as number) : MAX_CALL_FRAMES;
    this.samplesPerFrame = codec.samplesPerFrame;
    const samples = session.outputShape().at(-1);
    if (this.fixed && typeof samples === 'number' && samples > 0 && samples !== this.callFrames * this.samplesPerFrame) {
      throw new Error(`tok_decoder makes ${samples} samples of ${this.callFrames} frames, not the speech tokenizer config's ${this.samplesPerFrame} a frame`);
    }
    this.lookBack = decoderLookBack(codec.decoder);
    this.maxBlock = Math.max(1, Math.floor(this.callFrames / 2), this.callFrames - this.lookBack);
  }

  /** Whether some blocks get less context than the decoder looks back (a fixed frame axis shorter than look-back plus block). */
  get approximate(): boolean {
    return this.callFrames - this.maxBlock < this.lookBack;
  }

  /**
   * Samples of frames [from, to) of `frames`, decoded with up to `lookBack`
   * frames of left context; clamped to [−1, 1] as upstream clamps, in a new array.
   */
  async decode(frames: readonly Int32Array[], from: number, to: number): Promise<Float32Array> {
    if (to - from > this.callFrames) throw new Error(`a block of ${to - from} frames is more than the decoder's ${this.callFrames} a call`);
    const start = Math.max(0, from - this.lookBack, to - this.callFrames);
    const length = this.fixed ? this.callFrames : to - start;
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

  stream(): DecodeStream {
    return { decode: (frames, from, to) => this.decode(frames, from, to), end: async () => {} };
  }

  release(): Promise<void> {
    return this.session.release();
  }
}

/**
 * The streaming decoder (prepared/decoder-graph.ts): each frame decoded
 * once, the state its frames leave kept in the session's worker under the
 * utterance's own names between calls. Frames before a block that were
 * never decoded (an in-context reference's) are decoded with it, their
 * samples dropped.
 */
export class StreamingCodecDecoder implements BlockDecoder {
  readonly maxBlock = STREAMING_MAX_BLOCK;
  readonly blocks = STATEFUL_BLOCKS;
  readonly samplesPerFrame: number;
  /** The state's inputs and their shapes (the zero state starts each utterance). */
  private readonly states: Array<{ name: string; dims: readonly number[] }> = [];
  private streams = 0;

  constructor(
    private readonly session: OnnxSession,
    readonly groups: number,
    codec: CodecConfig,
  ) {
    this.samplesPerFrame = codec.samplesPerFrame;
    for (const input of session.inputNames) {
      if (!input.startsWith(DECODER_IO.state(''))) continue;
      const dims = session.describe(input)?.shape ?? [];
      if (!dims.every((d): d is number => typeof d === 'number' && d >= 0)) throw new Error(`the streaming decoder's ${input} has no fixed shape`);
      this.states.push({ name: input.slice(DECODER_IO.state('').length), dims });
    }
  }

  stream(): DecodeStream {
    const prefix = `utterance${this.streams++}/`;
    let position = 0;
    const call = async (frames: readonly Int32Array[], count: number): Promise<Float32Array> => {
      const codes = new BigInt64Array(count * this.groups);
      for (let f = 0; f < count; f++) for (let g = 0; g < this.groups; g++) codes[f * this.groups + g] = BigInt(frames[position + f]![g]!);
      const feeds: Record<string, Feed> = {
        [DECODER_IO.codes]: { type: 'int64', data: codes, dims: [1, count, this.groups] },
        [DECODER_IO.position]: { type: 'int64', data: BigInt64Array.of(BigInt(position)), dims: [1] },
      };
      const keep: Record<string, string> = {};
      for (const { name, dims } of this.states) {
        feeds[DECODER_IO.state(name)] = position === 0 ? { type: 'float32', data: new Float32Array(dims.reduce((a, b) => a * b, 1)), dims } : { kept: prefix + name };
        keep[DECODER_IO.nextState(name)] = prefix + name;
      }
      const out = await this.session.runWith(feeds, { fetch: [DECODER_IO.audio], keep });
      position += count;
      return out[DECODER_IO.audio]!.data as Float32Array;
    };
    return {
      decode: async (frames, from, to) => {
        if (from < position) throw new Error(`frames from ${from} were decoded already (the stream is at ${position})`);
        const parts: Float32Array[] = [];
        while (position < to) {
          const start = position;
          const samples = await call(frames, Math.min(this.maxBlock, to - position));
          // Context frames before the block: decoded for their state, their samples dropped.
          parts.push(samples.subarray(Math.max(0, from - start) * this.samplesPerFrame));
        }
        return parts.length === 1 ? parts[0]! : concatFloats(parts);
      },
      // A session released under a running utterance (an unload) has nothing left to drop.
      end: () => this.session.dropKept(prefix).catch(() => undefined),
    };
  }

  release(): Promise<void> {
    return this.session.release();
  }
}

/**
 * Collects frames and cuts them into blocks by a policy, none larger than
 * `maxBlock`. `context` frames (an in-context reference's codes) are decoded
 * as left context but never emitted, as upstream cuts the reference's share
 * of the audio.
 */
export class StreamingBlocks {
  private readonly frames: Int32Array[];
  private emitted: number;
  private lastBlock = 0;
  private readonly contextFrames: number;

  constructor(
    private readonly policy: BlockPolicy,
    private readonly maxBlock: number,
    context: readonly Int32Array[] = [],
  ) {
    this.frames = [...context];
    this.emitted = this.contextFrames = context.length;
  }

  /** The frames generated (context frames not counted) when the next block is cut. */
  nextCut(): number {
    return this.emitted - this.contextFrames + this.size();
  }

  private size(): number {
    return Math.min(nextBlockSize(this.policy, this.lastBlock), this.maxBlock);
  }

  push(codes: Int32Array): void {
    this.frames.push(codes);
  }

  /** The next block `[from, to)` if enough frames are waiting (or any, when `final`); advances past it. */
  take(final: boolean): { frames: readonly Int32Array[]; from: number; to: number } | undefined {
    const waiting = this.frames.length - this.emitted;
    const size = this.size();
    if (waiting === 0 || (!final && waiting < size)) return undefined;
    const count = Math.min(waiting, size);
    const from = this.emitted;
    this.emitted += count;
    this.lastBlock = count;
    return { frames: this.frames, from, to: from + count };
  }
}
