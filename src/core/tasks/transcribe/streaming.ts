import type { LserveError } from '../../errors.js';
import type { LoadedModel } from '../../loader.js';

/**
 * The contract between live transcription (GET /v1/audio/transcriptions/stream,
 * `lserve transcribe --stream`) and a streaming recognizer (kind `asr-stream`;
 * families/sherpa-streaming implements it over runtimes/sherpa/recognizer.ts).
 */

export interface RecognitionResult {
  /** Text of the current utterance so far (partial) or of a finished one (final). */
  text: string;
  /** True at an endpoint (a pause, sherpa's endpoint rules) and for the last result after finish(). */
  isFinal: boolean;
  /** Utterance number, from 0; a final closes its utterance, the next partial starts the next. */
  segment: number;
}

export interface RecognizerStreamEvents {
  result: (result: RecognitionResult) => void;
  /** The stream failed (recognizer process died, buffer overflow, model unloaded) and is over. */
  error: (error: LserveError) => void;
  /** After finish(): the last final result was delivered and the stream is over. */
  end: () => void;
  /** push() returned false earlier and the undecoded audio is back under half the high-water mark. */
  drain: () => void;
}

export type StreamState = 'open' | 'finishing' | 'ended' | 'failed' | 'closed';

/**
 * One live recognition: 16 kHz mono float samples in, results out.
 *
 * Buffering is bounded with backpressure first and a hard cap second:
 * push() returns false once more than the high-water mark (2 s) of audio
 * waits to be decoded; a caller should then stop reading its source (e.g.
 * pause the WebSocket, which pushes back on the client over TCP) until
 * 'drain'. A caller that ignores it and gets more than the cap (30 s) ahead
 * fails with OverloadedError: dropping audio silently would corrupt the
 * transcript, and buffering without a bound would let one client exhaust
 * the server's memory. Real-time clients never come near either limit.
 */
export interface RecognizerStream {
  readonly id: number;
  readonly state: StreamState;
  /** Queues samples (16 kHz, [-1, 1]); false asks the caller to wait for 'drain'. Ignored once the stream failed or was closed. */
  push(samples: Float32Array): boolean;
  /** No more audio: the rest is decoded, the last final result arrives, then 'end'. */
  finish(): void;
  /** Abandons the stream at once; no further events. */
  close(): void;
  /** Subscribes; returns the unsubscribe function. Errors are events, never thrown. */
  on<E extends keyof RecognizerStreamEvents>(event: E, listener: RecognizerStreamEvents[E]): () => void;
}

export interface StreamingRecognizer extends LoadedModel {
  readonly sampleRate: number;
  /** Streams this server runs at once (all streaming models together). */
  readonly maxStreams: number;
  /** Starts a recognition; throws OverloadedError when maxStreams are open. */
  open(): RecognizerStream;
}
