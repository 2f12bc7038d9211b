/**
 * The Voice panel's client events for the Realtime API (GA names), built
 * from its settings. No DOM here: the unit tests run them through the
 * server's own event parser.
 */
import { bytesToBase64 } from './pcm.js';

/**
 * The microphone's rate: lserve takes 16 kHz PCM (its extension to the API's
 * 24 kHz), the rate its VAD and speech recognisers work at, so the audio is
 * resampled once, by the browser.
 */
export const INPUT_RATE = 16_000;
/** The answer's audio: the session's default output format, PCM16 at 24 kHz. */
export const OUTPUT_RATE = 24_000;

export interface VoiceSettings {
  instructions: string;
  /** The speech-to-text model for the user's turns; '' for the server's default. */
  transcriptionModel: string;
  /** A speaker of the speech model; '' for its default. */
  voice: string;
  maxOutputTokens?: number;
  silenceMs?: number;
  /** Speaking over an answer stops it. */
  bargeIn: boolean;
}

/** The session.update sent once the session is created; the microphone starts when the server has applied it. */
export function sessionUpdate(settings: VoiceSettings): Record<string, unknown> {
  const instructions = settings.instructions.trim();
  return {
    type: 'session.update',
    session: {
      type: 'realtime',
      ...(instructions ? { instructions } : {}),
      ...(settings.maxOutputTokens !== undefined ? { max_output_tokens: settings.maxOutputTokens } : {}),
      audio: {
        input: {
          format: { type: 'audio/pcm', rate: INPUT_RATE },
          transcription: settings.transcriptionModel ? { model: settings.transcriptionModel } : {},
          turn_detection: {
            type: 'server_vad',
            interrupt_response: settings.bargeIn,
            ...(settings.silenceMs !== undefined ? { silence_duration_ms: settings.silenceMs } : {}),
          },
        },
        output: settings.voice ? { voice: settings.voice } : {},
      },
    },
  };
}

/** One chunk of microphone audio (PCM16 at INPUT_RATE). */
export function appendEvent(pcm: Int16Array): Record<string, unknown> {
  return { type: 'input_audio_buffer.append', audio: bytesToBase64(new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength)) };
}

/** After a barge-in: the assistant's item keeps only the `seconds` of its audio that were heard. */
export function truncateEvent(itemId: string, seconds: number): Record<string, unknown> {
  return { type: 'conversation.item.truncate', item_id: itemId, content_index: 0, audio_end_ms: Math.floor(seconds * 1000) };
}
