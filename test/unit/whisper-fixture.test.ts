import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OnnxSession, type Feed, type Tensor } from '../../src/runtimes/onnx/session.js';
import {
  TINY_WHISPER,
  WHISPER_FILES,
  WHISPER_LANGUAGES,
  WHISPER_TOKENS,
  WHISPER_VOCAB_SIZE,
  tinyWhisperModel,
  whisperDecoderInputNames,
  whisperDecoderOutputNames,
} from '../fixtures/onnx/whisper.js';

/**
 * The synthetic Whisper model has the onnx-community export's interface and
 * semantics: encoder shapes, the merged decoder's inputs and outputs in the
 * real order, a KV cache that gives the same logits as decoding all at once,
 * and a tokenizer with Whisper's special tokens at their real ids.
 */

const { heads, dModel, decoderLayers } = TINY_WHISPER;
const headDim = dModel / heads;
const SOT = WHISPER_TOKENS.startOfTranscript;
const PROMPT = [SOT, WHISPER_TOKENS.firstLanguage, WHISPER_TOKENS.transcribe, WHISPER_TOKENS.noTimestamps];

let dir: string;
let encoder: OnnxSession;
let decoder: OnnxSession;
let states: Float32Array;

function features(seed: number): Float32Array {
  const out = new Float32Array(80 * 3000);
  let x = seed;
  for (let i = 0; i < out.length; i++) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    out[i] = (x / 0x7fffffff) * 2 - 1;
  }
  return out;
}

const f32 = (data: Float32Array, dims: number[]): Tensor => ({ type: 'float32', data, dims });
const ids = (tokens: number[]): Tensor => ({ type: 'int64', data: BigInt64Array.from(tokens.map(BigInt)), dims: [1, tokens.length] });
const flag = (on: boolean): Tensor => ({ type: 'bool', data: Uint8Array.of(on ? 1 : 0), dims: [1] });

/** Feeds of a first step (no cache): every past_key_values.* empty, as transformers.js sends them. */
function firstStep(tokens: number[], encoderStates: Float32Array): Record<string, Feed> {
  const feeds: Record<string, Feed> = {
    input_ids: ids(tokens),
    encoder_hidden_states: f32(encoderStates.slice(), [1, 1500, dModel]),
    use_cache_branch: flag(false),
  };
  for (let i = 0; i < decoderLayers; i++) {
    for (const name of ['decoder.key', 'decoder.value', 'encoder.key', 'encoder.value']) {
      feeds[`past_key_values.${i}.${name}`] = f32(new Float32Array(0), [1, heads, 0, headDim]);
    }
  }
  return feeds;
}

function row(logits: Tensor, position: number): Float32Array {
  const data = logits.data as Float32Array;
  return data.slice(position * WHISPER_VOCAB_SIZE, (position + 1) * WHISPER_VOCAB_SIZE);
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i]! - b[i]!));
  return max;
}

beforeAll(async () => {
  dir = await tinyWhisperModel();
  [encoder, decoder] = await Promise.all([
    OnnxSession.create(path.join(dir, WHISPER_FILES.encoder), { threads: 1 }),
    OnnxSession.create(path.join(dir, WHISPER_FILES.decoder), { threads: 1 }),
  ]);
  const out = await encoder.runWith({ input_features: f32(features(1), [1, 80, 3000]) }, { fetch: ['last_hidden_state'] });
  states = out.last_hidden_state!.data as Float32Array;
});

afterAll(async () => {
  await Promise.all([encoder?.release(), decoder?.release()]);
});

describe('synthetic Whisper encoder', () => {
  it('maps input_features [1, 80, 3000] to last_hidden_state [1, 1500, d_model], as a function of the input', async () => {
    expect(encoder.inputNames).toEqual(['input_features']);
    expect(encoder.outputNames).toEqual(['last_hidden_state']);
    expect(encoder.inputShape()).toEqual(['batch_size', 'feature_size', 'encoder_sequence_length']);
    expect(encoder.outputShape()).toEqual(['batch_size', 1500, dModel]);
    expect(states.length).toBe(1500 * dModel);
    expect(states.every(Number.isFinite)).toBe(true);
    const other = await encoder.runWith({ input_features: f32(features(2), [1, 80, 3000]) }, { fetch: ['last_hidden_state'] });
    expect(other.last_hidden_state!.dims).toEqual([1, 1500, dModel]);
    expect(maxAbsDiff(states, other.last_hidden_state!.data as Float32Array)).toBeGreaterThan(0.01);
  });
});

