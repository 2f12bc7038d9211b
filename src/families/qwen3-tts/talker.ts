import ort from 'onnxruntime-node';
import { floatType, readFloats, toFloatType, type FloatType } from '../../runtimes/onnx/float-io.js';
import { bindRoles, isFloat, staticSize, type GraphValue } from './graph-io.js';
import { graphValues } from './code-predictor.js';
import type { TtsConfig } from './config.js';

/**
 * How the talker graph is wired: which inputs take the embeddings, positions
 * and mask, which outputs give the logits and hidden states, and which
 * inputs are past keys and values with their present counterparts. Exports
 * differ: int4 and fp16 ones rename outputs (`logits_Q4`) and take and give
 * float16; cache names vary (`past_key_values.0.key` / `present.0.key`,
 * `past_kv_0_1`, …). The past inputs are the rank-4 float inputs (by a
 * `past` name where a graph declares no shape); the present outputs are all
 * outputs but the logits and hidden states. They pair by a common suffix
 * when the names agree, otherwise in graph order (an exported decoder lists
 * the layers in the same order on both sides).
 */

export interface CachePair {
  past: string;
  present: string;
}

export interface TalkerBinding {
  embeds: string;
  positions: string;
  mask: string;
  logits: string;
  hidden: string;
  cache: CachePair[];
  /** Element types at the boundary: the loop converts fp32 ↔ fp16 where a graph declares fp16. */
  types: { embeds: FloatType; cache: FloatType; logits: FloatType; hidden: FloatType };
  /** Static sizes the graph declares (undefined where symbolic). */
  sizes: { hidden?: number; kvHeads?: number; headDim?: number };
}

const PAST_PREFIX = /^(past_key_values|past_kv|past)[._]?/;
const PRESENT_PREFIX = /^(present_key_values|present_kv|present)[._]?/;

const isCache = (value: GraphValue, prefix: RegExp) => isFloat(value) && (value.shape.length === 4 || (value.shape.length === 0 && prefix.test(value.name)));

/** Binds the talker's values by role; `dims` are the config's sizes, to tell logits from hidden states where the names do not. */
export function bindTalker(inputs: readonly GraphValue[], outputs: readonly GraphValue[], dims: { vocab: number; hidden?: number }): TalkerBinding {
  const pasts = inputs.filter((v) => isCache(v, PAST_PREFIX));
  const input = bindRoles(
    inputs.filter((v) => !pasts.includes(v)),
    {
      embeds: { name: 'inputs_embeds', kind: 'float', shape: [1, undefined, dims.hidden] },
      positions: { name: 'position_ids', kind: 'integer', shape: [3, 1, undefined] },
      mask: { name: 'attention_mask', kind: 'integer', shape: [1, undefined] },
    },
    'talker',
  );
  const output = bindRoles(
    outputs.filter((v) => !isCache(v, PRESENT_PREFIX)),
    {
      logits: { name: 'logits', kind: 'float', shape: [1, undefined, dims.vocab] },
      hidden: { name: 'hidden_states', kind: 'float', shape: [1, undefined, dims.hidden] },
    },
    'talker',
  );
  // Every other output is a present value (whatever its declared shape says).
  const presents = outputs.filter((v) => v !== output.logits && v !== output.hidden);
  const cache = pairCache(
    pasts.map((v) => v.name),
    presents.map((v) => v.name),
  );
  const past = pasts[0]!;
  return {
    embeds: input.embeds.name,
    positions: input.positions.name,
    mask: input.mask.name,
    logits: output.logits.name,
    hidden: output.hidden.name,
    cache,
    types: {
      embeds: floatType(input.embeds.type, `the talker's ${input.embeds.name}`),
      cache: floatType(past.type, `the talker's ${past.name}`),
      logits: floatType(output.logits.type, `the talker's ${output.logits.name}`),
      hidden: floatType(output.hidden.type, `the talker's ${output.hidden.name}`),
    },
    sizes: { hidden: staticSize(input.embeds, 2), kvHeads: staticSize(past, 1), headDim: staticSize(past, 3) },
  };
}

