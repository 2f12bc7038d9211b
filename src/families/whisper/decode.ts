import type { LogMel } from '../../audio/mel.js';
import type { LoadedModel } from '../../core/loader.js';

/**
 * What the Whisper decoding loop needs from a runtime (families/whisper/model.ts
 * implements it over the onnx-community export): features, one encoder run
 * per 30 s window, and incremental decoder steps whose KV cache stays with the
 * runtime.
 */

/**
 * Attention of a window's decoded positions: `rows[r][h]` holds alignment
 * head h's weights over the encoder frames at the position whose logits chose
 * decoded token r (the last prompt token for the first one), at least as many
 * frames as the window holds.
 */
export type AttentionRows = ReadonlyArray<ReadonlyArray<Float32Array>>;

/** Special token ids, from the model's generation_config.json and tokenizer. */
export interface WhisperVocabulary {
  sot: number;
  eot: number;
  transcribe: number;
  translate: number;
  noTimestamps: number;
  /** First timestamp token (<|0.00|>); timestamps step 0.02 s. */
  timestampBegin: number;
  sotPrev?: number;
  sotLm?: number;
  noSpeech?: number;
  /** Language code → token id, in the model's order ('en' → 50259 …); empty for English-only models. */
  languages: ReadonlyMap<string, number>;
  /** Tokens never sampled (generation_config.suppress_tokens). */
  suppress: readonly number[];
  /** Tokens not sampled first (a blank, end of text). */
  beginSuppress: readonly number[];
  /** Latest timestamp the first token may be (index past timestampBegin). */
  maxInitialTimestampIndex: number;
  size: number;
}

export interface WhisperDecoder {
  /** Evaluates the prompt and returns the logits at `rows` (positions within `tokens`). */
  start(tokens: readonly number[], rows: readonly number[]): Promise<Float32Array[]>;
  /** Appends one token; returns the logits after it. */
  next(token: number): Promise<Float32Array>;
  /** Frees the cache the runtime held for this decode. */
  close(): Promise<void>;
  /**
   * With `attention` asked of runtime.decoder(): the alignment heads'
   * cross-attention rows collected so far, one per start()/next() call — the
   * row of the last position it evaluated, whose logits choose the next token.
   */
  attention?(): AttentionRows | undefined;
}

/** One window's encoder output, held by the runtime until released. */
export interface EncodedWindow {
  release(): Promise<void>;
}

export interface WhisperRuntime extends LoadedModel {
  readonly vocabulary: WhisperVocabulary;
  readonly mel: LogMel;
  /** Tokens the decoder attends to at most (n_text_ctx, 448). */
  readonly textContext: number;
  /** Whether the export has cross-attention outputs for its alignment heads (needed for word timestamps). */
  readonly crossAttentions: boolean;
  /** Width of the median filter over the alignment heads' attention (config.json median_filter_width, 7). */
  readonly medianFilterWidth?: number;
  /** Voice activity detection: speech probability per 32 ms (512 samples at 16 kHz). */
  readonly vad?: { probabilities(samples: Float32Array, signal?: AbortSignal): Promise<Float32Array> };
  encode(features: Float32Array): Promise<EncodedWindow>;
  /** A decode of `window`; with `attention` (only where crossAttentions) it collects the alignment heads' rows. */
  decoder(window: EncodedWindow, options?: { attention?: boolean }): WhisperDecoder;
  encodeText(text: string): number[];
  decodeText(tokens: readonly number[]): string;
}

export interface DecodeOptions {
  language: number;
  task: 'transcribe' | 'translate';
  timestamps: boolean;
  temperature: number;
  /** Text tokens of the previous window or the user's prompt, conditioning this one. */
  prompt: readonly number[];
  random: () => number;
  signal: AbortSignal;
  /** Collect the alignment heads' cross-attention of every decoded token (for word timestamps). */
  attention?: boolean;
}

export interface DecodeResult {
  /** Sampled tokens, without the end of text. */
  tokens: number[];
  avgLogprob: number;
  noSpeechProb: number;
  temperature: number;
  /** Whether the window ended on <|endoftext|> (rather than at the length limit). */
  endedWithEot?: boolean;
  /** With DecodeOptions.attention: row k is the attention that chose token k (one more for the end of text, when it was reached). */
  attention?: AttentionRows;
}

