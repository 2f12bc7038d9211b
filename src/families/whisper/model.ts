import { readFile, stat } from 'node:fs/promises';
import { Tokenizer } from '@huggingface/tokenizers';
import { LogMel, WHISPER_MEL } from '../../audio/mel.js';
import type { Loader, LoadOptions } from '../../core/loader.js';
import { ModelLoadError } from '../../core/errors.js';
import type { InstalledModel } from '../../core/store.js';
import type { SpeechDetector, Transcriber, Transcription, TranscriptionOptions } from '../../core/tasks/transcribe/transcriber.js';
import type { EncodedWindow, WhisperDecoder, WhisperRuntime, WhisperVocabulary } from './decode.js';
import { transcribeSamples } from './longform.js';
import { JobQueue } from '../../core/job-queue.js';
import { OnnxSession, type Feed, type Tensor } from '../../runtimes/onnx/session.js';

/**
 * Whisper over the onnx-community export (transformers.js's layout):
 * `encoder_model.onnx` (input_features → last_hidden_state) and the merged
 * decoder `decoder_model_merged.onnx` (input_ids, encoder_hidden_states,
 * past_key_values.{i}.{decoder,encoder}.{key,value}, use_cache_branch →
 * logits, present.*). Both run in worker threads; a window's encoder states
 * are sent to the decoder's worker once and every decode's KV cache stays
 * there, so a step sends one token id and gets back one row of logits.
 *
 * The "_timestamped" exports also output each layer's cross-attention
 * weights, `cross_attentions.{layer}` [1, heads, new tokens, 1500]. For word
 * timestamps a decode fetches, of those, only the alignment heads
 * (generation_config.json `alignment_heads`) at the last new position: per
 * step, one row of 1500 floats per alignment head.
 */

interface GenerationConfig {
  decoder_start_token_id?: number;
  eos_token_id?: number | number[];
  no_timestamps_token_id?: number;
  lang_to_id?: Record<string, number>;
  task_to_id?: Record<string, number>;
  suppress_tokens?: number[];
  begin_suppress_tokens?: number[];
  max_initial_timestamp_index?: number;
  /** [layer, head] pairs whose cross-attention follows the audio in time. */
  alignment_heads?: number[][];
}

interface ModelConfig {
  d_model?: number;
  decoder_attention_heads?: number;
  num_mel_bins?: number;
  max_target_positions?: number;
  vocab_size?: number;
  median_filter_width?: number;
}

/** Which heads to read, per cross_attentions output: the output's dim 1 is the head. */
interface AttentionLayer {
  output: string;
  heads: number[];
}

let nextName = 0;

class OnnxWhisperWindow implements EncodedWindow {
  /** Name of the encoder states kept in the decoder's worker, once sent. */
  readonly name = `w${nextName++}`;
  sent = false;

  constructor(
    readonly decoderSession: OnnxSession,
    /** Encoder states until they are sent to the decoder's worker. */
    public states: Tensor | undefined,
  ) {}

  /** The states as a decoder input: sent the first time, kept there after. */
  feed(): { feed: Feed; keep?: Record<string, string> } {
    if (this.sent) return { feed: { kept: this.name } };
    this.sent = true;
    const feed = this.states!;
    this.states = undefined;
    return { feed, keep: { encoder_hidden_states: this.name } };
  }

  async release(): Promise<void> {
    this.states = undefined;
    if (this.sent) await this.decoderSession.dropKept(this.name);
  }
}

class OnnxWhisperDecoder implements WhisperDecoder {
  private readonly prefix = `d${nextName++}:`;
  private started = false;
  /** Per call, the alignment heads' rows (views into the fetched outputs, no copies). */
  private readonly rows: Float32Array[][] | undefined;

  constructor(
    private readonly model: OnnxWhisper,
    private readonly window: OnnxWhisperWindow,
    collectAttention: boolean,
  ) {
    this.rows = collectAttention ? [] : undefined;
  }

  attention(): Float32Array[][] | undefined {
    return this.rows;
  }

