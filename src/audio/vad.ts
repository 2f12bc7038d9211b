/**
 * Voice activity segmentation over per-window speech probabilities (from
 * Silero VAD: one probability per 512 samples at 16 kHz). Pure logic, no
 * model: `speechSegments` for whole files (Silero's own
 * `get_speech_timestamps`), `EndpointDetector` for live streams, and
 * `splitForWindows` to cut long audio into Whisper-sized windows at silences.
 */

/** A stretch of speech, in seconds from the start of the audio. */
export interface SpeechSegment {
  start: number;
  end: number;
}

export interface VadWindowOptions {
  /** Samples per probability (Silero: 512 at 16 kHz, 256 at 8 kHz). */
  windowSamples?: number;
  sampleRate?: number;
}

export interface SpeechSegmentOptions extends VadWindowOptions {
  /** A window at or above this probability is speech. Default 0.5. */
  threshold?: number;
  /** Inside speech, a window below this is silence (hysteresis). Default max(threshold − 0.15, 0.01). */
  negThreshold?: number;
  /** Segments this short or shorter are dropped. Default 250. */
  minSpeechMs?: number;
  /** Silence needed to end a segment. Default 100. */
  minSilenceMs?: number;
  /** Padding added to each side of a segment (shared out when segments are closer). Default 30. */
  speechPadMs?: number;
  /**
   * Longest segment; a longer one is cut at its longest inner silence
   * (≥ 98 ms), else just before this length. Default: no limit.
   */
  maxSpeechSec?: number;
  /** Length of the audio in samples (the last window may be partial). Default: windows × windowSamples. */
  totalSamples?: number;
}

const DEFAULT_WINDOW = 512;
const DEFAULT_RATE = 16000;
/** Silero's `min_silence_at_max_speech`: inner silences shorter than this are never cut points. */
const MIN_SILENCE_AT_MAX_SPEECH_MS = 98;

function negThresholdOf(threshold: number, negThreshold: number | undefined): number {
  return negThreshold ?? Math.max(threshold - 0.15, 0.01);
}

/**
 * Speech segments from per-window probabilities, with the semantics of
 * Silero VAD's `get_speech_timestamps` (v6 utils, default
 * `use_max_poss_sil_at_max_speech`): hysteresis between `threshold` and
 * `negThreshold`, segments ended after `minSilenceMs`, dropped when not longer
 * than `minSpeechMs`, split when longer than `maxSpeechSec`, then padded.
 */
export function speechSegments(probabilities: ArrayLike<number>, options: SpeechSegmentOptions = {}): SpeechSegment[] {
  const threshold = options.threshold ?? 0.5;
  const neg = negThresholdOf(threshold, options.negThreshold);
  const window = options.windowSamples ?? DEFAULT_WINDOW;
  const rate = options.sampleRate ?? DEFAULT_RATE;
  const total = options.totalSamples ?? probabilities.length * window;
  const minSpeech = (rate * (options.minSpeechMs ?? 250)) / 1000;
  const minSilence = (rate * (options.minSilenceMs ?? 100)) / 1000;
  const pad = (rate * (options.speechPadMs ?? 30)) / 1000;
  const maxSpeech = rate * (options.maxSpeechSec ?? Infinity) - window - 2 * pad;
  const minSilenceAtMax = (rate * MIN_SILENCE_AT_MAX_SPEECH_MS) / 1000;

  // Sample positions; 0 means "unset" for tempEnd/prevEnd/nextStart, as in the reference.
  const speeches: { start: number; end: number }[] = [];
  let current: { start?: number } = {};
  let triggered = false;
  let tempEnd = 0;
  let prevEnd = 0;
  let nextStart = 0;
  let possibleEnds: [end: number, duration: number][] = [];

  for (let i = 0; i < probabilities.length; i++) {
    const p = probabilities[i]!;
    const cur = window * i;

    if (p >= threshold && tempEnd) {
      const silence = cur - tempEnd;
      if (silence > minSilenceAtMax) possibleEnds.push([tempEnd, silence]);
      tempEnd = 0;
      if (nextStart < prevEnd) nextStart = cur;
    }

    if (p >= threshold && !triggered) {
      triggered = true;
      current = { start: cur };
      continue;
    }

    if (triggered && cur - current.start! > maxSpeech) {
      if (possibleEnds.length) {
        // Cut at the longest silence inside this segment.
        const [end, duration] = possibleEnds.reduce((a, b) => (b[1] > a[1] ? b : a));
        speeches.push({ start: current.start!, end });
        nextStart = end + duration;
        // The reference's test (next_start < prev_end + cur_sample) always holds here: speech resumes after that silence.
        current = { start: nextStart };
      } else {
        speeches.push({ start: current.start!, end: cur });
        current = {};
        triggered = false;
        prevEnd = nextStart = tempEnd = 0;
        possibleEnds = [];
        continue;
      }
      prevEnd = nextStart = tempEnd = 0;
      possibleEnds = [];
    }

    if (p < neg && triggered) {
      if (!tempEnd) tempEnd = cur;
      if (cur - tempEnd < minSilence) continue;
      if (tempEnd - current.start! > minSpeech) speeches.push({ start: current.start!, end: tempEnd });
      current = {};
      prevEnd = nextStart = tempEnd = 0;
      triggered = false;
      possibleEnds = [];
    }
  }

  if (current.start !== undefined && total - current.start > minSpeech) speeches.push({ start: current.start, end: total });

  for (let i = 0; i < speeches.length; i++) {
    const speech = speeches[i]!;
    if (i === 0) speech.start = Math.trunc(Math.max(0, speech.start - pad));
    const next = speeches[i + 1];
    if (next) {
      const silence = next.start - speech.end;
      if (silence < 2 * pad) {
        speech.end += Math.floor(silence / 2);
        next.start = Math.trunc(Math.max(0, next.start - Math.floor(silence / 2)));
      } else {
        speech.end = Math.trunc(Math.min(total, speech.end + pad));
        next.start = Math.trunc(Math.max(0, next.start - pad));
      }
    } else {
      speech.end = Math.trunc(Math.min(total, speech.end + pad));
    }
  }
  return speeches.map((s) => ({ start: s.start / rate, end: s.end / rate }));
}