describe('synthetic Whisper merged decoder', () => {
  it('has the optimum merged decoder inputs and outputs, in order', () => {
    expect(decoder.inputNames).toEqual(whisperDecoderInputNames(decoderLayers));
    expect(decoder.inputNames[0]).toBe('input_ids');
    expect(decoder.inputNames[1]).toBe('encoder_hidden_states');
    expect(decoder.inputNames[2]).toBe('past_key_values.0.decoder.key');
    expect(decoder.inputNames.at(-1)).toBe('use_cache_branch');
    expect(decoder.outputNames).toEqual(whisperDecoderOutputNames(decoderLayers));
    expect(decoder.outputNames.slice(0, 5)).toEqual(['logits', 'present.0.decoder.key', 'present.0.decoder.value', 'present.0.encoder.key', 'present.0.encoder.value']);
  });

  it('gives the same logits with the KV cache as decoding the whole prompt at once', async () => {
    const whole = await decoder.runWith(firstStep(PROMPT, states), { fetch: ['logits', 'present.0.decoder.key', 'present.0.encoder.key'] });
    expect(whole.logits!.dims).toEqual([1, 4, WHISPER_VOCAB_SIZE]);
    expect(whole['present.0.decoder.key']!.dims).toEqual([1, heads, 4, headDim]);
    expect(whole['present.0.encoder.key']!.dims).toEqual([1, heads, 1500, headDim]);

    // The first three tokens without cache; their present.* stay in the worker.
    const keep: Record<string, string> = {};
    for (const name of whisperDecoderOutputNames(decoderLayers).slice(1)) keep[name] = `t.${name}`;
    const prefix = await decoder.runWith(firstStep(PROMPT.slice(0, 3), states), { fetch: ['logits'], keep });
    // Causal: a later token does not change an earlier position's logits.
    expect(maxAbsDiff(row(prefix.logits!, 2), row(whole.logits!, 2))).toBeLessThan(1e-4);

    // The fourth token with the cache. encoder_hidden_states is still fed (the cache branch ignores it).
    const feeds: Record<string, Feed> = {
      input_ids: ids(PROMPT.slice(3)),
      encoder_hidden_states: f32(states.slice(), [1, 1500, dModel]),
      use_cache_branch: flag(true),
    };
    for (let i = 0; i < decoderLayers; i++) {
      for (const name of ['decoder.key', 'decoder.value', 'encoder.key', 'encoder.value']) {
        feeds[`past_key_values.${i}.${name}`] = { kept: `t.present.${i}.${name}` };
      }
    }
    const step = await decoder.runWith(feeds, { fetch: ['logits', 'present.0.decoder.key', 'present.0.encoder.key', 'present.0.encoder.value'] });
    expect(step.logits!.dims).toEqual([1, 1, WHISPER_VOCAB_SIZE]);
    expect(maxAbsDiff(row(step.logits!, 0), row(whole.logits!, 3))).toBeLessThan(1e-4);
    // Self-attention K/V grow by one; the cache branch's encoder K/V come back empty, as optimum merges them,
    // so a caller keeps the first step's.
    expect(step['present.0.decoder.key']!.dims).toEqual([1, heads, 4, headDim]);
    expect(step['present.0.encoder.key']!.dims).toEqual([0, heads, 1, headDim]);
    expect(step['present.0.encoder.value']!.dims).toEqual([0, heads, 1, headDim]);
    await decoder.dropKept();
  });

  it('computes logits from both the tokens and the encoder states', async () => {
    const base = await decoder.runWith(firstStep([SOT], states), { fetch: ['logits'] });
    const otherToken = await decoder.runWith(firstStep([WHISPER_TOKENS.startOfPrev], states), { fetch: ['logits'] });
    const otherAudio = await decoder.runWith(firstStep([SOT], states.map((v, i) => (i % 7 === 0 ? -v : v))), { fetch: ['logits'] });
    expect(maxAbsDiff(row(base.logits!, 0), row(otherToken.logits!, 0))).toBeGreaterThan(0.01);
    expect(maxAbsDiff(row(base.logits!, 0), row(otherAudio.logits!, 0))).toBeGreaterThan(0.01);
  });
});

