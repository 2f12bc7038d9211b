import { INPUT_RATE } from '../api/realtime/audio-format.js';
import type { TurnDetection } from '../api/realtime/types.js';
import { EndpointDetector } from '../audio/vad.js';
import { InvalidRequestError } from '../core/errors.js';
import type { VoiceActivityStream } from '../core/voice-activity.js';

/**
 * A realtime session's input audio buffer: the user's audio since the last
 * commit, at 16 kHz, on one timeline that starts with the session (the
 * `audio_start_ms` / `audio_end_ms` of OpenAI's events). With turn
 * detection, every piece also goes through the voice activity detector, and
 * the end of speech commits the turn: the speech, with `prefixPaddingMs`
 * before it, leaves the buffer as one clip.
 */

/** Most audio the buffer holds (10 minutes at 16 kHz); more is an error and the buffer is cleared. */
export const MAX_BUFFER_SAMPLES = 10 * 60 * INPUT_RATE;

/** How far back arrival times are kept (timeline samples): past the longest silence that ends a turn. */
const ARRIVALS_KEPT = 2 * INPUT_RATE;

/**
 * semantic_vad has no model of its own here: it is server VAD whose silence
 * before the end of a turn follows its eagerness, as OpenAI describes it
 * (low waits longest, high answers soonest).
 */
const EAGERNESS_SILENCE_MS = { low: 1200, medium: 700, auto: 700, high: 350 } as const;

export interface TurnEvents {
  speechStarted(startMs: number): void;
  /** The turn ended: its audio, from the padded start to the end of speech. */
  speechStopped(endMs: number, clip: Float32Array): void;
  /**
   * The speech paused: the turn ends here (`endMs`, `clip` as speechStopped
   * would give them) if the silence lasts, or goes on at speechResumed.
   */
  speechPaused?(endMs: number, clip: Float32Array): void;
  /** Speech came back before the silence ended the turn. */
  speechResumed?(): void;
  /** The detector failed (its worker died): turn detection stops for this session. */
  failed(error: unknown): void;
}

export class InputAudio {
  /** Samples of the session's timeline before buffer[0]. */
  private offset = 0;
  private chunks: Float32Array[] = [];
  private length = 0;
  private detector: EndpointDetector | undefined;
  private speechStart: number | undefined;
  /** Where the detector's clock starts on the session's timeline. */
  private detectorOrigin = 0;
  /** VAD results are applied in order, each after the one before. */
  private pending: Promise<void> = Promise.resolve();
  /** Recent appends: where each ended on the timeline, and when (performance.now()) it arrived. */
  private arrivals: Array<{ end: number; at: number }> = [];

  constructor(
    private turnDetection: TurnDetection | null,
    private readonly vad: VoiceActivityStream | undefined,
    private readonly on: TurnEvents,
    private readonly signal: AbortSignal,
  ) {
    this.configure(turnDetection);
  }

  /** Samples buffered now. */
  get samples(): number {
    return this.length;
  }

  /** The session's timeline so far, in ms. */
  get endMs(): number {
    return ms(this.offset + this.length);
  }

  get speaking(): boolean {
    return this.speechStart !== undefined;
  }

  /** New turn detection settings (session.update): a turn in progress is forgotten. */
  configure(turnDetection: TurnDetection | null): void {
    this.turnDetection = turnDetection;
    this.speechStart = undefined;
    this.detector = turnDetection && this.vad
      ? new EndpointDetector({
          threshold: turnDetection.threshold,
          minSilenceMs: turnDetection.type === 'semantic_vad' ? EAGERNESS_SILENCE_MS[turnDetection.eagerness ?? 'auto'] : turnDetection.silenceDurationMs,
          minSpeechMs: 150,
          speechPadMs: 0,
          pauses: this.on.speechPaused !== undefined,
        })
      : undefined;
    // The detector's clock starts at the stream's next window, which begins with the samples it holds toward it (pushed before now):
    // aligned with the session's timeline, the speech's start and end land where the windows place them, not up to a window late.
    this.detectorOrigin = this.offset + this.length - (this.detector ? (this.vad?.buffered ?? 0) : 0);
  }

