import type { ChatTool, ChatToolChoice } from '../../core/tasks/chat.js';

/**
 * The OpenAI Realtime API (GET /v1/realtime, a WebSocket) as lserve holds it
 * internally: one normalized shape for a session's settings, whichever
 * dialect the client speaks. GA is the default; a client that sends
 * `OpenAI-Beta: realtime=v1` speaks the beta dialect (flat session fields
 * such as `modalities` and `input_audio_format: "pcm16"`, and event names
 * such as `response.audio.delta`), and is answered in it.
 */

export type Dialect = 'ga' | 'beta';

/** Audio on the wire: PCM16 little-endian mono at `rate`, or G.711 μ-law / A-law at 8 kHz. */
export type AudioFormat = { type: 'audio/pcm'; rate: 24000 | 16000 } | { type: 'audio/pcmu' } | { type: 'audio/pcma' };

export interface TurnDetection {
  /** `semantic_vad` is answered by the same server VAD (the end-of-turn rule: `eagerness` picks the silence). */
  type: 'server_vad' | 'semantic_vad';
  /** Silero speech probability that starts speech (0–1). */
  threshold: number;
  /** Audio kept before the detected start, in the committed item (ms). */
  prefixPaddingMs: number;
  /** Silence that ends the turn (ms). */
  silenceDurationMs: number;
  /** Commit and answer at the end of a turn. */
  createResponse: boolean;
  /** Speech during a response cancels it (barge-in). */
  interruptResponse: boolean;
  /** semantic_vad only, as the client sent it. */
  eagerness?: 'low' | 'medium' | 'high' | 'auto';
  /** server_vad: a response is asked for after this long without speech (null: never). */
  idleTimeoutMs: number | null;
}

export interface InputTranscription {
  /** An lserve speech-to-text model (offline or streaming); undefined: the server's default. */
  model?: string;
  language?: string;
  prompt?: string;
}

export interface SessionConfig {
  type: 'realtime' | 'transcription';
  /** The chat model (the `model` query parameter or session.model); empty for transcription sessions. */
  model: string;
  instructions: string;
  /** ['audio']: audio with its transcript; ['text']: text only. */
  outputModalities: Array<'text' | 'audio'>;
  input: {
    format: AudioFormat;
    /** null: no transcription of the user's audio (it still reaches the model as text only through transcription, so realtime sessions default to one). */
    transcription: InputTranscription | null;
    /** null: push-to-talk (the client commits). */
    turnDetection: TurnDetection | null;
  };
  output: {
    format: AudioFormat;
    /** An lserve voice (Piper / Kokoro speaker, Qwen3-TTS preset) or an OpenAI voice name, mapped by the session; undefined: the model's default. */
    voice?: string;
    /** The speech model; undefined: the server's default. */
    speechModel?: string;
    /** lserve's own: the voice a voice-design model speaks with, described. */
    voiceDescription?: string;
    /** lserve's own: audio of the voice a voice-clone model copies (checked to be audio when set), and what it says. */
    refAudio?: Uint8Array;
    refText?: string;
    /** 0.25–1.5, as OpenAI. */
    speed: number;
  };
  tools: ChatTool[];
  toolChoice: ChatToolChoice;
  /** Most tokens a response may generate; undefined: no limit ("inf"). */
  maxOutputTokens?: number;
  temperature?: number;
}
