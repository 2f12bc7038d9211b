import ort from 'onnxruntime-node';
import { readFloats } from '../../runtimes/onnx/float-io.js';
import { ortSessionOptions } from '../../runtimes/onnx/session.js';
import type { FramePredictor } from './code-predictor.js';
import { parseCodecConfig } from './codec-config.js';
import type { TtsConfig } from './config.js';
import { buildPrompt, PromptError, type PromptLayout, type PromptPlan } from './prompt.js';
import { encodeReferenceCodes } from './reference-codes.js';
import { FirstCodeSampler, Rng, Sampler } from './sampling.js';
import type { FrameTalker } from './talker.js';
import { openFrameModels, type FrameModels, type FrameModelSources } from './frame-models.js';
import { PREPARED_PLAN, type GraphPlan } from './prepared/open-prepared.js';
import { loadTtsTokenizer, type TokenizerFiles, type TtsTokenizer } from './tokenizer.js';

/**
 * The frame loop, run inside the generator worker (worker.ts): it owns the
 * talker, code predictor and embedding graphs, so a frame — one cached talker
 * step, 15 code-predictor calls with a draw after each, one residual
 * embedding — never crosses a thread, and the KV cache stays where the
 * talker runs. Each frame's 16 codes go out through `onFrame`.
 */

export interface GraphPaths {
  text_embed: string;
  codec_embed: string;
  talker_cache: string;
  code_predictor: string;
  residual_embed: string;
  tok_encoder?: string;
  speaker_encoder?: string;
}

export interface GeneratorInit {
  paths: GraphPaths;
  threads: number;
  /** Audio samples per frame of the reference encoder's codes (the speech tokenizer's encode_downsample_rate; upstream's without). */
  referenceSamplesPerFrame?: number;
  config: TtsConfig;
  tokenizer: TokenizerFiles;
  /** The prepared talker and predictor unless told otherwise (prepared/open-prepared.ts). */
  graphs?: GraphPlan;
  /** The lserve home, where the llama.cpp addon that runs the converted talker and predictor is found. */
  llamaHome?: string;
}

/**
 * Positions of the talker's KV cache on llama.cpp, allocated whole at load
 * (f16, ≈ 112 KB a position at the 0.6B and 1.7B talkers' widths): a piece
 * speaks at most MAX_PIECE_SECONDS (1500 frames) after a prompt the runtime
 * keeps within PROMPT_RESERVE_ROWS (runtime.ts).
 */
const TALKER_POSITIONS = 1500 + 1024;

export interface GenerateRequest {
  text: string;
  /** Lower-case config language name; undefined or 'auto' for automatic. */
  language?: string;
  /** Lower-case preset speaker name. */
  speaker?: string;
  /** Voice description (the instruction block). */
  instruct?: string;
  xvector?: Float32Array;
  /** In-context cloning: the reference transcript and codes. */
  reference?: { text: string; frames: Int32Array[] };
  /** Prompt layout; the mode's upstream default when absent (prompt.ts). */
  layout?: PromptLayout;
  seed: number;
  maxFrames: number;
}

export interface ReferenceCodes {
  xvector: Float32Array;
  /** Codes of the reference audio; empty unless asked for (in-context cloning). */
  frames: Int32Array[];
}

export type StopReason = 'eos' | 'length' | 'aborted';

type Session = ort.InferenceSession;

function rank(session: Session, name: string): number | undefined {
  const meta = session.inputMetadata.find((m) => m.name === name);
  return meta && meta.isTensor ? meta.shape.length : undefined;
}

export class FrameGenerator {
  private readonly roleIds: number[];

  private constructor(
    private readonly sessions: Record<keyof GraphPaths, Session | undefined>,
    private readonly talker: FrameTalker,
    private readonly predictor: FramePredictor,
    /** The frame's codes, which the predictor reads and fills. */
    private readonly codes: BigInt64Array,
    /** The talker's width. */
    private readonly hidden: number,
    private readonly config: TtsConfig,
    private readonly tokenizer: TtsTokenizer,
    private readonly referenceSamplesPerFrame: number,
    /** Which talker and code predictor graphs run, and why (for the load line). */
    readonly graphNotes: string,
    /** Where the loop runs. */
    readonly loop: FrameModels['loop'],
  ) {
    this.roleIds = [config.ids.imStart, ...tokenizer.encode('assistant\n')];
  }

