/**
 * What the engine, its tasks and runtimes report as they work, for whoever
 * listens (the server's `/metrics`, src/http/metrics.ts): amounts of work
 * done, never request content. Core only emits plain events; it knows no
 * metrics library. A listener that throws is logged and ignored: reporting
 * never fails a request.
 */

export type EngineEvent =
  /** A chat generation ended; the decode rate is over the tokens after the first (null below two tokens). */
  | { type: 'chat'; model: string; promptTokens: number; completionTokens: number; decodeTokensPerSecond: number | null }
  /** Audio recognised: a transcribed upload, or audio pushed into a live stream. */
  | { type: 'transcription'; model: string; audioSeconds: number }
  /** Audio synthesised. */
  | { type: 'speech'; model: string; audioSeconds: number }
  /** Images generated, and the denoising steps they took in all. */
  | { type: 'images'; model: string; images: number; steps: number }
  | { type: 'ocr'; model: string; pages: number }
  /** A request refused because the model's line was full (503). */
  | { type: 'rejected'; model: string }
  /** A supervised child process was started again after it died (e.g. "sherpa-onnx speech recognizer"). */
  | { type: 'restart'; process: string }
  /** A realtime session opened (+1) or closed (−1). */
  | { type: 'realtime-session'; sessionType: 'realtime' | 'transcription'; change: 1 | -1 }
  /** A spoken answer's first audio left this long after the user's speech ended (realtime sessions). */
  | { type: 'voice-latency'; model: string; seconds: number };

export type EngineEventListener = (event: EngineEvent) => void;

export class EngineEvents {
  private readonly listeners = new Set<EngineEventListener>();

  constructor(private readonly log?: (message: string) => void) {}

  /** Subscribes; returns the unsubscribe function. */
  on(listener: EngineEventListener): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  emit(event: EngineEvent): void {
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch (error) {
        this.log?.(`an engine event listener threw on '${event.type}': ${(error as Error)?.stack ?? String(error)}`);
      }
    }
  }
}
