import type { Dialect, SessionConfig, TurnDetection } from './types.js';
import { parseSessionPatch, type SessionPatch } from './session-patch.js';
import type { TurnDetectionPatch } from './fields.js';

export { sessionObject } from './session-object.js';
export type { SessionPatch } from './session-patch.js';

/** Short, because what a voice assistant says is heard: long answers are slow to speak and to listen to. */
export const DEFAULT_INSTRUCTIONS =
  'You are a helpful, friendly voice assistant. Answer briefly and conversationally, in plain sentences without lists or markup, because your answers are spoken aloud.';

/** OpenAI's server VAD defaults. */
const DEFAULT_TURN_DETECTION: TurnDetection = {
  type: 'server_vad',
  threshold: 0.5,
  prefixPaddingMs: 300,
  silenceDurationMs: 500,
  createResponse: true,
  interruptResponse: true,
  idleTimeoutMs: null,
};

/**
 * A new session's settings, OpenAI's defaults: audio out (with its
 * transcript), PCM16 at 24 kHz both ways, server VAD that answers at the end
 * of each turn and is interrupted by speech. For a transcription session,
 * `model` is its speech-to-text model ('' for the server's default).
 */
export function defaultSessionConfig(model: string, type: SessionConfig['type'] = 'realtime'): SessionConfig {
  const pcm = { type: 'audio/pcm', rate: 24000 } as const;
  return {
    type,
    model: type === 'realtime' ? model : '',
    instructions: DEFAULT_INSTRUCTIONS,
    outputModalities: type === 'realtime' ? ['audio'] : ['text'],
    input: {
      format: pcm,
      // On by default, unlike OpenAI's: lserve's chat models hear the user's audio only through its transcript, so without
      // transcription a spoken turn would reach the model empty. `{}` is the server's default speech-to-text model.
      transcription: type === 'transcription' && model ? { model } : {},
      turnDetection: { ...DEFAULT_TURN_DETECTION },
    },
    output: { format: pcm, speed: 1 },
    tools: [],
    toolChoice: 'auto',
  };
}

/**
 * The settings after one session.update: the fields it names change, the
 * rest stay as they were. Turn detection is merged the same way while its
 * type stays (so `{type: 'server_vad', threshold: 0.7}` keeps the silence
 * duration set before); a new type starts from the defaults. Transcription
 * is replaced whole. Whether a change is allowed at this point of the
 * session (a new model, a voice after audio was spoken) is the session's to
 * decide: this only merges.
 */
export function mergeSessionPatch(current: SessionConfig, patch: SessionPatch, refAudio?: Uint8Array): SessionConfig {
  // null clears an lserve voice field; the reference's audio comes read (`refAudio`), its text as sent.
  const own = <T>(value: T | null | undefined, was: T | undefined) => (value === undefined ? was : (value ?? undefined));
  return {
    ...current,
    type: patch.type ?? current.type,
    model: patch.model ?? current.model,
    instructions: patch.instructions ?? current.instructions,
    outputModalities: patch.outputModalities ?? current.outputModalities,
    input: {
      format: patch.inputFormat ?? current.input.format,
      transcription: patch.transcription !== undefined ? patch.transcription : current.input.transcription,
      turnDetection: patch.turnDetection !== undefined ? mergeTurnDetection(current.input.turnDetection, patch.turnDetection) : current.input.turnDetection,
    },
    output: {
      ...current.output,
      format: patch.outputFormat ?? current.output.format,
      voice: patch.voice ?? current.output.voice,
      speechModel: patch.speechModel ?? current.output.speechModel,
      voiceDescription: own(patch.voiceDescription, current.output.voiceDescription),
      refAudio: patch.refAudio === undefined ? current.output.refAudio : patch.refAudio === null ? undefined : refAudio,
      refText: own(patch.refText, current.output.refText),
      speed: patch.speed ?? current.output.speed,
    },
    tools: patch.tools ?? current.tools,
    toolChoice: patch.toolChoice ?? current.toolChoice,
    maxOutputTokens: patch.maxOutputTokens === undefined ? current.maxOutputTokens : patch.maxOutputTokens === 'inf' ? undefined : patch.maxOutputTokens,
    temperature: patch.temperature ?? current.temperature,
  };
}

function mergeTurnDetection(current: TurnDetection | null, patch: TurnDetectionPatch | null): TurnDetection | null {
  if (patch === null) return null;
  const type = patch.type ?? current?.type ?? 'server_vad';
  const base: TurnDetection = current?.type === type ? current : { ...DEFAULT_TURN_DETECTION, type, ...(type === 'semantic_vad' ? { eagerness: 'auto' } : {}) };
  const { eagerness, ...merged } = { ...base, ...patch, type };
  return type === 'semantic_vad' ? { ...merged, eagerness } : merged;
}

/**
 * Validate a session object in the client's dialect (GA nested or beta flat)
 * and merge it into `current`. Throws RealtimeEventError naming the field
 * ('session.audio.input.format.rate'). A session.update event parsed by
 * parseClientEvent carries its patch already: merge that with
 * mergeSessionPatch.
 */
export function applySessionUpdate(current: SessionConfig, session: unknown, dialect: Dialect): SessionConfig {
  return mergeSessionPatch(current, parseSessionPatch(session, dialect, { event: 'session.update' }));
}