  static async create(init: GeneratorInit): Promise<FrameGenerator> {
    const options = ortSessionOptions({ threads: init.threads });
    const codes = new BigInt64Array(init.config.groups);
    const sources: FrameModelSources = {
      talker: init.paths.talker_cache,
      predictor: init.paths.code_predictor,
      config: init.config,
      plan: init.graphs ?? PREPARED_PLAN,
      threads: init.threads,
      llamaHome: init.llamaHome,
      talkerPositions: Math.min(init.config.maxPositions, TALKER_POSITIONS),
    };
    const entries = Object.entries(init.paths).filter((e): e is [string, string] => e[1] !== undefined && e[0] !== 'code_predictor' && e[0] !== 'talker_cache');
    const [models, ...opened] = await Promise.allSettled([openFrameModels(sources, options, codes), ...entries.map(([, file]) => ort.InferenceSession.create(file, options))]);
    const sessions: Record<string, Session> = Object.fromEntries(entries.flatMap(([role], i) => (opened[i]!.status === 'fulfilled' ? [[role, opened[i].value]] : [])));
    const release = async () => {
      await Promise.all(Object.values(sessions).map((s) => s.release()));
      if (models.status === 'fulfilled') await Promise.all([models.value.talker.release(), models.value.predictor.release()]);
    };
    try {
      const failed = [models, ...opened].find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
      const { talker, predictor, hidden, note, loop } = (models as PromiseFulfilledResult<FrameModels>).value;
      const tokenizer = await loadTtsTokenizer(init.tokenizer);
      const samplesPerFrame = init.referenceSamplesPerFrame ?? parseCodecConfig().encoderSamplesPerFrame;
      return new FrameGenerator(sessions as Record<keyof GraphPaths, Session | undefined>, talker, predictor, codes, hidden, init.config, tokenizer, samplesPerFrame, note, loop);
    } catch (error) {
      await release();
      throw error;
    }
  }

  async release(): Promise<void> {
    await Promise.all([...Object.values(this.sessions).map((s) => s?.release()), this.talker.release(), this.predictor.release()]);
  }

  // ---------------------------------------------------------------- reference voice

  /** The x-vector of a reference voice (24 kHz mono) and, for in-context cloning, its codes. */
  async encodeReference(samples: Float32Array, withCodes: boolean): Promise<ReferenceCodes> {
    const speaker = this.sessions.speaker_encoder;
    if (!speaker) throw new Error('the model has no speaker_encoder graph');
    const input = speaker.inputNames[0]!;
    const dims = rank(speaker, input) === 3 ? [1, 1, samples.length] : [1, samples.length];
    const out = await speaker.run({ [input]: new ort.Tensor('float32', samples, dims) });
    const embedding = out[speaker.outputNames[0]!]!.data as Float32Array;
    // [1, H] or [1, 1, H]: the last H values either way.
    const xvector = embedding.slice(embedding.length - this.hidden);
    return { xvector, frames: withCodes ? await this.encodeCodes(samples) : [] };
  }

  /** tok_encoder over the whole reference clip (reference-codes.ts). */
  private async encodeCodes(samples: Float32Array): Promise<Int32Array[]> {
    const encoder = this.sessions.tok_encoder;
    if (!encoder) throw new Error('the model has no tok_encoder graph');
    return encodeReferenceCodes(encoder, samples, this.config.groups, this.referenceSamplesPerFrame);
  }

  // ---------------------------------------------------------------- prompt

  plan(request: GenerateRequest): PromptPlan {
    const body = this.tokenizer.encode(request.text.trim());
    if (body.length === 0) throw new PromptError('The text has nothing to speak.', 'input');
    let instruct: number[] | undefined;
    if (request.instruct?.trim()) {
      const ids = this.config.ids;
      instruct = [ids.imStart, ...this.tokenizer.encode(`user\n${request.instruct.trim()}`), ids.imEnd, ...this.tokenizer.encode('\n')];
    }
    const reference = request.reference ? { body: this.tokenizer.encode(request.reference.text.trim()), frames: request.reference.frames } : undefined;
    return buildPrompt(this.config, this.roleIds, { body, language: request.language, speaker: request.speaker, instruct, xvector: request.xvector, reference, layout: request.layout });
  }

