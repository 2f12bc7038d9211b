import type { VoiceMode } from '../../core/tasks/speak/synthesizer.js';
import type { PredictorDims } from './prepared/predictor-graph.js';

/**
 * What the runtime reads from a Qwen3-TTS model's config.json and
 * generation_config.json, with upstream's values where a file lacks a key
 * (the control ids, language and speaker ids of the 12 Hz models).
 */

export interface TtsIds {
  imStart: number;
  imEnd: number;
  ttsPad: number;
  ttsBos: number;
  ttsEos: number;
  codecPad: number;
  codecBos: number;
  codecEos: number;
  think: number;
  nothink: number;
  thinkBos: number;
  thinkEos: number;
}

export interface Sampling {
  doSample: boolean;
  temperature: number;
  topK: number;
  topP: number;
  repetitionPenalty: number;
}

export interface TtsConfig {
  mode: VoiceMode;
  ids: TtsIds;
  /** Lower-case language name → codec id (dialects included). */
  languages: Map<string, number>;
  /** Lower-case speaker name → codec id. */
  speakers: Map<string, number>;
  /** Lower-case speaker name → the dialect (a `languages` key) that replaces Chinese or auto for that speaker. */
  dialects: Map<string, string>;
  /** Speaker names as the model's card spells them ("Uncle_Fu"), in config order. */
  speakerNames: string[];
  /** Language names, capitalised ("English"), without dialects. */
  languageNames: string[];
  codecVocab: number;
  groups: number;
  talker: Sampling;
  predictor: Sampling;
  /** Codes per generation when the request sets no cap (generation_config's max_new_tokens). */
  maxFrames: number;
  /** Frames before the talker may stop (upstream's min_new_tokens). */
  minFrames: number;
  /** Positions the talker was trained for (talker_config.max_position_embeddings): prompt and frames together. */
  maxPositions: number;
  /** The code predictor's attention and norms, for the KV-cached predictor built from its weights (prepared/). */
  predictorDims: PredictorDims;
  /** The talker's RoPE base and RMSNorm epsilon, for the GGUF converted from its weights (llama/). */
  talkerNorms: { ropeTheta: number; eps: number };
  /** Talker width, KV heads and head size, for graphs whose shapes leave them open. */
  hidden?: number;
  kvHeads?: number;
  headDim?: number;
}

export interface ModelConfigJson {
  tts_model_type?: string;
  im_start_token_id?: number;
  im_end_token_id?: number;
  tts_pad_token_id?: number;
  tts_bos_token_id?: number;
  tts_eos_token_id?: number;
  talker_config?: {
    vocab_size?: number;
    num_code_groups?: number;
    num_key_value_heads?: number;
    head_dim?: number;
    hidden_size?: number;
    num_attention_heads?: number;
    max_position_embeddings?: number;
    rope_theta?: number;
    rms_norm_eps?: number;
    codec_eos_token_id?: number;
    codec_think_id?: number;
    codec_nothink_id?: number;
    codec_think_bos_id?: number;
    codec_think_eos_id?: number;
    codec_pad_id?: number;
    codec_bos_id?: number;
    codec_language_id?: Record<string, number>;
    spk_id?: Record<string, number | number[]>;
    spk_is_dialect?: Record<string, string | false>;
    code_predictor_config?: {
      num_attention_heads?: number;
      num_key_value_heads?: number;
      head_dim?: number;
      hidden_size?: number;
      rope_theta?: number;
      rms_norm_eps?: number;
    };
  };
}

export interface GenerationConfigJson {
  do_sample?: boolean;
  temperature?: number;
  top_k?: number;
  top_p?: number;
  repetition_penalty?: number;
  subtalker_dosample?: boolean;
  subtalker_temperature?: number;
  subtalker_top_k?: number;
  subtalker_top_p?: number;
  max_new_tokens?: number;
}

/** Upstream's language ids (Qwen3TTSTalkerConfig's defaults). */
const DEFAULT_LANGUAGES: Record<string, number> = {
  chinese: 2055, english: 2050, german: 2053, italian: 2070, portuguese: 2071, spanish: 2054,
  japanese: 2058, korean: 2064, french: 2061, russian: 2069, beijing_dialect: 2074, sichuan_dialect: 2062,
};

const MODES: Record<string, VoiceMode> = { custom_voice: 'preset', voice_design: 'design', base: 'clone' };

