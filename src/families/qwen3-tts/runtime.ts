import { randomInt } from 'node:crypto';
import { machineCores } from '../../runtimes/onnx/threads.js';
import { InvalidRequestError, ServerError } from '../../core/errors.js';
import type { JobQueue } from '../../core/job-queue.js';
import type { SpeechModelInfo, SpeechRuntime, SynthesisRequest } from '../../core/tasks/speak/synthesizer.js';
import { StreamingBlocks, type BlockDecoder, type BlockPolicy } from './codec.js';
import type { TtsConfig } from './config.js';
import type { GenerateRequest, ReferenceCodes, StopReason } from './generator.js';
import { GeneratorError, LoopHold, type GeneratorWorker } from './worker-client.js';

/**
 * Qwen3-TTS as a SpeechRuntime: the generator worker makes frames, this side
 * cuts them into blocks and decodes each block on the decoder's own worker as
 * soon as it is complete, so decoding overlaps generation and the first audio
 * leaves after a few frames. One generation runs at a time per model; others
 * wait their turn.
 */

export const SAMPLE_RATE = 24000;
export const FRAMES_PER_SECOND = 12.5;

/**
 * How long one piece of text may speak before its generation is stopped: a
 * runaway generation (the model never drawing end-of-speech) must not hold
 * the model for minutes. Slow, careful speech of Chinese runs ≈ 4 characters
 * a second and of English ≈ 15; SECONDS_PER_CHARACTER gives every character
 * the slow case's time, twice over, plus a lead for short texts, and no piece
 * runs past MAX_PIECE_SECONDS whatever its length (the task splits input
 * longer than onePassChars). The export's own `max_new_tokens` caps it too.
 */
export const SECONDS_PER_CHARACTER = 0.5;
export const LEAD_SECONDS = 3;
export const MAX_PIECE_SECONDS = 120;

/** The frames a text may take (see SECONDS_PER_CHARACTER). */
export function frameLimit(text: string): number {
  const seconds = Math.min(MAX_PIECE_SECONDS, LEAD_SECONDS + SECONDS_PER_CHARACTER * [...text.trim()].length);
  return Math.ceil(seconds * FRAMES_PER_SECOND);
}

/** Byte-level BPE gives at most one token per UTF-8 byte: 3 for a UTF-16 code unit. */
export const MAX_TOKENS_PER_CHARACTER = 3;
/** Prompt rows besides the text: the fixed rows, a 60 s reference's 750 frames, its transcript and an instruction. */
export const PROMPT_RESERVE_ROWS = 1024;

/**
 * The longest text (in characters) generated in one talker pass. Upstream
 * speaks a whole text in one pass, so its prosody runs across sentences;
 * input longer than this is split at sentence boundaries into pieces of at
 * most this length. Two bounds, the smaller wins:
 * - the talker's positions (config.json's max_position_embeddings) must hold
 *   the prompt (MAX_TOKENS_PER_CHARACTER tokens per character, plus
 *   PROMPT_RESERVE_ROWS) and every frame the piece may take;
 * - the piece's frame limit (frameLimit) must still grant every character
 *   its slow-speech time: the piece ends where that limit reaches its cap
 *   (MAX_PIECE_SECONDS, or the export's max_new_tokens when smaller).
 * The 12 Hz models have 32768 positions, so the second bound holds:
 * (120 s − 3 s) / 0.5 s = 234 characters.
 */
export function onePassChars(config: TtsConfig): number {
  const frames = Math.min(config.maxFrames, MAX_PIECE_SECONDS * FRAMES_PER_SECOND);
  const byFrames = Math.floor((frames / FRAMES_PER_SECOND - LEAD_SECONDS) / SECONDS_PER_CHARACTER);
  const byPositions = Math.floor((config.maxPositions - frames - PROMPT_RESERVE_ROWS) / MAX_TOKENS_PER_CHARACTER);
  return Math.max(1, Math.min(byFrames, byPositions));
}

/** Whether the frame loop and the decoder, each with its threads, share the cores (see Qwen3TtsRuntime.holdBlocks). */
export function sharesCores(loopThreads: number, decoderThreads: number): boolean {
  return loopThreads + decoderThreads > machineCores();
}

/** The blocks the loop waits for (Qwen3TtsRuntime.holdBlocks). */
export function holdFor(loop: 'llama' | 'onnx', loopThreads: number, decoderThreads: number): Qwen3TtsRuntime['holdBlocks'] {
  if (!sharesCores(loopThreads, decoderThreads)) return 'none';
  return loop === 'llama' ? 'every' : 'first';
}