  /** The outputs to fetch and, of the attention outputs, only the alignment heads (picked in the worker). */
  private fetches(logitRows: readonly number[]): { fetch: string[]; rows: Record<string, readonly number[]> } {
    const fetch = ['logits'];
    const rows: Record<string, readonly number[]> = { logits: logitRows };
    if (this.rows) {
      for (const layer of this.model.attentionLayers) {
        fetch.push(layer.output);
        rows[layer.output] = layer.heads;
      }
    }
    return { fetch, rows };
  }

  /** Keeps, of each fetched [1, alignment heads, positions, frames] output, the last position's row per head. */
  private collect(out: Record<string, Tensor>): void {
    if (!this.rows) return;
    const row: Float32Array[] = [];
    for (const layer of this.model.attentionLayers) {
      const { data, dims } = out[layer.output] as Tensor<'float32'>;
      const positions = dims[2]!;
      const frames = dims[3]!;
      for (let h = 0; h < layer.heads.length; h++) {
        const at = (h * positions + positions - 1) * frames;
        row.push(data.subarray(at, at + frames));
      }
    }
    this.rows.push(row);
  }

  async start(tokens: readonly number[], rows: readonly number[]): Promise<Float32Array[]> {
    const { feed, keep: keepInputs } = this.window.feed();
    const empty = (): Tensor => ({ type: 'float32', data: new Float32Array(0), dims: [1, this.model.heads, 0, this.model.headDim] });
    const feeds: Record<string, Feed> = { ...this.ids(tokens), encoder_hidden_states: feed, use_cache_branch: { type: 'bool', data: Uint8Array.of(0), dims: [1] } };
    const keep: Record<string, string> = {};
    for (let i = 0; i < this.model.layers; i++) {
      for (const part of ['decoder.key', 'decoder.value', 'encoder.key', 'encoder.value']) {
        feeds[`past_key_values.${i}.${part}`] = empty();
        keep[`present.${i}.${part}`] = `${this.prefix}${i}.${part}`;
      }
    }
    this.started = true;
    const out = await this.model.decoderSession.runWith(feeds, { ...this.fetches(rows), keep, keepInputs });
    this.collect(out);
    const logits = out.logits!.data as Float32Array;
    const size = this.model.vocabulary.size;
    return rows.map((_, i) => logits.subarray(i * size, (i + 1) * size));
  }

  async next(token: number): Promise<Float32Array> {
    const feeds: Record<string, Feed> = { ...this.ids([token]), encoder_hidden_states: this.window.feed().feed, use_cache_branch: { type: 'bool', data: Uint8Array.of(1), dims: [1] } };
    const keep: Record<string, string> = {};
    for (let i = 0; i < this.model.layers; i++) {
      for (const part of ['decoder.key', 'decoder.value', 'encoder.key', 'encoder.value']) feeds[`past_key_values.${i}.${part}`] = { kept: `${this.prefix}${i}.${part}` };
      // The encoder's K/V never change after the first step (the cache branch returns them empty): only the self-attention cache grows.
      for (const part of ['decoder.key', 'decoder.value']) keep[`present.${i}.${part}`] = `${this.prefix}${i}.${part}`;
    }
    const out = await this.model.decoderSession.runWith(feeds, { ...this.fetches([0]), keep });
    this.collect(out);
    return out.logits!.data as Float32Array;
  }

  async close(): Promise<void> {
    if (this.started) await this.model.decoderSession.dropKept(this.prefix);
  }

  private ids(tokens: readonly number[]): Record<string, Tensor> {
    return { input_ids: { type: 'int64', data: BigInt64Array.from(tokens, BigInt), dims: [1, tokens.length] } };
  }
}

export class OnnxWhisper implements WhisperRuntime, Transcriber {
  readonly crossAttentions: boolean;
  readonly layers: number;
  readonly headDim: number;
  /** The alignment heads, grouped by cross_attentions output; empty when the export has none. */
  readonly attentionLayers: readonly AttentionLayer[];
  readonly medianFilterWidth: number;