export interface EndpointOptions extends VadWindowOptions {
  /** Default 0.5. */
  threshold?: number;
  /** Default max(threshold − 0.15, 0.01). */
  negThreshold?: number;
  /**
   * Speech (windows at or above `negThreshold` once triggered) needed before
   * `speech-start` is announced; shorter bursts (clicks, breaths) are ignored.
   * Default 250.
   */
  minSpeechMs?: number;
  /** Silence that ends an utterance. Default 500 (live use: a pause, not a gap between words). */
  minSilenceMs?: number;
  /** Padding reported around speech. Default 30. */
  speechPadMs?: number;
  /**
   * Also announce each pause inside an utterance: `speech-pause` when a
   * silence begins (its `time` is where the utterance ends if the silence
   * lasts), `speech-resume` when speech comes back before it ended the
   * utterance. Off by default.
   */
  pauses?: boolean;
}

export interface VadEvent {
  type: 'speech-start' | 'speech-end' | 'speech-pause' | 'speech-resume';
  /** Where in the stream the speech starts or ends (padded), in seconds; for a pause, where it would end; for a resume, where speech came back. */
  time: number;
  /** Stream position when the event was decided, in seconds (`at − time` is the latency). */
  at: number;
}

/**
 * Incremental endpointing for live audio: feed the probabilities of
 * consecutive windows as they arrive (any number at a time) and get
 * `speech-start` once an utterance has lasted `minSpeechMs`, and
 * `speech-end` once `minSilenceMs` of silence follows it. Same hysteresis as
 * `speechSegments`; a start and its end always come in pairs. With `pauses`,
 * the silences in between too (a pause is the start of a silence that may
 * end the utterance: what a listener can already act on).
 */
export class EndpointDetector {
  private readonly threshold: number;
  private readonly neg: number;
  private readonly window: number;
  private readonly rate: number;
  private readonly minSpeech: number;
  private readonly minSilence: number;
  private readonly pad: number;
  private readonly pauses: boolean;

  /** Windows seen so far. */
  private index = 0;
  private triggered = false;
  private confirmed = false;
  private start = 0;
  private voiced = 0;
  /** Start of the current silence inside speech (samples), or -1. */
  private silenceStart = -1;
  /** End (samples, padded) of the last utterance, so starts never go back before it. */
  private lastEnd = 0;
  /** The silence start last announced as a pause, or -1. */
  private paused = -1;

  constructor(options: EndpointOptions = {}) {
    this.threshold = options.threshold ?? 0.5;
    this.neg = negThresholdOf(this.threshold, options.negThreshold);
    this.window = options.windowSamples ?? DEFAULT_WINDOW;
    this.rate = options.sampleRate ?? DEFAULT_RATE;
    this.minSpeech = (this.rate * (options.minSpeechMs ?? 250)) / 1000;
    this.minSilence = (this.rate * (options.minSilenceMs ?? 500)) / 1000;
    this.pad = Math.round((this.rate * (options.speechPadMs ?? 30)) / 1000);
    this.pauses = options.pauses ?? false;
  }

