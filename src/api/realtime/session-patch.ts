import { z } from 'zod';
import type { ChatTool, ChatToolChoice } from '../../core/tasks/chat.js';
import { type EventContext, parseWith } from './errors.js';
import {
  betaAudioFormat,
  betaTurnDetection,
  gaAudioFormat,
  gaTurnDetection,
  maxOutputTokens,
  modalities,
  name,
  noiseReduction,
  noPrompt,
  speed,
  temperature,
  text,
  toolChoice,
  tools,
  transcription,
  type TurnDetectionPatch,
  voice,
  withoutUndefined,
} from './fields.js';
import type { AudioFormat, Dialect, InputTranscription, SessionConfig } from './types.js';

/**
 * What one session.update asks to change, read from either dialect's
 * session object: GA's nested one (`audio.input.format`, …) or the beta's
 * flat one (`input_audio_format: 'pcm16'`, …). Absent fields stay as they
 * are (session-config.ts merges); null turns transcription or turn
 * detection off.
 */
export interface SessionPatch {
  type?: SessionConfig['type'];
  model?: string;
  instructions?: string;
  outputModalities?: SessionConfig['outputModalities'];
  inputFormat?: AudioFormat;
  transcription?: InputTranscription | null;
  turnDetection?: TurnDetectionPatch | null;
  outputFormat?: AudioFormat;
  voice?: string;
  /** lserve's own field (GA `audio.output.model`, beta `speech_model`): which installed speech model speaks. */
  speechModel?: string;
  /** lserve's own fields, as /v1/audio/speech names them: a designed voice, a cloned one (the reference as sent); null clears. */
  voiceDescription?: string | null;
  refAudio?: string | null;
  refText?: string | null;
  speed?: number;
  tools?: ChatTool[];
  toolChoice?: ChatToolChoice;
  /** 'inf': no limit. */
  maxOutputTokens?: number | 'inf';
  temperature?: number;
}

/*
 * Fields accepted with no effect, so that OpenAI's SDKs and agents
 * frameworks, which send them routinely, work unchanged:
 * - include ['item.input_audio_transcription.logprobs']: lserve's
 *   transcription events carry no logprobs;
 * - tracing: OpenAI's dashboard traces;
 * - truncation: lserve's chat engine fits the conversation to the model's
 *   context on its own;
 * - noise_reduction: no noise suppression (the VAD takes audio as it comes);
 * - parallel_tool_calls, reasoning: the chat model's own behaviour applies;
 * - the beta's client_secret: for OpenAI's REST session creation.
 * `prompt` is accepted only as null (see fields.ts).
 */
const include = z.array(z.literal('item.input_audio_transcription.logprobs')).nullable();
const tracing = z.union([z.literal('auto'), z.strictObject({ group_id: z.string().optional(), metadata: z.unknown().optional(), workflow_name: z.string().optional() })]).nullable();
const truncation = z.union([z.enum(['auto', 'disabled']), z.looseObject({ type: z.literal('retention_ratio') })]);
const reasoning = z.strictObject({ effort: z.enum(['minimal', 'low', 'medium', 'high', 'xhigh']).optional() });

const gaInput = {
  format: gaAudioFormat.optional(),
  transcription: transcription.nullable().optional(),
  turn_detection: gaTurnDetection.optional(),
  noise_reduction: noiseReduction.optional(),
};

/** lserve's own voice fields (the speech API's): a voice-design model's description, a voice-clone model's reference and its transcript. */
const ownVoice = {
  voice_description: text.nullable().optional(),
  ref_audio: z.string().min(1).nullable().optional(),
  ref_text: text.nullable().optional(),
};

const gaRealtime = z.strictObject({
  type: z.literal('realtime').optional(),
  model: name.optional(),
  instructions: text.optional(),
  output_modalities: modalities.optional(),
  audio: z
    .strictObject({
      input: z.strictObject(gaInput).optional(),
      output: z.strictObject({ format: gaAudioFormat.optional(), voice: voice.optional(), model: name.optional(), speed: speed.optional(), ...ownVoice }).optional(),
    })
    .optional(),
  tools: tools.optional(),
  tool_choice: toolChoice.optional(),
  max_output_tokens: maxOutputTokens.optional(),
  include: include.optional(),
  tracing: tracing.optional(),
  truncation: truncation.optional(),
  prompt: noPrompt.optional(),
  parallel_tool_calls: z.boolean().optional(),
  reasoning: reasoning.optional(),
});