  constructor(
    readonly encoderSession: OnnxSession,
    readonly decoderSession: OnnxSession,
    private readonly tokenizer: Tokenizer,
    readonly vocabulary: WhisperVocabulary,
    readonly mel: LogMel,
    readonly textContext: number,
    readonly heads: number,
    dModel: number,
    readonly memoryBytes: number,
    readonly vad: VoiceActivityDetector,
    readonly queue: JobQueue,
    alignment: { heads?: number[][]; medianFilterWidth?: number } = {},
  ) {
    this.layers = decoderSession.inputNames.filter((n) => /^past_key_values\.\d+\.decoder\.key$/.test(n)).length;
    this.headDim = dModel / heads;
    this.attentionLayers = attentionLayers(decoderSession.outputNames, alignment.heads, this.layers, heads);
    this.crossAttentions = this.attentionLayers.length > 0;
    const width = alignment.medianFilterWidth;
    this.medianFilterWidth = width !== undefined && Number.isInteger(width) && width > 0 && width % 2 === 1 ? width : 7;
  }

  /** Word times come from the alignment heads' cross-attention: only exports that output it can give them. */
  get wordTimestamps(): boolean {
    return this.crossAttentions;
  }

  /** Whisper's long-form loop (longform.ts) over this model. */
  transcribe(samples: Float32Array, options: TranscriptionOptions, signal: AbortSignal): Promise<Transcription> {
    return transcribeSamples(this, samples, options, signal);
  }

  async encode(features: Float32Array): Promise<EncodedWindow> {
    const { nMels } = this.mel.options;
    const out = await this.encoderSession.runWith({ input_features: { type: 'float32', data: features, dims: [1, nMels, this.mel.frames] } }, { fetch: ['last_hidden_state'] });
    return new OnnxWhisperWindow(this.decoderSession, out.last_hidden_state!);
  }

  decoder(window: EncodedWindow, options: { attention?: boolean } = {}): WhisperDecoder {
    return new OnnxWhisperDecoder(this, window as OnnxWhisperWindow, Boolean(options.attention) && this.crossAttentions);
  }

  encodeText(text: string): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: false }).ids;
  }

  decodeText(tokens: readonly number[]): string {
    return this.tokenizer.decode([...tokens], { skip_special_tokens: true });
  }

  async dispose(): Promise<void> {
    await Promise.all([this.encoderSession.release(), this.decoderSession.release(), this.vad.release()]);
  }
}

/**
 * The alignment heads the export can give, grouped by layer output. Pairs
 * outside the model are dropped; without any, openai/whisper's default: every
 * head of the second half of the decoder layers. None when the decoder has no
 * cross_attentions outputs.
 */
export function attentionLayers(outputs: readonly string[], pairs: readonly number[][] | undefined, layers: number, heads: number): AttentionLayer[] {
  if (!outputs.some((name) => name.startsWith('cross_attentions.'))) return [];
  const valid = (pairs ?? []).filter((p) => p.length === 2 && p.every(Number.isInteger) && p[0]! >= 0 && p[0]! < layers && p[1]! >= 0 && p[1]! < heads);
  const chosen = valid.length > 0 ? valid : Array.from({ length: layers - Math.floor(layers / 2) }, (_, i) => Array.from({ length: heads }, (_, h) => [Math.floor(layers / 2) + i, h])).flat();
  const byLayer = new Map<number, Set<number>>();
  for (const [layer, head] of chosen) byLayer.set(layer!, (byLayer.get(layer!) ?? new Set()).add(head!));
  const groups = [...byLayer].sort(([a], [b]) => a - b).map(([layer, set]) => ({ output: `cross_attentions.${layer}`, heads: [...set].sort((a, b) => a - b) }));
  // An export that lacks a needed layer's output cannot align: treat it as having none.
  return groups.every((g) => outputs.includes(g.output)) ? groups : [];
}

