import type { ChatTool, ChatToolChoice } from '../../core/tasks/chat.js';
import type { AudioFormat, Dialect, InputTranscription, SessionConfig, TurnDetection } from './types.js';

/**
 * The session as session.created / session.updated show it, in the client's
 * dialect. The shapes follow the `openai` SDK's types (the unit tests assign
 * them to those types): GA's RealtimeSessionCreateResponse and
 * RealtimeTranscriptionSessionCreateResponse, and the beta's flat
 * RealtimeSession. Where OpenAI sends null for "off" but the SDK types the
 * field as optional (GA's `transcription`), the field is left out.
 */

export type WireServerVad = {
  type: 'server_vad';
  threshold: number;
  prefix_padding_ms: number;
  silence_duration_ms: number;
  idle_timeout_ms: number | null;
  create_response: boolean;
  interrupt_response: boolean;
};
export type WireSemanticVad = { type: 'semantic_vad'; eagerness: NonNullable<TurnDetection['eagerness']>; create_response: boolean; interrupt_response: boolean };
export type WireTurnDetection = WireServerVad | WireSemanticVad;
export type WireTool = { type: 'function'; name: string; description?: string; parameters?: Record<string, unknown> };
export type WireToolChoice = 'auto' | 'none' | 'required' | { type: 'function'; name: string };
export type BetaAudioFormat = 'pcm16' | 'g711_ulaw' | 'g711_alaw';

export interface GaRealtimeSession {
  id: string;
  object: 'realtime.session';
  type: 'realtime';
  model: string;
  instructions: string;
  output_modalities: Array<'text' | 'audio'>;
  audio: {
    input: { format: AudioFormat; transcription?: InputTranscription; turn_detection: WireTurnDetection | null };
    /** `model`: lserve's own field, the speech model (absent: the installed one). */
    output: { format: AudioFormat; voice?: string; model?: string; speed: number };
  };
  tools: WireTool[];
  tool_choice: WireToolChoice;
  max_output_tokens: number | 'inf';
  tracing: null;
  prompt: null;
}

export interface GaTranscriptionSession {
  id: string;
  object: 'realtime.transcription_session';
  type: 'transcription';
  audio: { input: { format: AudioFormat; transcription?: InputTranscription; turn_detection: WireTurnDetection | null } };
}

export interface BetaRealtimeSession {
  id: string;
  object: 'realtime.session';
  model: string;
  modalities: Array<'text' | 'audio'>;
  instructions: string;
  voice?: string;
  input_audio_format: BetaAudioFormat;
  output_audio_format: BetaAudioFormat;
  input_audio_transcription: InputTranscription | null;
  turn_detection: WireTurnDetection | null;
  tools: WireTool[];
  tool_choice: WireToolChoice;
  temperature?: number;
  max_response_output_tokens: number | 'inf';
  speed: number;
  tracing: null;
}

export interface BetaTranscriptionSession {
  id: string;
  object: 'realtime.transcription_session';
  modalities: ['text'];
  input_audio_format: BetaAudioFormat;
  input_audio_transcription: InputTranscription | null;
  turn_detection: WireTurnDetection | null;
}

export type SessionObject = GaRealtimeSession | GaTranscriptionSession | BetaRealtimeSession | BetaTranscriptionSession;

export function sessionObject(config: SessionConfig, id: string, dialect: 'ga'): GaRealtimeSession | GaTranscriptionSession;
export function sessionObject(config: SessionConfig, id: string, dialect: 'beta'): BetaRealtimeSession | BetaTranscriptionSession;
export function sessionObject(config: SessionConfig, id: string, dialect: Dialect): SessionObject;
export function sessionObject(config: SessionConfig, id: string, dialect: Dialect): SessionObject {
  const { input, output } = config;
  const turnDetection = input.turnDetection && turnDetectionObject(input.turnDetection);
  if (dialect === 'beta') {
    const common = {
      id,
      input_audio_format: betaFormat(input.format),
      input_audio_transcription: input.transcription,
      turn_detection: turnDetection,
    };
    if (config.type === 'transcription') return { ...common, object: 'realtime.transcription_session', modalities: ['text'] };
    return {
      ...common,
      object: 'realtime.session',
      model: config.model,
      // The beta spells "audio with its transcript" as both modalities.
      modalities: config.outputModalities.includes('audio') ? ['text', 'audio'] : ['text'],
      instructions: config.instructions,
      ...(output.voice !== undefined ? { voice: output.voice } : {}),
      ...(output.speechModel !== undefined ? { speech_model: output.speechModel } : {}),
      ...ownVoice(output),
      output_audio_format: betaFormat(output.format),
      tools: config.tools.map(toolObject),
      tool_choice: toolChoiceObject(config.toolChoice),
      ...(config.temperature !== undefined ? { temperature: config.temperature } : {}),
      max_response_output_tokens: config.maxOutputTokens ?? 'inf',
      speed: output.speed,
      tracing: null,
    };
  }
  const audioInput = { format: input.format, ...(input.transcription ? { transcription: input.transcription } : {}), turn_detection: turnDetection };
  if (config.type === 'transcription') return { id, object: 'realtime.transcription_session', type: 'transcription', audio: { input: audioInput } };
  return {
    id,
    object: 'realtime.session',
    type: 'realtime',
    model: config.model,
    instructions: config.instructions,
    output_modalities: config.outputModalities,
    audio: {
      input: audioInput,
      output: {
        format: output.format,
        ...(output.voice !== undefined ? { voice: output.voice } : {}),
        ...(output.speechModel !== undefined ? { model: output.speechModel } : {}),
        ...ownVoice(output),
        speed: output.speed,
      },
    },
    tools: config.tools.map(toolObject),
    tool_choice: toolChoiceObject(config.toolChoice),
    max_output_tokens: config.maxOutputTokens ?? 'inf',
    tracing: null,
    prompt: null,
  };
}

export function turnDetectionObject(t: TurnDetection): WireTurnDetection {
  if (t.type === 'semantic_vad') return { type: 'semantic_vad', eagerness: t.eagerness ?? 'auto', create_response: t.createResponse, interrupt_response: t.interruptResponse };
  return {
    type: 'server_vad',
    threshold: t.threshold,
    prefix_padding_ms: t.prefixPaddingMs,
    silence_duration_ms: t.silenceDurationMs,
    idle_timeout_ms: t.idleTimeoutMs,
    create_response: t.createResponse,
    interrupt_response: t.interruptResponse,
  };
}

/** The beta's names. It has no way to ask for 16 kHz PCM (an lserve extension of GA's `rate`), so a beta session never holds it. */
export function betaFormat(format: AudioFormat): BetaAudioFormat {
  return format.type === 'audio/pcmu' ? 'g711_ulaw' : format.type === 'audio/pcma' ? 'g711_alaw' : 'pcm16';
}

function toolObject(tool: ChatTool): WireTool {
  return { type: 'function', name: tool.name, ...(tool.description !== undefined ? { description: tool.description } : {}), ...(tool.parameters ? { parameters: tool.parameters } : {}) };
}

function toolChoiceObject(choice: ChatToolChoice): WireToolChoice {
  return typeof choice === 'string' ? choice : { type: 'function', name: choice.name };
}

/** lserve's own voice fields as set; the reference audio is not sent back (it may be megabytes). */
function ownVoice(output: SessionConfig['output']): Record<string, unknown> {
  return {
    ...(output.voiceDescription !== undefined ? { voice_description: output.voiceDescription } : {}),
    ...(output.refText !== undefined ? { ref_text: output.refText } : {}),
  };
}