  /** inputs_embeds of a plan: each row the sum of the embeddings it names. */
  private async embed(plan: PromptPlan): Promise<Float32Array> {
    const H = this.hidden;
    const out = new Float32Array(plan.rows.length * H);
    const addRows = (rows: number[], values: Float32Array) => rows.forEach((row, i) => addInto(out, row * H, values, i * H, H));
    const lookup = async (session: Session, key: 'text' | 'codec') => {
      const rows = plan.rows.flatMap((r, i) => (r[key] === undefined ? [] : [i]));
      if (!rows.length) return;
      const ids = BigInt64Array.from(rows, (i) => BigInt(plan.rows[i]![key]!));
      const result = await session.run({ [session.inputNames[0]!]: new ort.Tensor('int64', ids, [1, ids.length]) });
      const out = result[session.outputNames[0]!]!;
      addRows(rows, readFloats(out.type, out.data));
    };
    await lookup(this.sessions.text_embed!, 'text');
    await lookup(this.sessions.codec_embed!, 'codec');
    plan.rows.forEach((r, i) => {
      if (r.vector !== undefined) addInto(out, i * H, plan.vectors[r.vector]!, 0, H);
    });
    for (let f = 0; f < plan.frames.length; f++) {
      const embedded = await this.residual(Int32ArrayToBig(plan.frames[f]!));
      plan.rows.forEach((r, i) => {
        if (r.frame === f) addInto(out, i * H, embedded, 0, H);
      });
    }
    return out;
  }

  private async residual(codes: BigInt64Array): Promise<Float32Array> {
    const session = this.sessions.residual_embed!;
    const result = await session.run({ [session.inputNames[0]!]: new ort.Tensor('int64', codes, [1, codes.length]) });
    const out = result[session.outputNames[0]!]!;
    // The run's own buffer (or its fp32 copy): the caller may add into it.
    return readFloats(out.type, out.data);
  }

  // ---------------------------------------------------------------- generation

  async generate(request: GenerateRequest, onFrame: (codes: Int32Array) => void, aborted: () => boolean): Promise<{ frames: number; reason: StopReason }> {
    const config = this.config;
    const groups = config.groups;
    const plan = this.plan(request);
    const embeds = await this.embed(plan);
    // What each fed-back frame adds: the trailing text one token a frame, then tts_pad (row `trailing.length`).
    const stepTexts = [...plan.trailing, plan.stepText];
    const steps = await this.embed({ rows: stepTexts.map((text) => ({ text })), vectors: [], frames: [], trailing: [], stepText: plan.stepText });
    const rng = new Rng(request.seed);
    const firstCode = new FirstCodeSampler(config.codecVocab, audioCodes(config), config.ids.codecEos, config.talker, config.minFrames);
    const predictorVocab = this.predictor.vocab;
    const groupSampler = new Sampler(config.predictor.topK > 0 ? config.predictor.topK : predictorVocab);
    const draw = (logits: Float32Array) => groupSampler.sample(logits, predictorVocab, config.predictor, rng);

    if (aborted()) return { frames: 0, reason: 'aborted' };
    const capacity = this.talker.capacity ?? Infinity;
    if (plan.rows.length >= capacity) throw new PromptError(`The prompt takes ${plan.rows.length} positions; the talker holds ${capacity}.`, 'input');
    let state = await this.talker.step(embeds, plan.rows.length, 0);
    let position = plan.rows.length;
    const codes = this.codes;
    let frames = 0;
    if (aborted()) return { frames: 0, reason: 'aborted' };
    while (frames < request.maxFrames) {
      const first = firstCode.sample(state.logits, frames, rng);
      if (first === config.ids.codecEos) return { frames, reason: 'eos' };
      codes.fill(0n);
      codes[0] = BigInt(first);
      // Groups 1…15 (most of a frame's time): the predictor reads the talker state and the codes so far.
      if (!(await this.predictor.frame(state.hidden, draw, aborted))) return { frames, reason: 'aborted' };
      const frame = Int32Array.from(codes, Number);
      onFrame(frame);
      frames++;
      if (frames >= request.maxFrames || position >= capacity) break;
      // Where the caller holds the loop (a block to decode), it waits here, before the next talker step.
      if (aborted()) return { frames, reason: 'aborted' };
      const next = await this.residual(codes);
      addInto(next, 0, steps, Math.min(frames - 1, plan.trailing.length) * this.hidden, this.hidden);
      state = await this.talker.step(next, 1, position);
      position++;
    }
    return { frames, reason: 'length' };
  }
}

/** Codes below the control range: upstream suppresses the top 1024 ids of the talker vocabulary except eos. */
function audioCodes(config: TtsConfig): number {
  return config.codecVocab - 1024;
}

function addInto(target: Float32Array, offset: number, source: Float32Array, from: number, length: number): void {
  for (let i = 0; i < length; i++) target[offset + i]! += source[from + i]!;
}

function Int32ArrayToBig(codes: Int32Array): BigInt64Array {
  return BigInt64Array.from(codes, (c) => BigInt(c));
}