/** The special ids, from generation_config.json and the tokenizer's added tokens. */
export function whisperVocabulary(generation: GenerationConfig, tokenizer: Tokenizer, size: number): WhisperVocabulary {
  const id = (text: string) => tokenizer.token_to_id(text);
  const required = (value: number | undefined, what: string) => {
    if (value === undefined) throw new Error(`generation_config.json / tokenizer.json lack ${what}`);
    return value;
  };
  const eos = Array.isArray(generation.eos_token_id) ? generation.eos_token_id[0] : generation.eos_token_id;
  const noTimestamps = required(generation.no_timestamps_token_id ?? id('<|notimestamps|>'), 'the <|notimestamps|> token');
  const languages = new Map<string, number>();
  for (const [token, value] of Object.entries(generation.lang_to_id ?? {})) languages.set(token.replace(/^<\|(.*)\|>$/, '$1'), value);
  return {
    sot: required(generation.decoder_start_token_id ?? id('<|startoftranscript|>'), 'the <|startoftranscript|> token'),
    eot: required(eos ?? id('<|endoftext|>'), 'the <|endoftext|> token'),
    transcribe: required(generation.task_to_id?.transcribe ?? id('<|transcribe|>'), 'the <|transcribe|> token'),
    translate: required(generation.task_to_id?.translate ?? id('<|translate|>'), 'the <|translate|> token'),
    noTimestamps,
    timestampBegin: noTimestamps + 1,
    sotPrev: id('<|startofprev|>'),
    sotLm: id('<|startoflm|>'),
    noSpeech: id('<|nospeech|>') ?? id('<|nocaptions|>'),
    languages,
    suppress: generation.suppress_tokens ?? [],
    beginSuppress: generation.begin_suppress_tokens ?? [],
    maxInitialTimestampIndex: generation.max_initial_timestamp_index ?? 50,
    size,
  };
}

async function readJson<T>(file: string | undefined, role: string, id: string): Promise<T> {
  if (!file) throw new ModelLoadError(`Whisper model '${id}' has no '${role}' file.`);
  return JSON.parse(await readFile(file, 'utf8')) as T;
}

/** The detector a Whisper model finds speech with (the composition root passes Silero VAD); released with the model. */
export interface VoiceActivityDetector extends SpeechDetector {
  release(): Promise<void>;
}

async function load(installed: InstalledModel, options: LoadOptions, loadVad: () => Promise<VoiceActivityDetector>): Promise<OnnxWhisper> {
  const { files, id } = installed;
  const [config, generation, tokenizerJson] = await Promise.all([
    readJson<ModelConfig>(files.config, 'config', id),
    readJson<GenerationConfig>(files.generation_config, 'generation_config', id),
    readJson<object>(files.tokenizer, 'tokenizer', id),
  ]);
  const tokenizer = new Tokenizer(tokenizerJson, {});
  const nMels = config.num_mel_bins ?? WHISPER_MEL.nMels;
  const heads = config.decoder_attention_heads;
  const dModel = config.d_model;
  if (!heads || !dModel) throw new ModelLoadError(`Whisper model '${id}': config.json lacks d_model or decoder_attention_heads.`);
  const vocabulary = whisperVocabulary(generation, tokenizer, config.vocab_size ?? tokenizer.get_vocab(true).size);
  if (!files.encoder || !files.decoder) throw new ModelLoadError(`Whisper model '${id}' needs 'encoder' and 'decoder' files.`);
  const { encoder, decoder } = await OnnxSession.createAll({ encoder: files.encoder, decoder: files.decoder }, { threads: options.threads });
  // The voice activity detector (Silero VAD, from the composition root) finds the speech in long uploads.
  const vad = await loadVad().catch(async (error: unknown) => {
    await Promise.all([encoder.release(), decoder.release()]);
    throw error;
  });
  const sizes = await Promise.all([files.encoder, files.decoder].map(async (f) => (await stat(f)).size));
  // ORT holds the weights plus working buffers: about twice the files.
  const memoryBytes = 2 * sizes.reduce((a, b) => a + b, 0);
  return new OnnxWhisper(encoder, decoder, tokenizer, vocabulary, new LogMel({ ...WHISPER_MEL, nMels }), config.max_target_positions ?? 448, heads, dModel, memoryBytes, vad, new JobQueue(options.maxQueue ?? 16, `Speech recognition model '${id}'`), {
    heads: generation.alignment_heads,
    medianFilterWidth: config.median_filter_width,
  });
}

/** The `onnx:asr` loader; `loadVad` loads a voice activity detector for each model (src/compose.ts: Silero VAD, one thread). */
export function createWhisperLoader(loadVad: () => Promise<VoiceActivityDetector>): Loader<OnnxWhisper> {
  return { load: (installed, options) => load(installed, options, loadVad) };
}
