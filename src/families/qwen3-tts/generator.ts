import ort from 'onnxruntime-node';
import { ortSessionOptions } from '../../runtimes/onnx/session.js';
import type { TtsConfig } from './config.js';
import { buildPrompt, PromptError, type PromptPlan } from './prompt.js';
import { FirstCodeSampler, Rng, Sampler } from './sampling.js';
import { pairCache, type CachePair } from './talker.js';
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
  config: TtsConfig;
  tokenizer: TokenizerFiles;
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

/** Static size of a session value's axis, or undefined when it is symbolic. */
function staticDim(session: Session, name: string, axis: number, input = true): number | undefined {
  const meta = (input ? session.inputMetadata : session.outputMetadata).find((m) => m.name === name);
  if (!meta || !meta.isTensor) return undefined;
  const dim = meta.shape[axis < 0 ? meta.shape.length + axis : axis];
  return typeof dim === 'number' && dim > 0 ? dim : undefined;
}

function rank(session: Session, name: string): number | undefined {
  const meta = session.inputMetadata.find((m) => m.name === name);
  return meta && meta.isTensor ? meta.shape.length : undefined;
}

/** The input of a given element type, by preferred name first. */
function inputNamed(session: Session, preferred: string, type: string): string {
  if (session.inputNames.includes(preferred)) return preferred;
  const meta = session.inputMetadata.find((m) => m.isTensor && m.type === type);
  if (!meta) throw new Error(`the graph has no ${type} input (expected '${preferred}')`);
  return meta.name;
}

export class FrameGenerator {
  private readonly pairs: CachePair[];
  private readonly kvHeads: number;
  private readonly headDim: number;
  private readonly hidden: number;
  private readonly roleIds: number[];
  private readonly predictorHidden: string;
  private readonly predictorCodes: string;
  /** attention_mask for any length up to its size: all ones, viewed by prefix. */
  private ones = new BigInt64Array(0);

  private constructor(
    private readonly sessions: Record<keyof GraphPaths, Session | undefined>,
    private readonly config: TtsConfig,
    private readonly tokenizer: TtsTokenizer,
  ) {
    const talker = this.talker;
    this.pairs = pairCache(talker.inputNames, talker.outputNames);
    const first = this.pairs[0]!.past;
    const kvHeads = staticDim(talker, first, 1) ?? config.kvHeads;
    const headDim = staticDim(talker, first, 3) ?? config.headDim;
    const hidden = staticDim(talker, 'inputs_embeds', 2) ?? config.hidden;
    if (!kvHeads || !headDim || !hidden) throw new Error('cannot tell the talker cache shape from the graph or config.json');
    this.kvHeads = kvHeads;
    this.headDim = headDim;
    this.hidden = hidden;
    this.roleIds = [config.ids.imStart, ...tokenizer.encode('assistant\n')];
    const predictor = this.predictor;
    this.predictorHidden = inputNamed(predictor, 'talker_hidden', 'float32');
    this.predictorCodes = inputNamed(predictor, 'codec_ids', 'int64');
  }

