import type { Dialect } from '../api/realtime/types.js';
import type { Engine } from '../core/engine.js';

/** What a realtime session is given by what carries it (the WebSocket route, or a test). */
export interface SessionHost {
  engine: Engine;
  dialect: Dialect;
  /** Sends one server event (already in the client's dialect). */
  send(event: Record<string, unknown>): void;
  log(message: string): void;
  /** A voice turn's latency: from the end of the user's speech to the first audio of the answer. */
  voiceLatency?(seconds: number): void;
  /** Turns are worked on from the first pause (default true; false only to compare, the client sees the same events either way). */
  speculate?: boolean;
  /** The chat model evaluates the conversation while the user speaks (default true; false only to compare). */
  warm?: boolean;
  /** What became of each turn worked on from a pause (for tests and benchmarks). */
  speculation?(event: SpeculationEvent): void;
  /** The bytes of a voice-clone reference as sent (base64, a data URI, or a path or URL where the server allows them); errors name `param`. Without it sessions take no reference. */
  readReferenceAudio?(value: string, param: string, signal: AbortSignal): Promise<Uint8Array>;
}

export type SpeculationEvent =
  | { type: 'started'; itemId: string }
  /** The turn's work made an event, held until the turn ends. */
  | { type: 'held'; itemId: string; event: string }
  /** The turn committed as expected; `released`: the events held until then, sent at once. */
  | { type: 'adopted'; itemId: string; released: readonly string[] }
  | { type: 'discarded'; itemId: string; reason: string };