const capitalise = (name: string) => name.split('_').map((part) => part.charAt(0).toUpperCase() + part.slice(1)).join('_');

/** Reads both files' JSON into the runtime's settings; throws on a mode it does not know. */
export function parseTtsConfig(config: ModelConfigJson, generation: GenerationConfigJson): TtsConfig {
  const mode = MODES[config.tts_model_type ?? ''];
  if (!mode) throw new Error(`config.json: unknown tts_model_type '${config.tts_model_type}' (expected custom_voice, voice_design or base)`);
  const t = config.talker_config ?? {};
  const languages = new Map(Object.entries(t.codec_language_id ?? DEFAULT_LANGUAGES).map(([name, id]) => [name.toLowerCase(), id]));
  const speakers = new Map<string, number>();
  const speakerNames: string[] = [];
  for (const [name, id] of Object.entries(t.spk_id ?? {})) {
    // Some configs list a speaker's id as a one-element array.
    const value = Array.isArray(id) ? id[0] : id;
    if (typeof value !== 'number') continue;
    speakers.set(name.toLowerCase(), value);
    speakerNames.push(capitalise(name));
  }
  const dialects = new Map<string, string>();
  for (const [name, dialect] of Object.entries(t.spk_is_dialect ?? {})) {
    if (typeof dialect === 'string' && languages.has(dialect.toLowerCase())) dialects.set(name.toLowerCase(), dialect.toLowerCase());
  }
  const sampling = (doSample: boolean | undefined, temperature: number | undefined, topK: number | undefined, topP: number | undefined, penalty: number): Sampling => ({
    doSample: doSample ?? true,
    temperature: temperature ?? 0.9,
    topK: topK ?? 50,
    topP: topP ?? 1,
    repetitionPenalty: penalty,
  });
  const g = generation;
  // Qwen3TTSTalkerCodePredictorConfig's defaults where the file lacks a key.
  const p = t.code_predictor_config ?? {};
  const predictorHeads = p.num_attention_heads ?? 16;
  return {
    mode,
    ids: {
      imStart: config.im_start_token_id ?? 151644,
      imEnd: config.im_end_token_id ?? 151645,
      ttsPad: config.tts_pad_token_id ?? 151671,
      ttsBos: config.tts_bos_token_id ?? 151672,
      ttsEos: config.tts_eos_token_id ?? 151673,
      codecPad: t.codec_pad_id ?? 2148,
      codecBos: t.codec_bos_id ?? 2149,
      codecEos: t.codec_eos_token_id ?? 2150,
      think: t.codec_think_id ?? 2154,
      nothink: t.codec_nothink_id ?? 2155,
      thinkBos: t.codec_think_bos_id ?? 2156,
      thinkEos: t.codec_think_eos_id ?? 2157,
    },
    languages,
    speakers,
    dialects,
    speakerNames,
    languageNames: [...languages.keys()].filter((name) => !name.includes('dialect')).map(capitalise),
    codecVocab: t.vocab_size ?? 3072,
    groups: t.num_code_groups ?? 16,
    talker: sampling(g.do_sample, g.temperature, g.top_k, g.top_p, g.repetition_penalty ?? 1.05),
    // Upstream samples the residual groups without a repetition penalty.
    predictor: sampling(g.subtalker_dosample, g.subtalker_temperature, g.subtalker_top_k, g.subtalker_top_p, 1),
    maxFrames: g.max_new_tokens ?? 2048,
    minFrames: 2,
    // Qwen3TTSTalkerConfig's default where the file lacks the key.
    maxPositions: t.max_position_embeddings ?? 32768,
    predictorDims: {
      heads: predictorHeads,
      kvHeads: p.num_key_value_heads ?? 8,
      headDim: p.head_dim ?? (p.hidden_size ? p.hidden_size / predictorHeads : 128),
      ropeTheta: p.rope_theta ?? 1_000_000,
      eps: p.rms_norm_eps ?? 1e-6,
    },
    talkerNorms: { ropeTheta: t.rope_theta ?? 1_000_000, eps: t.rms_norm_eps ?? 1e-6 },
    hidden: t.hidden_size,
    kvHeads: t.num_key_value_heads,
    headDim: t.head_dim ?? (t.hidden_size && t.num_attention_heads ? t.hidden_size / t.num_attention_heads : undefined),
  };
}
