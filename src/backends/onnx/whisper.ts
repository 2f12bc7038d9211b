import { readFile, stat } from 'node:fs/promises';
import { Tokenizer } from '@huggingface/tokenizers';
import { LogMel, WHISPER_MEL } from '../../audio/mel.js';
import type { Loader, LoadOptions } from '../../core/backend.js';
import { ModelLoadError } from '../../core/errors.js';
import type { InstalledModel } from '../../core/store.js';
import type { EncodedWindow, WhisperDecoder, WhisperRuntime, WhisperVocabulary } from '../../core/tasks/transcribe/whisper.js';
import { OnnxSession, type Feed, type Tensor } from './session.js';
import { SileroVad } from './silero-vad.js';

/**
 * Whisper over the onnx-community export (transformers.js's layout):
 * `encoder_model.onnx` (input_features → last_hidden_state) and the merged
 * decoder `decoder_model_merged.onnx` (input_ids, encoder_hidden_states,
 * past_key_values.{i}.{decoder,encoder}.{key,value}, use_cache_branch →
 * logits, present.*). Both run in worker threads; a window's encoder states
 * are sent to the decoder's worker once and every decode's KV cache stays
 * there, so a step sends one token id and gets back one row of logits.
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
}

interface ModelConfig {
  d_model?: number;
  decoder_attention_heads?: number;
  num_mel_bins?: number;
  max_target_positions?: number;
  vocab_size?: number;
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

  constructor(
    private readonly model: OnnxWhisper,
    private readonly window: OnnxWhisperWindow,
  ) {}

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
    const out = await this.model.decoderSession.runWith(feeds, { fetch: ['logits'], keep, keepInputs, rows: { logits: rows } });
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
    const out = await this.model.decoderSession.runWith(feeds, { fetch: ['logits'], keep, rows: { logits: [0] } });
    return out.logits!.data as Float32Array;
  }

  async close(): Promise<void> {
    if (this.started) await this.model.decoderSession.dropKept(this.prefix);
  }

  private ids(tokens: readonly number[]): Record<string, Tensor> {
    return { input_ids: { type: 'int64', data: BigInt64Array.from(tokens, BigInt), dims: [1, tokens.length] } };
  }
}

export class OnnxWhisper implements WhisperRuntime {
  readonly crossAttentions: boolean;
  readonly layers: number;
  readonly headDim: number;

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
    readonly vad: SileroVad,
  ) {
    this.layers = decoderSession.inputNames.filter((n) => /^past_key_values\.\d+\.decoder\.key$/.test(n)).length;
    this.headDim = dModel / heads;
    this.crossAttentions = decoderSession.outputNames.some((n) => n.startsWith('cross_attentions'));
  }

  async encode(features: Float32Array): Promise<EncodedWindow> {
    const { nMels } = this.mel.options;
    const out = await this.encoderSession.runWith({ input_features: { type: 'float32', data: features, dims: [1, nMels, this.mel.frames] } }, { fetch: ['last_hidden_state'] });
    return new OnnxWhisperWindow(this.decoderSession, out.last_hidden_state!);
  }

  decoder(window: EncodedWindow): WhisperDecoder {
    return new OnnxWhisperDecoder(this, window as OnnxWhisperWindow);
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

async function load(installed: InstalledModel, options: LoadOptions): Promise<OnnxWhisper> {
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
  // Silero VAD (bundled) finds the speech in long uploads: windows are cut at silences and silence is not decoded.
  const vad = await SileroVad.load(1).catch(async (error: unknown) => {
    await Promise.all([encoder.release(), decoder.release()]);
    throw error;
  });
  const sizes = await Promise.all([files.encoder, files.decoder].map(async (f) => (await stat(f)).size));
  // ORT holds the weights plus working buffers: about twice the files.
  const memoryBytes = 2 * sizes.reduce((a, b) => a + b, 0);
  return new OnnxWhisper(encoder, decoder, tokenizer, vocabulary, new LogMel({ ...WHISPER_MEL, nMels }), config.max_target_positions ?? 448, heads, dModel, memoryBytes, vad);
}

export const whisperLoader: Loader<OnnxWhisper> = { load };
