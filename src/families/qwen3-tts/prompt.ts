import type { TtsConfig } from './config.js';

/**
 * The talker's prompt, as upstream's Qwen3TTSForConditionalGeneration.generate
 * builds it in non-streaming mode (all text in the prompt), described as rows:
 * each row is the sum of the embeddings it names, and the worker that owns
 * the embedding graphs turns rows into `inputs_embeds`.
 *
 *   [instruct]   <|im_start|>user\n{description}<|im_end|>\n     text only
 *   role         <|im_start|>assistant\n                           text only
 *   prefix       tts_pad… tts_bos  +  think/nothink, think_bos, [language], think_eos, [speaker | x-vector], codec_pad
 *   text         each text token + codec_pad, tts_eos + codec_pad, then tts_pad + codec_bos
 *   (ICL clone)  reference and target text tokens + codec_pad, tts_eos + codec_pad,
 *                tts_pad + codec_bos, then tts_pad + each reference frame
 *
 * Every generated frame is fed back as residual_embed(frame) + tts_pad.
 */

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
  /** The text id added to every fed-back frame. */
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
  const rows: PromptRow[] = [];
  const vectors: Float32Array[] = [];
  for (const text of input.instruct ?? []) rows.push({ text });
  for (const text of roleIds) rows.push({ text });

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
  // The last codec row (codec_bos) is not in this block: it starts the text or reference block.
  prefix.forEach((row, i) => rows.push({ ...row, text: i < prefix.length - 1 ? ids.ttsPad : ids.ttsBos }));

  const frames = input.reference?.frames ?? [];
  for (const text of [...(input.reference?.body ?? []), ...input.body]) rows.push({ text, codec: ids.codecPad });
  rows.push({ text: ids.ttsEos, codec: ids.codecPad });
  rows.push({ text: ids.ttsPad, codec: ids.codecBos });
  frames.forEach((_, frame) => rows.push({ text: ids.ttsPad, frame }));
  return { rows, vectors, frames, stepText: ids.ttsPad };
}