const gaTranscription = z.strictObject({
  type: z.literal('transcription'),
  audio: z.strictObject({ input: z.strictObject(gaInput).optional() }).optional(),
  include: include.optional(),
});

const betaInput = {
  input_audio_format: betaAudioFormat.optional(),
  input_audio_transcription: transcription.nullable().optional(),
  turn_detection: betaTurnDetection.optional(),
  input_audio_noise_reduction: noiseReduction.optional(),
  include: include.optional(),
  client_secret: z.looseObject({}).optional(),
};

const betaRealtime = z.strictObject({
  ...betaInput,
  model: name.optional(),
  modalities: modalities.optional(),
  instructions: text.optional(),
  voice: voice.optional(),
  speech_model: name.optional(),
  ...ownVoice,
  output_audio_format: betaAudioFormat.optional(),
  tools: tools.optional(),
  tool_choice: toolChoice.optional(),
  temperature: temperature.optional(),
  max_response_output_tokens: maxOutputTokens.optional(),
  speed: speed.optional(),
  tracing: tracing.optional(),
});

/** The beta's transcription_session.update: the input side only (`modalities` is in its SDK type, and means nothing there). */
const betaTranscription = z.strictObject({ ...betaInput, modalities: modalities.optional() });

/**
 * Read a session object into a patch. GA picks its schema by `type`
 * ('transcription' allows only the input side; absent means realtime, whose
 * fields are a superset); the beta's transcription_session.update passes
 * `transcription: true`. Errors name the field under `where.prefix`.
 */
export function parseSessionPatch(session: unknown, dialect: Dialect, where: EventContext, options: { transcription?: boolean } = {}): SessionPatch {
  const context = { ...where, prefix: where.prefix ?? ['session'] };
  if (dialect === 'beta') {
    if (options.transcription) {
      const s = parseWith(betaTranscription, session, context);
      return withoutUndefined<SessionPatch>({ type: 'transcription', inputFormat: s.input_audio_format, transcription: s.input_audio_transcription, turnDetection: s.turn_detection });
    }
    const s = parseWith(betaRealtime, session, context);
    return withoutUndefined<SessionPatch>({
      model: s.model,
      instructions: s.instructions,
      outputModalities: s.modalities,
      inputFormat: s.input_audio_format,
      transcription: s.input_audio_transcription,
      turnDetection: s.turn_detection,
      outputFormat: s.output_audio_format,
      voice: s.voice,
      speechModel: s.speech_model,
      voiceDescription: s.voice_description,
      refAudio: s.ref_audio,
      refText: s.ref_text,
      speed: s.speed,
      tools: s.tools,
      toolChoice: s.tool_choice,
      maxOutputTokens: s.max_response_output_tokens,
      temperature: s.temperature,
    });
  }
  const transcribing = options.transcription || (session !== null && typeof session === 'object' && (session as { type?: unknown }).type === 'transcription');
  if (transcribing) {
    const input = parseWith(gaTranscription, session, context).audio?.input;
    return withoutUndefined<SessionPatch>({ type: 'transcription', inputFormat: input?.format, transcription: input?.transcription, turnDetection: input?.turn_detection });
  }
  const s = parseWith(gaRealtime, session, context);
  const input = s.audio?.input;
  const output = s.audio?.output;
  return withoutUndefined<SessionPatch>({
    type: s.type,
    model: s.model,
    instructions: s.instructions,
    outputModalities: s.output_modalities,
    inputFormat: input?.format,
    transcription: input?.transcription,
    turnDetection: input?.turn_detection,
    outputFormat: output?.format,
    voice: output?.voice,
    speechModel: output?.model,
    voiceDescription: output?.voice_description,
    refAudio: output?.ref_audio,
    refText: output?.ref_text,
    speed: output?.speed,
    tools: s.tools,
    toolChoice: s.tool_choice,
    maxOutputTokens: s.max_output_tokens,
  });
}