/** Without a catalog default, English-speaking presets first: most requests to an OpenAI-style endpoint are English. */
const PREFERRED_SPEAKERS = ['ryan', 'aiden', 'vivian'];

export function speechInfo(config: TtsConfig, catalogDefault?: string): SpeechModelInfo {
  const preset = config.mode === 'preset';
  const lower = config.speakerNames.map((name) => name.toLowerCase());
  const preferred = [catalogDefault?.toLowerCase(), ...PREFERRED_SPEAKERS].map((name) => (name ? lower.indexOf(name) : -1)).find((i) => i >= 0) ?? 0;
  return {
    sampleRate: SAMPLE_RATE,
    mode: config.mode,
    languages: config.languageNames,
    speakers: preset ? config.speakerNames : [],
    ...(preset && config.speakerNames.length ? { defaultSpeaker: config.speakerNames[preferred] } : {}),
    rateControl: false,
    framesPerSecond: FRAMES_PER_SECOND,
    maxPieceChars: onePassChars(config),
  };
}

interface Reference {
  codes: ReferenceCodes;
  text?: string;
}

export class Qwen3TtsRuntime implements SpeechRuntime {
  readonly info: SpeechModelInfo;
  private turn: Promise<unknown> = Promise.resolve();
  private readonly references = new WeakMap<object, Promise<ReferenceCodes>>();
  /** When audio blocks are cut (the decoder's own policy unless set); a generation reads it when it starts. */
  blockPolicy: BlockPolicy;
  /**
   * Which blocks the frame loop waits for while they decode, where the
   * loop's and the decoder's threads share the cores (set by the loader,
   * holdFor()): the first, whose decode would otherwise run at half speed
   * beside the loop while the first audio waits for it (bench/tts.md, 2
   * cores: 1.07 → 0.6 s); every block where the loop runs on llama.cpp,
   * whose threads, unlike ONNX Runtime's, take their cores whole while they
   * work (RTF 1.04 → 0.80 held; the ONNX loop gains from running beside the
   * decoder after the first block: 200 frames RTF 1.41 against 1.53 held).
   */
  holdBlocks: 'none' | 'first' | 'every' = 'none';

  constructor(
    private readonly generator: GeneratorWorker,
    private readonly codec: BlockDecoder,
    private readonly config: TtsConfig,
    readonly memoryBytes: number,
    readonly queue: JobQueue,
    defaultSpeaker?: string,
    private readonly log?: (message: string) => void,
  ) {
    this.info = speechInfo(config, defaultSpeaker);
    this.blockPolicy = codec.blocks;
  }

  async synthesize(request: SynthesisRequest, onAudio: (samples: Float32Array) => void, signal: AbortSignal): Promise<{ frames: number }> {
    signal.throwIfAborted();
    const generate = this.generateRequest(request);
    const reference = await this.reference(request, signal);
    if (reference) {
      generate.xvector = reference.codes.xvector;
      if (reference.text) generate.reference = { text: reference.text, frames: reference.codes.frames };
    }
    const context = generate.reference?.frames ?? [];
    // Generations take turns on the worker; an aborted caller leaves at once, its turn ends when the worker stops.
    const run = this.turn.then(() => (signal.aborted ? Promise.reject(signal.reason) : this.run(generate, context, onAudio, signal)));
    this.turn = run.catch(() => undefined);
    const { frames, reason } = await untilAborted(run, signal);
    // Cut by its limit, not by a `frames` the client asked for: a runaway generation the log should show.
    if (reason === 'length' && request.maxFrames === undefined) {
      this.log?.(`qwen3-tts: a piece of ${[...request.text.trim()].length} characters stopped at its limit of ${frames} frames without end of speech (finish_reason: length)`);
    }
    return { frames };
  }

  async dispose(): Promise<void> {
    await this.turn;
    await Promise.all([this.generator.release(), this.codec.release()]);
  }

