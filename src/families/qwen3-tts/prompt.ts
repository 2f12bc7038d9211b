import type { VoiceMode } from '../../core/tasks/speak/synthesizer.js';
import type { TtsConfig, TtsIds } from './config.js';

/**
 * The talker's prompt, as upstream's Qwen3TTSForConditionalGeneration.generate
 * (qwen_tts/core/models/modeling_qwen3_tts.py) builds it, described as rows:
 * each row is the sum of the embeddings it names, and the worker that owns
 * the embedding graphs turns rows into `inputs_embeds`.
 *
 *   [instruct]   <|im_start|>user\n{description}<|im_end|>\n     text only
 *   role         <|im_start|>assistant\n                           text only
 *   prefix       tts_pad… tts_bos  +  think/nothink, think_bos, [language], think_eos, [speaker | x-vector], codec_pad
 *
 * then the text, in one of upstream's two layouts (its `non_streaming_mode`):
 *
 *   non-streaming  each text token + codec_pad, tts_eos + codec_pad, tts_pad + codec_bos;
 *                  every generated frame is fed back with tts_pad
 *   streaming      the first text token + codec_bos; the rest of the text and tts_eos
 *                  ride on the generated frames, one token per frame, tts_pad after
 *
 * In-context cloning replaces the text block: the reference transcript, the
 * text and tts_eos on one side, codec_bos and the reference frames on the
 * other; non-streaming puts the first side (+ codec_pad) before the second
 * (+ tts_pad), streaming adds them row by row and lets the text the frames
 * do not cover trail into generation.
 */

export type PromptLayout = 'streaming' | 'non-streaming';

/**
 * Upstream's default per mode (qwen_tts/inference/qwen3_tts_model.py):
 * generate_voice_clone has non_streaming_mode=False, generate_custom_voice
 * and generate_voice_design non_streaming_mode=True.
 */
export function defaultLayout(mode: VoiceMode): PromptLayout {
  return mode === 'clone' ? 'streaming' : 'non-streaming';
}

export interface PromptRow {
  /** A text id (text_embed). */
  text?: number;
  /** A codec id (codec_embed). */
  codec?: number;
  /** An index into `vectors` (the x-vector). */
  vector?: number;
  /** An index into `frames` (a reference frame through residual_embed). */
  frame?: number;
}

export interface PromptPlan {
  rows: PromptRow[];
  vectors: Float32Array[];
  /** Reference codes, one Int32Array of `groups` codes per frame. */
  frames: Int32Array[];
  /** Text ids added, one each and in order, to the first generated frames fed back (streaming layout). */
  trailing: number[];
  /** The text id added to every fed-back frame after `trailing`. */
  stepText: number;
}

export interface PromptInput {
  /** Ids of the text to speak. */
  body: number[];
  /** Lower-case language name from the config, or undefined for automatic. */
  language?: string;
  /** Lower-case preset speaker name. */
  speaker?: string;
  /** Complete ids of the instruction block (voice design). */
  instruct?: number[];
  /** Speaker embedding of a cloned voice. */
  xvector?: Float32Array;
  /** In-context cloning: the reference transcript's ids and the reference audio's codes. */
  reference?: { body: number[]; frames: Int32Array[] };
  /** Where the text goes; the mode's default (defaultLayout) when absent. */
  layout?: PromptLayout;
}

export class PromptError extends Error {
  constructor(
    message: string,
    readonly param: string,
  ) {
    super(message);
  }
}

export function buildPrompt(config: TtsConfig, roleIds: readonly number[], input: PromptInput): PromptPlan {
  const ids = config.ids;
  const layout = input.layout ?? defaultLayout(config.mode);
  const vectors: Float32Array[] = [];
  const rows: PromptRow[] = [...(input.instruct ?? []), ...roleIds].map((text) => ({ text }));
  rows.push(...codecPrefix(config, input, vectors));
  const frames = input.reference?.frames ?? [];
  const text = input.reference ? inContext(ids, [...input.reference.body, ...input.body], frames, layout) : plain(ids, input.body, layout);
  rows.push(...text.rows);
  return { rows, vectors, frames, trailing: text.trailing, stepText: ids.ttsPad };
}

/** Language tag, speaker slot and codec_pad, on tts_pad… tts_bos (codec_bos starts the text block). */
function codecPrefix(config: TtsConfig, input: PromptInput, vectors: Float32Array[]): PromptRow[] {
  const ids = config.ids;
  let language: number | undefined;
  if (input.language !== undefined && input.language !== 'auto') {
    language = config.languages.get(input.language);
    if (language === undefined) throw new PromptError(`Unknown language '${input.language}'.`, 'language');
  }
  let speaker: number | undefined;
  if (input.speaker !== undefined) {
    speaker = config.speakers.get(input.speaker);
    if (speaker === undefined) throw new PromptError(`Unknown speaker '${input.speaker}'.`, 'voice');
    // Dialect speakers speak their dialect where the request says Chinese or leaves the language open.
    const dialect = config.dialects.get(input.speaker);
    if (dialect && (language === undefined || input.language === 'chinese')) language = config.languages.get(dialect);
  }
  const prefix: PromptRow[] = (language === undefined ? [ids.nothink, ids.thinkBos, ids.thinkEos] : [ids.think, ids.thinkBos, language, ids.thinkEos]).map((codec) => ({ codec }));
  if (speaker !== undefined) prefix.push({ codec: speaker });
  else if (input.xvector) prefix.push({ vector: vectors.push(input.xvector) - 1 });
  prefix.push({ codec: ids.codecPad });
  return prefix.map((row, i) => ({ ...row, text: i < prefix.length - 1 ? ids.ttsPad : ids.ttsBos }));
}

interface TextBlock {
  rows: PromptRow[];
  trailing: number[];
}

/** The text without a reference. */
function plain(ids: TtsIds, body: readonly number[], layout: PromptLayout): TextBlock {
  if (layout === 'streaming') return { rows: [{ text: body[0]!, codec: ids.codecBos }], trailing: [...body.slice(1), ids.ttsEos] };
  const rows = [...body, ids.ttsEos].map((text) => ({ text, codec: ids.codecPad }));
  rows.push({ text: ids.ttsPad, codec: ids.codecBos });
  return { rows, trailing: [] };
}

/** Reference transcript + text beside codec_bos + the reference frames. */
function inContext(ids: TtsIds, body: readonly number[], frames: readonly Int32Array[], layout: PromptLayout): TextBlock {
  const text = [...body, ids.ttsEos];
  const codec: PromptRow[] = [{ codec: ids.codecBos }, ...frames.map((_, frame) => ({ frame }))];
  if (layout === 'non-streaming') {
    return { rows: [...text.map((id) => ({ text: id, codec: ids.codecPad })), ...codec.map((row) => ({ ...row, text: ids.ttsPad }))], trailing: [] };
  }
  // Row by row; text beyond the frames trails into generation, frames beyond the text get tts_pad.
  return { rows: codec.map((row, i) => ({ ...row, text: text[i] ?? ids.ttsPad })), trailing: text.slice(codec.length) };
}