describe('synthetic Whisper tokenizer and configs', () => {
  let tokenizer: Tokenizer;

  beforeAll(async () => {
    tokenizer = new Tokenizer(JSON.parse(await readFile(path.join(dir, WHISPER_FILES.tokenizer), 'utf8')), {});
  });

  it('loads with @huggingface/tokenizers and round-trips text', () => {
    const plain = tokenizer.encode('Hello world', { add_special_tokens: false });
    expect(plain.ids).toEqual([15496, 995]); // GPT-2's ids for "Hello", " world"
    expect(tokenizer.decode(plain.ids)).toBe('Hello world');
    // The saved post-processor prefixes <|startoftranscript|><|notimestamps|> and appends <|endoftext|>.
    const framed = tokenizer.encode('Hello world');
    expect(framed.ids).toEqual([SOT, WHISPER_TOKENS.noTimestamps, 15496, 995, WHISPER_TOKENS.endOfText]);
    expect(tokenizer.decode(framed.ids, { skip_special_tokens: true })).toBe('Hello world');
    const text = ' Grüße, 世界! It’s 3.14…';
    expect(tokenizer.decode(tokenizer.encode(text, { add_special_tokens: false }).ids)).toBe(text);
  });

  it('puts Whisper’s special tokens at their real ids', () => {
    const id = (token: string) => tokenizer.token_to_id(token);
    expect(id('<|endoftext|>')).toBe(50257);
    expect(id('<|startoftranscript|>')).toBe(50258);
    expect(id('<|en|>')).toBe(50259);
    expect(id('<|zh|>')).toBe(50260);
    expect(id('<|de|>')).toBe(50261);
    expect(id('<|ko|>')).toBe(50264);
    expect(id('<|ja|>')).toBe(50266);
    expect(id('<|su|>')).toBe(50357);
    expect(id('<|translate|>')).toBe(50358);
    expect(id('<|transcribe|>')).toBe(50359);
    expect(id('<|startoflm|>')).toBe(50360);
    expect(id('<|startofprev|>')).toBe(50361);
    expect(id('<|nospeech|>')).toBe(50362);
    expect(id('<|notimestamps|>')).toBe(50363);
    expect(id('<|0.00|>')).toBe(50364);
    expect(id('<|0.02|>')).toBe(50365);
    expect(id('<|30.00|>')).toBe(51864);
    expect(tokenizer.id_to_token(50256)).toBeDefined(); // the multilingual layout's 50257th text token
    expect(tokenizer.get_vocab(true).size).toBe(WHISPER_VOCAB_SIZE);
    expect(tokenizer.encode('<|startoftranscript|><|fr|><|transcribe|>', { add_special_tokens: false }).ids).toEqual([50258, 50265, 50359]);
    expect(tokenizer.decode([50364, 15496, 50414])).toBe('<|0.00|>Hello<|1.00|>');
  });

  it('writes config.json, generation_config.json and preprocessor_config.json with whisper-base’s keys', async () => {
    const read = async (file: string) => JSON.parse(await readFile(path.join(dir, file), 'utf8')) as Record<string, unknown>;
    const config = await read(WHISPER_FILES.config);
    expect(config).toMatchObject({
      model_type: 'whisper',
      d_model: dModel,
      encoder_layers: TINY_WHISPER.encoderLayers,
      decoder_layers: decoderLayers,
      encoder_attention_heads: heads,
      decoder_attention_heads: heads,
      num_mel_bins: 80,
      vocab_size: WHISPER_VOCAB_SIZE,
      max_source_positions: 1500,
      max_target_positions: 448,
      decoder_start_token_id: 50258,
    });
    const generation = await read(WHISPER_FILES.generation_config);
    expect(generation).toMatchObject({
      decoder_start_token_id: 50258,
      eos_token_id: 50257,
      no_timestamps_token_id: 50363,
      is_multilingual: true,
      task_to_id: { transcribe: 50359, translate: 50358 },
      begin_suppress_tokens: [220, 50257],
      max_initial_timestamp_index: 50,
      max_length: 448,
    });
    const langs = generation.lang_to_id as Record<string, number>;
    expect(Object.keys(langs)).toHaveLength(WHISPER_LANGUAGES.length);
    expect(langs).toMatchObject({ '<|en|>': 50259, '<|zh|>': 50260, '<|de|>': 50261, '<|su|>': 50357 });
    for (const [token, tokenId] of Object.entries(langs)) expect(tokenizer.token_to_id(token)).toBe(tokenId);
    expect(generation.suppress_tokens).toContain(50362);
    expect(generation.alignment_heads).toEqual(expect.arrayContaining([expect.any(Array)]));
    expect(await read(WHISPER_FILES.preprocessor_config)).toMatchObject({
      feature_size: 80,
      hop_length: 160,
      n_fft: 400,
      n_samples: 480000,
      nb_max_frames: 3000,
      sampling_rate: 16000,
      chunk_length: 30,
    });
  });
});