export function pairCache(pasts: readonly string[], presents: readonly string[]): CachePair[] {
  if (pasts.length === 0 || pasts.length !== presents.length) {
    throw new Error(`the talker graph has ${pasts.length} cache inputs and ${presents.length} cache outputs`);
  }
  const suffix = (name: string, prefix: RegExp) => name.replace(prefix, '');
  const bySuffix = new Map(presents.map((n) => [suffix(n, PRESENT_PREFIX), n]));
  if (bySuffix.size === presents.length && pasts.every((n) => bySuffix.has(suffix(n, PAST_PREFIX)))) {
    return pasts.map((past) => ({ past, present: bySuffix.get(suffix(past, PAST_PREFIX))! }));
  }
  return pasts.map((past, i) => ({ past, present: presents[i]! }));
}

/** The talker's output for the last row of a run: the first code's logits and the state the code predictor reads. */
export interface TalkerStep {
  logits: Float32Array;
  hidden: Float32Array;
}

/** A talker with its KV cache: the ONNX graph, or the GGUF on llama.cpp (llama/frame-decoders.ts). */
export interface FrameTalker {
  /** Runs `count` new rows (count × width floats) after `past` cached ones; past 0 starts an utterance afresh. */
  step(embeds: Float32Array, count: number, past: number): Promise<TalkerStep>;
  /** Positions its cache holds, where bounded. */
  readonly capacity?: number;
  release(): Promise<void>;
}

/** The published (or int8-activation) talker_cache graph: the cache travels as its present outputs. */
export class OnnxTalker implements FrameTalker {
  /** attention_mask for any length up to its size: all ones, viewed by prefix. */
  private ones = new BigInt64Array(0);
  private cache: Record<string, ort.Tensor> | undefined;

  private constructor(
    private readonly session: ort.InferenceSession,
    private readonly io: TalkerBinding,
    private readonly shape: { kvHeads: number; headDim: number; hidden: number; vocab: number },
  ) {}

  /** The talker of an opened talker_cache session, bound by role; its cache shape from the graph, else config.json. */
  static of(session: ort.InferenceSession, config: Pick<TtsConfig, 'codecVocab' | 'hidden' | 'kvHeads' | 'headDim'>): OnnxTalker {
    const io = bindTalker(graphValues(session.inputMetadata), graphValues(session.outputMetadata), { vocab: config.codecVocab, hidden: config.hidden });
    const kvHeads = io.sizes.kvHeads ?? config.kvHeads;
    const headDim = io.sizes.headDim ?? config.headDim;
    const hidden = io.sizes.hidden ?? config.hidden;
    if (!kvHeads || !headDim || !hidden) throw new Error('cannot tell the talker cache shape from the graph or config.json');
    return new OnnxTalker(session, io, { kvHeads, headDim, hidden, vocab: config.codecVocab });
  }

  /** Floats in a row it reads and in the state it gives. */
  get width(): number {
    return this.shape.hidden;
  }

  async step(embeds: Float32Array, count: number, past: number): Promise<TalkerStep> {
    const { io, shape } = this;
    const total = past + count;
    if (this.ones.length < total) this.ones = new BigInt64Array(Math.max(total, 2 * this.ones.length, 1024)).fill(1n);
    const positions = new BigInt64Array(3 * count);
    for (let row = 0; row < 3; row++) for (let i = 0; i < count; i++) positions[row * count + i] = BigInt(past + i);
    const feeds: Record<string, ort.Tensor> = {
      [io.embeds]: new ort.Tensor(io.types.embeds, toFloatType(embeds, io.types.embeds), [1, count, shape.hidden]),
      [io.positions]: new ort.Tensor('int64', positions, [3, 1, count]),
      [io.mask]: new ort.Tensor('int64', this.ones.subarray(0, total), [1, total]),
    };
    // The cache stays in the graph's own type: presents go back as pasts untouched.
    const empty = io.types.cache === 'float16' ? new Uint16Array(0) : new Float32Array(0);
    const cache = past > 0 ? this.cache : undefined;
    for (const { past: name, present } of io.cache) {
      feeds[name] = cache ? cache[present]! : new ort.Tensor(io.types.cache, empty, [1, shape.kvHeads, 0, shape.headDim]);
    }
    const out = await this.session.run(feeds);
    this.cache = out as Record<string, ort.Tensor>;
    const logits = out[io.logits]!;
    const hidden = out[io.hidden]!;
    return {
      logits: readFloats(logits.type, logits.data, (count - 1) * shape.vocab, count * shape.vocab),
      // The predictor's input: a copy, so the prefill's [T, H] states can go.
      hidden: readFloats(hidden.type, hidden.data, (count - 1) * shape.hidden, count * shape.hidden).slice(),
    };
  }

  async release(): Promise<void> {
    this.cache = undefined;
    await this.session.release();
  }
}