  /** True between a `speech-start` and its `speech-end`. */
  get speaking(): boolean {
    return this.confirmed;
  }

  /** Seconds of audio seen so far. */
  get position(): number {
    return (this.index * this.window) / this.rate;
  }

  push(probabilities: ArrayLike<number>): VadEvent[] {
    const events: VadEvent[] = [];
    for (let i = 0; i < probabilities.length; i++) {
      const p = probabilities[i]!;
      const cur = this.index * this.window;
      this.index++;
      const seen = cur + this.window;
      if (!this.triggered) {
        if (p < this.threshold) continue;
        this.triggered = true;
        this.confirmed = false;
        this.start = cur;
        this.voiced = 0;
        this.silenceStart = -1;
      }
      if (p >= this.threshold) this.silenceStart = -1;
      if (p >= this.neg) {
        this.voiced += this.window;
      } else {
        if (this.silenceStart < 0) this.silenceStart = cur;
        if (seen - this.silenceStart >= this.minSilence) {
          if (this.confirmed) events.push(this.endEvent(this.silenceStart, seen));
          this.triggered = this.confirmed = false;
          this.paused = -1;
          continue;
        }
      }
      if (!this.confirmed && this.voiced >= this.minSpeech) {
        this.confirmed = true;
        const time = Math.max(this.lastEnd, this.start - this.pad, 0);
        events.push({ type: 'speech-start', time: time / this.rate, at: seen / this.rate });
      }
      if (this.pauses) this.pauseEvent(cur, seen, events);
    }
    return events;
  }

  /** A pause began or ended in this window (confirmed speech only: a start comes first). */
  private pauseEvent(cur: number, seen: number, events: VadEvent[]): void {
    const silence = this.confirmed ? this.silenceStart : -1;
    if (silence === this.paused) return;
    // The end the utterance will have if this silence lasts: endEvent's, whose `seen` is by then at least minSilence on.
    if (silence >= 0) events.push({ type: 'speech-pause', time: (silence + this.pad) / this.rate, at: seen / this.rate });
    else events.push({ type: 'speech-resume', time: cur / this.rate, at: seen / this.rate });
    this.paused = silence;
  }

  /** End of the stream: closes an utterance still open. */
  finish(): VadEvent[] {
    const seen = this.index * this.window;
    const events = this.triggered && this.confirmed ? [this.endEvent(this.silenceStart >= 0 ? this.silenceStart : seen, seen)] : [];
    this.triggered = this.confirmed = false;
    this.paused = -1;
    return events;
  }

  reset(): void {
    this.index = 0;
    this.triggered = this.confirmed = false;
    this.silenceStart = -1;
    this.lastEnd = 0;
    this.paused = -1;
  }

  private endEvent(end: number, seen: number): VadEvent {
    const padded = Math.min(end + this.pad, seen);
    this.lastEnd = padded;
    return { type: 'speech-end', time: padded / this.rate, at: seen / this.rate };
  }
}

/** A stretch of audio to transcribe as one window, in seconds. */
export interface AudioWindow {
  start: number;
  end: number;
}

/**
 * Groups speech segments into windows of at most `maxWindowSec` (Whisper's
 * 30 s) for long audio. Each window runs from a segment's start to a later
 * segment's end, so every cut falls in a silence: the last silence before the
 * window would grow past the limit. Silence between windows is left out.
 * A single segment longer than the limit (use `maxSpeechSec` in
 * `speechSegments` to avoid them) is cut into equal parts.
 */
export function splitForWindows(segments: readonly SpeechSegment[], maxWindowSec = 30): AudioWindow[] {
  if (!(maxWindowSec > 0)) throw new RangeError(`maxWindowSec must be positive, got ${maxWindowSec}`);
  const windows: AudioWindow[] = [];
  let open: AudioWindow | undefined;
  for (const segment of segments) {
    const length = segment.end - segment.start;
    const parts = Math.max(1, Math.ceil(length / maxWindowSec - 1e-9));
    for (let k = 0; k < parts; k++) {
      const piece = {
        start: segment.start + (length * k) / parts,
        end: k === parts - 1 ? segment.end : segment.start + (length * (k + 1)) / parts,
      };
      if (open && piece.end - open.start <= maxWindowSec) {
        open.end = piece.end;
      } else {
        if (open) windows.push(open);
        open = { ...piece };
      }
    }
  }
  if (open) windows.push(open);
  return windows;
}