  /** Audio that arrived at `arrivedAt` (performance.now(); when the client's event reached the server). */
  append(samples: Float32Array, arrivedAt = performance.now()): void {
    if (samples.length === 0) return;
    if (this.length + samples.length > MAX_BUFFER_SAMPLES) {
      this.clear();
      throw new InvalidRequestError(`The input audio buffer holds at most ${MAX_BUFFER_SAMPLES / INPUT_RATE / 60} minutes: it was cleared. Commit (or let turn detection commit) more often.`, {
        code: 'input_audio_buffer_overflow',
      });
    }
    this.chunks.push(samples);
    this.length += samples.length;
    const end = this.offset + this.length;
    this.arrivals.push({ end, at: arrivedAt });
    while (this.arrivals[0]!.end < end - ARRIVALS_KEPT) this.arrivals.shift();
    const detector = this.detector;
    const vad = this.vad;
    if (!detector || !vad) return;
    const probabilities = vad.push(samples, this.signal);
    this.pending = this.pending.then(async () => {
      let windows: Float32Array;
      try {
        windows = await probabilities;
      } catch (error) {
        if (!this.signal.aborted) this.on.failed(error);
        this.detector = undefined;
        return;
      }
      if (detector !== this.detector) return; // reconfigured meanwhile
      for (const event of detector.push(windows)) {
        const at = this.detectorOrigin + Math.round(event.time * INPUT_RATE);
        if (event.type === 'speech-start') {
          this.speechStart = at;
          this.on.speechStarted(ms(at));
        } else if (this.speechStart === undefined) {
          continue; // a turn forgotten (committed or cleared by the client)
        } else if (event.type === 'speech-pause') {
          this.on.speechPaused?.(ms(at), this.copy(this.paddedStart(this.speechStart), at));
        } else if (event.type === 'speech-resume') {
          this.on.speechResumed?.();
        } else {
          const start = this.paddedStart(this.speechStart);
          this.speechStart = undefined;
          this.on.speechStopped(ms(at), this.take(start, at));
        }
      }
    });
  }

  /**
   * When the audio at `timeMs` was spoken, on this process's clock
   * (performance.now()), for a client that streams as it records: each
   * append after it places it (its arrival less the audio after `timeMs` it
   * carried), and the earliest of those within a second is the one the
   * server's own delays (the event loop, the network) held back least.
   * Without any, the latest audio is taken as arriving now.
   */
  arrivalOf(timeMs: number): number {
    const sample = Math.round((timeMs * INPUT_RATE) / 1000);
    let earliest = Infinity;
    for (const { end, at } of this.arrivals) {
      if (end >= sample && end <= sample + INPUT_RATE) earliest = Math.min(earliest, at - ((end - sample) * 1000) / INPUT_RATE);
    }
    return Number.isFinite(earliest) ? earliest : performance.now() - Math.max(0, this.endMs - timeMs);
  }

  /** While speech goes on: the turn's audio so far, from its padded start (a copy; the buffer keeps it). */
  turnAudio(): Float32Array {
    if (this.speechStart === undefined) return new Float32Array(0);
    return this.copy(this.paddedStart(this.speechStart), this.offset + this.length);
  }

  /** The whole buffer as one clip, emptied (input_audio_buffer.commit). */
  commit(): Float32Array {
    this.speechStart = undefined;
    return this.take(this.offset, this.offset + this.length);
  }

  clear(): void {
    this.take(this.offset, this.offset + this.length);
    this.speechStart = undefined;
  }

  /** The audio from `start` to `end` (timeline samples); everything before `end` leaves the buffer. */
  private take(start: number, end: number): Float32Array {
    const all = this.joined();
    const from = Math.max(0, start - this.offset);
    const to = Math.min(this.length, Math.max(from, end - this.offset));
    const clip = all.slice(from, to);
    const rest = all.subarray(to);
    this.chunks = rest.length ? [rest] : [];
    this.offset += to;
    this.length = rest.length;
    return clip;
  }

  /** The audio from `start` to `end` (timeline samples), left in the buffer. */
  private copy(start: number, end: number): Float32Array {
    const all = this.joined();
    // Joined once: later copies and takes reuse the one chunk.
    this.chunks = all.length ? [all] : [];
    const from = Math.max(0, start - this.offset);
    return all.slice(from, Math.min(this.length, Math.max(from, end - this.offset)));
  }

  private joined(): Float32Array {
    if (this.chunks.length === 1) return this.chunks[0]!;
    const all = new Float32Array(this.length);
    let at = 0;
    for (const chunk of this.chunks) {
      all.set(chunk, at);
      at += chunk.length;
    }
    return all;
  }

  /** Where a turn's clip starts: `prefixPaddingMs` before its speech, within the buffer. */
  private paddedStart(speechStart: number): number {
    return Math.max(this.offset, speechStart - Math.round(((this.turnDetection?.prefixPaddingMs ?? 0) * INPUT_RATE) / 1000));
  }
}

function ms(samples: number): number {
  return Math.round((samples * 1000) / INPUT_RATE);
}