  static async create(init: GeneratorInit): Promise<FrameGenerator> {
    const options = ortSessionOptions({ threads: init.threads });
    const entries = Object.entries(init.paths).filter((e): e is [string, string] => e[1] !== undefined);
    const settled = await Promise.allSettled(entries.map(([, file]) => ort.InferenceSession.create(file, options)));
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      await Promise.all(settled.map((r) => (r.status === 'fulfilled' ? r.value.release() : undefined)));
      throw failed.reason;
    }
    const sessions = Object.fromEntries(entries.map(([role], i) => [role, (settled[i] as PromiseFulfilledResult<Session>).value]));
    try {
      const tokenizer = await loadTtsTokenizer(init.tokenizer);
      return new FrameGenerator(sessions as Record<keyof GraphPaths, Session | undefined>, init.config, tokenizer);
    } catch (error) {
      await Promise.all(Object.values(sessions).map((s) => s.release()));
      throw error;
    }
  }

  private get talker(): Session {
    return this.sessions.talker_cache!;
  }

  private get predictor(): Session {
    return this.sessions.code_predictor!;
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

  /** tok_encoder over the reference: whole when its input length is open, else in windows of whole frames. */
  private async encodeCodes(samples: Float32Array): Promise<Int32Array[]> {
    const encoder = this.sessions.tok_encoder;
    if (!encoder) throw new Error('the model has no tok_encoder graph');
    const input = encoder.inputNames[0]!;
    const inputRank = rank(encoder, input) ?? 3;
    const fixed = staticDim(encoder, input, -1);
    const samplesPerFrame = 1920;
    const frames: Int32Array[] = [];
    const window = fixed ?? samples.length;
    const stride = fixed ? Math.floor(fixed / samplesPerFrame) * samplesPerFrame : samples.length;
    if (stride <= 0) throw new Error(`tok_encoder takes ${fixed} samples, less than one frame`);
    for (let start = 0; start < samples.length; start += stride) {
      const chunk = samples.subarray(start, Math.min(samples.length, start + stride));
      const wanted = Math.floor(chunk.length / samplesPerFrame);
      if (wanted === 0) break;
      const data = new Float32Array(window);
      data.set(chunk);
      const out = await encoder.run({ [input]: new ort.Tensor('float32', data, inputRank === 3 ? [1, 1, window] : [1, window]) });
      const codes = out[encoder.outputNames[0]!]!;
      frames.push(...splitFrames(codes.data as BigInt64Array | Int32Array, codes.dims, this.config.groups).slice(0, wanted));
    }
    return frames;
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
    return buildPrompt(this.config, this.roleIds, { body, language: request.language, speaker: request.speaker, instruct, xvector: request.xvector, reference });
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
      addRows(rows, result[session.outputNames[0]!]!.data as Float32Array);
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
    return result[session.outputNames[0]!]!.data as Float32Array;
  }

  // ---------------------------------------------------------------- generation

  async generate(request: GenerateRequest, onFrame: (codes: Int32Array) => void, aborted: () => boolean): Promise<{ frames: number; reason: StopReason }> {
    const config = this.config;
    const groups = config.groups;
    const plan = this.plan(request);
    const embeds = await this.embed(plan);
    const step = await this.embed({ rows: [{ text: plan.stepText }], vectors: [], frames: [], stepText: plan.stepText });
    const rng = new Rng(request.seed);
    const firstCode = new FirstCodeSampler(config.codecVocab, audioCodes(config), config.ids.codecEos, config.talker, config.minFrames);
    const predictorVocab = staticDim(this.predictor, this.predictor.outputNames[0]!, 2, false) ?? 2048;
    const groupSampler = new Sampler(config.predictor.topK > 0 ? config.predictor.topK : predictorVocab);

    if (aborted()) return { frames: 0, reason: 'aborted' };
    let state = await this.talkerRun(embeds, plan.rows.length, 0, undefined);
    let position = plan.rows.length;
    const codes = new BigInt64Array(groups);
    const codesTensor = new ort.Tensor('int64', codes, [1, groups]);
    let frames = 0;
    while (frames < request.maxFrames) {
      if (aborted()) return { frames, reason: 'aborted' };
      const first = firstCode.sample(state.logits, frames, rng);
      if (first === config.ids.codecEos) return { frames, reason: 'eos' };
      const frame = new Int32Array(groups);
      frame[0] = first;
      codes.fill(0n);
      codes[0] = BigInt(first);
      // Groups 1…15: the predictor reads the talker state and the codes so far; row g − 1 scores group g.
      const hidden = new ort.Tensor('float32', state.hidden, [1, this.hidden]);
      for (let g = 1; g < groups; g++) {
        // A frame is 15 predictor calls (most of its time): an abort need not wait for the whole frame.
        if (aborted()) return { frames, reason: 'aborted' };
        const out = await this.predictor.run({ [this.predictorHidden]: hidden, [this.predictorCodes]: codesTensor });
        const logits = out[this.predictor.outputNames[0]!]!.data as Float32Array;
        const code = groupSampler.sample(logits.subarray((g - 1) * predictorVocab, g * predictorVocab), predictorVocab, config.predictor, rng);
        frame[g] = code;
        codes[g] = BigInt(code);
      }
      onFrame(frame);
      frames++;
      if (frames >= request.maxFrames) break;
      const next = await this.residual(codes);
      addInto(next, 0, step, 0, this.hidden);
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
    const feeds: Record<string, ort.Tensor> = {
      inputs_embeds: new ort.Tensor('float32', embeds, [1, count, this.hidden]),
      position_ids: new ort.Tensor('int64', positions, [3, 1, count]),
      attention_mask: new ort.Tensor('int64', this.ones.subarray(0, total), [1, total]),
    };
    for (const { past: name, present } of this.pairs) {
      feeds[name] = cache ? cache[present]! : new ort.Tensor('float32', new Float32Array(0), [1, this.kvHeads, 0, this.headDim]);
    }
    const out = await this.talker.run(feeds);
    const logits = out.logits!.data as Float32Array;
    const vocab = this.config.codecVocab;
    const hidden = out.hidden_states!.data as Float32Array;
    return {
      logits: logits.subarray((count - 1) * vocab, count * vocab),
      // The predictor's input: a copy, so the prefill's [T, H] states can go.
      hidden: hidden.slice((count - 1) * this.hidden, count * this.hidden),
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

/** Frames of a codes output, [1, F, G] or [1, G, F]. */
export function splitFrames(data: BigInt64Array | Int32Array, dims: readonly number[], groups: number): Int32Array[] {
  const frames: Int32Array[] = [];
  const last = dims[dims.length - 1]!;
  const count = data.length / groups;
  const framesMajor = last === groups;
  for (let f = 0; f < count; f++) {
    const frame = new Int32Array(groups);
    for (let g = 0; g < groups; g++) frame[g] = Number(framesMajor ? data[f * groups + g]! : data[g * count + f]!);
    frames.push(frame);
  }
  return frames;
}