  /** The worker's request: names checked and lower-cased, the frame cap and seed settled. */
  private generateRequest(request: SynthesisRequest): GenerateRequest {
    const config = this.config;
    let language: string | undefined;
    if (request.language !== undefined && request.language.toLowerCase() !== 'auto') {
      language = request.language.toLowerCase();
      if (!config.languages.has(language)) throw new InvalidRequestError(`Unknown language '${request.language}'. Languages: auto, ${this.info.languages.join(', ')}.`, { param: 'language', code: 'unsupported_language' });
    }
    const generate: GenerateRequest = {
      text: request.text,
      language,
      seed: request.seed ?? randomInt(2 ** 32 - 1),
      maxFrames: Math.max(1, Math.min(request.maxFrames ?? Infinity, config.maxFrames, frameLimit(request.text))),
    };
    if (config.mode === 'preset') {
      const speaker = (request.speaker ?? this.info.defaultSpeaker)?.toLowerCase();
      if (!speaker || !config.speakers.has(speaker)) {
        throw new InvalidRequestError(`Unknown speaker '${request.speaker}'. Speakers: ${this.info.speakers.join(', ')}.`, { param: 'speaker', code: 'unknown_speaker' });
      }
      generate.speaker = speaker;
    }
    if (config.mode === 'design' && !request.voiceDescription?.trim()) {
      throw new InvalidRequestError("This model designs a voice from a description: 'voice_description' is required.", { param: 'voice_description', code: 'missing_required_parameter' });
    }
    // Upstream's CustomVoice models take an instruction too (tone, emotion).
    if (request.voiceDescription?.trim() && config.mode !== 'clone') generate.instruct = request.voiceDescription.trim();
    return generate;
  }

  /** The reference voice's x-vector (and codes, with a transcript), derived once per reference object. */
  private async reference(request: SynthesisRequest, signal: AbortSignal): Promise<Reference | undefined> {
    if (this.config.mode !== 'clone') return undefined;
    const reference = request.reference;
    if (!reference || reference.samples.length === 0) {
      throw new InvalidRequestError("This model clones a voice: 'ref_audio' is required.", { param: 'ref_audio', code: 'missing_required_parameter' });
    }
    const text = reference.text?.trim() || undefined;
    let codes = this.references.get(reference);
    if (!codes) {
      // A copy crosses to the worker: the caller keeps its samples.
      codes = this.generator.encodeReference(reference.samples.slice(), text !== undefined);
      this.references.set(reference, codes);
      codes.catch(() => this.references.delete(reference));
    }
    return { codes: await untilAborted(codes.catch(rethrow), signal), text };
  }

  private async run(request: GenerateRequest, context: Int32Array[], onAudio: (samples: Float32Array) => void, signal: AbortSignal): Promise<{ frames: number; reason: StopReason }> {
    const blocks = new StreamingBlocks(this.blockPolicy, this.codec.maxBlock, context);
    const decoder = this.codec.stream();
    // A failed decode stops the generation too.
    const stop = new AbortController();
    let failure: unknown;
    let decoded: Promise<void> = Promise.resolve();
    // The loop stops where each held block is cut, and goes on once it is decoded.
    const hold = this.holdBlocks !== 'none' ? new LoopHold(blocks.nextCut()) : undefined;
    const cut = (final: boolean) => {
      for (let block = blocks.take(final); block; block = blocks.take(final)) {
        const { frames, from, to } = block;
        const resume = this.holdBlocks === 'every' ? blocks.nextCut() : LoopHold.NONE;
        decoded = decoded
          .then(async () => {
            if (failure !== undefined || signal.aborted) return;
            const samples = await decoder.decode(frames, from, to);
            if (!signal.aborted) onAudio(samples);
          })
          .catch((error: unknown) => {
            failure ??= error;
            stop.abort(error);
          })
          .finally(() => hold?.allow(resume));
      }
    };
    try {
      let result;
      try {
        result = await this.generator.generate(
          request,
          (codes) => {
            blocks.push(codes);
            cut(false);
          },
          AbortSignal.any([signal, stop.signal]),
          hold,
        );
      } catch (error) {
        throw rethrow(error);
      }
      if (signal.aborted) throw signal.reason;
      cut(true);
      await decoded;
      if (failure !== undefined) throw failure;
      return result;
    } finally {
      // The decoder's state for this utterance goes once its last block is done.
      await decoded;
      await decoder.end();
    }
  }
}

/** Errors from the worker as the engine's: bad input a 400, anything else a server fault. */
function rethrow(error: unknown): never {
  if (error instanceof GeneratorError) {
    if (error.param) throw new InvalidRequestError(error.message, { param: error.param, code: 'invalid_value' });
    throw new ServerError(`Qwen3-TTS: ${error.message}`);
  }
  throw error;
}

/** `promise`, or a rejection with the abort reason as soon as `signal` aborts. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener('abort', onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