/** Tokens a window may sample: half the text context, as openai/whisper does. */
export function sampleLength(runtime: WhisperRuntime): number {
  return Math.floor(runtime.textContext / 2);
}

/** The prompt a window starts from: [<|startofprev|> prompt…] <|startoftranscript|> <|lang|> <|task|> [<|notimestamps|>]. */
export function initialTokens(vocabulary: WhisperVocabulary, options: Pick<DecodeOptions, 'language' | 'task' | 'timestamps' | 'prompt'>, textContext: number): { tokens: number[]; sotIndex: number } {
  const sequence = [vocabulary.sot];
  if (vocabulary.languages.size > 0) sequence.push(options.language, options.task === 'translate' ? vocabulary.translate : vocabulary.transcribe);
  if (!options.timestamps) sequence.push(vocabulary.noTimestamps);
  if (options.prompt.length === 0 || vocabulary.sotPrev === undefined) return { tokens: sequence, sotIndex: 0 };
  const prompt = options.prompt.slice(-(Math.floor(textContext / 2) - 1));
  return { tokens: [vocabulary.sotPrev, ...prompt, ...sequence], sotIndex: prompt.length + 1 };
}

/** Detects the spoken language: one decoder step on <|startoftranscript|>, the likeliest language token. */
export async function detectLanguage(runtime: WhisperRuntime, window: EncodedWindow): Promise<{ code: string; token: number; probability: number }> {
  const { vocabulary } = runtime;
  const decoder = runtime.decoder(window);
  try {
    const [logits] = await decoder.start([vocabulary.sot], [0]);
    let best = { code: 'en', token: vocabulary.languages.get('en') ?? -1, logit: -Infinity };
    let max = -Infinity;
    for (const [, token] of vocabulary.languages) max = Math.max(max, logits![token]!);
    let sum = 0;
    for (const [code, token] of vocabulary.languages) {
      const logit = logits![token]!;
      sum += Math.exp(logit - max);
      if (logit > best.logit) best = { code, token, logit };
    }
    return { code: best.code, token: best.token, probability: Math.exp(best.logit - max) / sum };
  } finally {
    await decoder.close();
  }
}

/**
 * One window, one temperature: openai/whisper's decoding with its logit
 * filters — blank and end-of-text suppressed first, the model's suppressed
 * tokens always, and the timestamp rules (pairs, monotonic, the first token a
 * timestamp no later than 1 s, a timestamp forced when all of them together
 * outweigh any text token).
 */
export async function decodeWindow(runtime: WhisperRuntime, window: EncodedWindow, options: DecodeOptions): Promise<DecodeResult> {
  const { vocabulary } = runtime;
  const { tokens: prompt, sotIndex } = initialTokens(vocabulary, options, runtime.textContext);
  const limit = Math.min(sampleLength(runtime), runtime.textContext - prompt.length);
  const suppressed = alwaysSuppressed(vocabulary);
  const decoder = runtime.decoder(window, { attention: options.attention });
  const sampled: number[] = [];
  const weights = new Float64Array(vocabulary.size);
  let sumLogprob = 0;
  let noSpeechProb = 0;
  let endedWithEot = false;
  try {
    const rows = await decoder.start(prompt, sotIndex === prompt.length - 1 ? [sotIndex] : [sotIndex, prompt.length - 1]);
    if (vocabulary.noSpeech !== undefined) noSpeechProb = Math.exp(logSoftmaxAt(rows[0]!, vocabulary.noSpeech));
    let logits = rows.at(-1)!;
    for (let i = 0; i < limit; i++) {
      options.signal.throwIfAborted();
      // The logits arrived in a fresh buffer: filter them in place.
      const filtered = logits;
      for (const token of suppressed) filtered[token] = -Infinity;
      if (i === 0) for (const token of vocabulary.beginSuppress) filtered[token] = -Infinity;
      if (options.timestamps) applyTimestampRules(filtered, sampled, vocabulary, i === 0);
      const { token, logprob } = pick(filtered, options.temperature, options.random, weights);
      if (token < 0) break;
      // The end of text counts in the mean log-probability (transformers' _retrieve_avg_logprobs, openai/whisper).
      sumLogprob += logprob;
      if (token === vocabulary.eot) {
        endedWithEot = true;
        break;
      }
      sampled.push(token);
      if (i + 1 < limit) logits = await decoder.next(token);
    }
  } finally {
    await decoder.close();
  }
  const attention = options.attention ? decoder.attention?.() : undefined;
  // Mean over the tokens scored: the sampled ones and the end of text when it came (transformers divides
  // by the sampled count alone when a window stops at the length limit; openai/whisper by count + 1).
  const scored = sampled.length + (endedWithEot ? 1 : 0);
  return { tokens: sampled, avgLogprob: scored > 0 ? sumLogprob / scored : 0, noSpeechProb, endedWithEot, temperature: options.temperature, ...(attention ? { attention } : {}) };
}

