import ort from 'onnxruntime-node';
import { readFloats, toFloatType } from '../../runtimes/onnx/float-io.js';
import { ortSessionOptions } from '../../runtimes/onnx/session.js';
import { framePredictor, graphValues, type FramePredictor } from './code-predictor.js';
import { parseCodecConfig } from './codec-config.js';
import type { TtsConfig } from './config.js';
import { buildPrompt, PromptError, type PromptLayout, type PromptPlan } from './prompt.js';
import { encodeReferenceCodes } from './reference-codes.js';
import { FirstCodeSampler, Rng, Sampler } from './sampling.js';
import { bindTalker, type TalkerBinding } from './talker.js';
import { openPredictor, openTalker, PREPARED_PLAN, type GraphPlan } from './prepared/open-prepared.js';
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
}

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
  private readonly io: TalkerBinding;
  private readonly predictor: FramePredictor;
  /** The frame's codes, which the predictor reads and fills. */
  private readonly codes: BigInt64Array;
  private readonly kvHeads: number;
  private readonly headDim: number;
  private readonly hidden: number;
  private readonly roleIds: number[];
  /** attention_mask for any length up to its size: all ones, viewed by prefix. */
  private ones = new BigInt64Array(0);

  private constructor(
    private readonly sessions: Record<keyof GraphPaths, Session | undefined>,
    private readonly config: TtsConfig,
    private readonly tokenizer: TtsTokenizer,
    private readonly referenceSamplesPerFrame: number,
    /** Which talker and code predictor graphs run, and why (for the load line). */
    readonly graphNotes: string,
    cachedPredictor: boolean,
  ) {
    const talker = this.talker;
    this.io = bindTalker(graphValues(talker.inputMetadata), graphValues(talker.outputMetadata), { vocab: config.codecVocab, hidden: config.hidden });
    const { sizes } = this.io;
    const kvHeads = sizes.kvHeads ?? config.kvHeads;
    const headDim = sizes.headDim ?? config.headDim;
    const hidden = sizes.hidden ?? config.hidden;
    if (!kvHeads || !headDim || !hidden) throw new Error('cannot tell the talker cache shape from the graph or config.json');
    this.kvHeads = kvHeads;
    this.headDim = headDim;
    this.hidden = hidden;
    this.roleIds = [config.ids.imStart, ...tokenizer.encode('assistant\n')];
    this.codes = new BigInt64Array(config.groups);
    const predictor = sessions.code_predictor!;
    this.predictor = framePredictor(predictor, cachedPredictor, hidden, this.codes);
  }

  static async create(init: GeneratorInit): Promise<FrameGenerator> {
    const options = ortSessionOptions({ threads: init.threads });
    const plan = init.graphs ?? PREPARED_PLAN;
    const entries = Object.entries(init.paths).filter((e): e is [string, string] => e[1] !== undefined && e[0] !== 'code_predictor' && e[0] !== 'talker_cache');
    const opening = [
      openPredictor(init.paths.code_predictor, plan, init.config, options, init.threads),
      openTalker(init.paths.talker_cache, plan, options),
      ...entries.map(async ([, file]) => ({ session: await ort.InferenceSession.create(file, options) })),
    ] as const;
    const settled = await Promise.allSettled(opening);
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      await Promise.all(settled.map((r) => (r.status === 'fulfilled' ? r.value.session.release() : undefined)));
      throw failed.reason;
    }
    const [predictor, talker, ...others] = settled.map((r) => (r as PromiseFulfilledResult<Awaited<(typeof opening)[0]>>).value);
    const sessions: Record<string, Session> = Object.fromEntries([
      ['code_predictor', predictor!.session],
      ['talker_cache', talker!.session],
      ...entries.map(([role], i) => [role, others[i]!.session]),
    ]);
    const notes = [talker!.note, predictor!.note].filter(Boolean).join('; ');
    try {
      const tokenizer = await loadTtsTokenizer(init.tokenizer);
      const samplesPerFrame = init.referenceSamplesPerFrame ?? parseCodecConfig().encoderSamplesPerFrame;
      return new FrameGenerator(sessions as Record<keyof GraphPaths, Session | undefined>, init.config, tokenizer, samplesPerFrame, notes, predictor!.cached);
    } catch (error) {
      await Promise.all(Object.values(sessions).map((s) => s.release()));
      throw error;
    }
  }

  private get talker(): Session {
    return this.sessions.talker_cache!;
  }

  async release(): Promise<void> {
    await Promise.all(Object.values(this.sessions).map((s) => s?.release()));
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
    let state = await this.talkerRun(embeds, plan.rows.length, 0, undefined);
    let position = plan.rows.length;
    const codes = this.codes;
    let frames = 0;
    while (frames < request.maxFrames) {
      if (aborted()) return { frames, reason: 'aborted' };
      const first = firstCode.sample(state.logits, frames, rng);
      if (first === config.ids.codecEos) return { frames, reason: 'eos' };
      codes.fill(0n);
      codes[0] = BigInt(first);
      // Groups 1…15 (most of a frame's time): the predictor reads the talker state and the codes so far.
      if (!(await this.predictor.frame(state.hidden, draw, aborted))) return { frames, reason: 'aborted' };
      const frame = Int32Array.from(codes, Number);
      onFrame(frame);
      frames++;
      if (frames >= request.maxFrames) break;
      const next = await this.residual(codes);
      addInto(next, 0, steps, Math.min(frames - 1, plan.trailing.length) * this.hidden, this.hidden);
      state = await this.talkerRun(next, 1, position, state.cache);
      position++;
    }
    return { frames, reason: 'length' };
  }

  /** One talker run over `count` new rows after `past` cached ones. */
  private async talkerRun(embeds: Float32Array, count: number, past: number, cache: Record<string, ort.Tensor> | undefined) {
    const total = past + count;
    if (this.ones.length < total) this.ones = new BigInt64Array(Math.max(total, 2 * this.ones.length, 1024)).fill(1n);
    const positions = new BigInt64Array(3 * count);
    for (let row = 0; row < 3; row++) for (let i = 0; i < count; i++) positions[row * count + i] = BigInt(past + i);
    const io = this.io;
    const feeds: Record<string, ort.Tensor> = {
      [io.embeds]: new ort.Tensor(io.types.embeds, toFloatType(embeds, io.types.embeds), [1, count, this.hidden]),
      [io.positions]: new ort.Tensor('int64', positions, [3, 1, count]),
      [io.mask]: new ort.Tensor('int64', this.ones.subarray(0, total), [1, total]),
    };
    // The cache stays in the graph's own type: presents go back as pasts untouched.
    const empty = io.types.cache === 'float16' ? new Uint16Array(0) : new Float32Array(0);
    for (const { past: name, present } of io.cache) {
      feeds[name] = cache ? cache[present]! : new ort.Tensor(io.types.cache, empty, [1, this.kvHeads, 0, this.headDim]);
    }
    const out = await this.talker.run(feeds);
    const logits = out[io.logits]!;
    const hidden = out[io.hidden]!;
    const vocab = this.config.codecVocab;
    return {
      logits: readFloats(logits.type, logits.data, (count - 1) * vocab, count * vocab),
      // The predictor's input: a copy, so the prefill's [T, H] states can go.
      hidden: readFloats(hidden.type, hidden.data, (count - 1) * this.hidden, count * this.hidden).slice(),
      cache: out as Record<string, ort.Tensor>,
    };
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