/** openai/whisper's default suppressed set: the model's list plus task and start tokens. */
function alwaysSuppressed(v: WhisperVocabulary): number[] {
  return [...v.suppress, v.transcribe, v.translate, v.sot, ...[v.sotPrev, v.sotLm, v.noSpeech].filter((t): t is number => t !== undefined)];
}

export function applyTimestampRules(logits: Float32Array, sampled: readonly number[], v: WhisperVocabulary, first: boolean): void {
  const begin = v.timestampBegin;
  logits[v.noTimestamps] = -Infinity;
  const last = sampled.at(-1);
  const lastWasTimestamp = last !== undefined && last >= begin;
  const penultimateWasTimestamp = sampled.length < 2 || sampled.at(-2)! >= begin;
  if (lastWasTimestamp) {
    // A timestamp pair closes a segment (text may follow); a lone one opens it (text must follow, or the end).
    if (penultimateWasTimestamp) logits.fill(-Infinity, begin);
    else logits.fill(-Infinity, 0, v.eot);
  }
  const timestamps = sampled.filter((t) => t >= begin);
  if (timestamps.length > 0) {
    // Never go back in time; a closed segment's end may be the next one's start.
    const floor = lastWasTimestamp && !penultimateWasTimestamp ? timestamps.at(-1)! : timestamps.at(-1)! + 1;
    logits.fill(-Infinity, begin, floor);
  }
  if (first) {
    logits.fill(-Infinity, 0, begin);
    logits.fill(-Infinity, begin + v.maxInitialTimestampIndex + 1);
  }
  // If the timestamps together are likelier than any text token, sample a
  // timestamp (log-softmax's normaliser is common to both sides: compare raw logits).
  let bestText = -Infinity;
  for (let t = 0; t < begin; t++) if (logits[t]! > bestText) bestText = logits[t]!;
  let max = -Infinity;
  for (let t = begin; t < logits.length; t++) if (logits[t]! > max) max = logits[t]!;
  if (max === -Infinity) return;
  let sum = 0;
  for (let t = begin; t < logits.length; t++) sum += Math.exp(logits[t]! - max);
  if (max + Math.log(sum) > bestText) logits.fill(-Infinity, 0, begin);
}

/**
 * The next token — the likeliest, or sampled at `temperature` — and its log
 * probability under the filtered logits, in two passes over the vocabulary
 * (three when sampling), into a reused buffer: this runs once per decoded
 * token. Token −1 when every logit is filtered out.
 */
function pick(logits: Float32Array, temperature: number, random: () => number, weights: Float64Array): { token: number; logprob: number } {
  let max = -Infinity;
  let best = -1;
  for (let i = 0; i < logits.length; i++) {
    if (logits[i]! > max) {
      max = logits[i]!;
      best = i;
    }
  }
  if (best < 0) return { token: -1, logprob: 0 };
  let sum = 0;
  if (temperature > 0) {
    const inverse = 1 / temperature;
    let total = 0;
    for (let i = 0; i < logits.length; i++) {
      const d = logits[i]! - max;
      sum += Math.exp(d);
      total += weights[i] = Math.exp(d * inverse);
    }
    let r = random() * total;
    for (let i = 0; i < logits.length; i++) {
      r -= weights[i]!;
      if (r <= 0 && weights[i]! > 0) {
        best = i;
        break;
      }
    }
  } else {
    for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i]! - max);
  }
  return { token: best, logprob: logits[best]! - max - Math.log(sum) };
}

function logSoftmaxAt(logits: Float32Array, index: number): number {
  let max = -Infinity;
  for (const v of logits) if (v > max) max = v;
  let sum = 0;
  for (const v of logits) sum += Math.exp(v - max);
  return logits[index]! - max - Math.log(sum);
}
