import { deflate } from 'pako';
import type { WhisperVocabulary } from './decode.js';

/**
 * Turning one window's tokens into timed segments, and where the next window
 * starts — the long-form loop of transformers' Whisper generate (which
 * openai/whisper's transcribe matches): text between timestamp pairs is a
 * segment, its tokens with their timestamps; a window that ends on a single
 * timestamp is consumed whole; one that ends otherwise resumes at its last
 * pair (whose segment keeps both timestamps and ends at the first); a window
 * without a pair is one segment, even without text, up to its last timestamp
 * (or the window's end when that is <|0.00|> or there is none).
 */

/** Seconds per timestamp step (<|0.02|> − <|0.00|>). */
export const TIME_PRECISION = 0.02;
/** Mel frames per timestamp step (the encoder halves the 100 frames/s). */
const FRAMES_PER_STEP = 2;

export type { Segment } from '../../core/tasks/transcribe/transcriber.js';

export interface WindowSegments {
  /** Segments as token runs (timestamps included) with their times (text filled in by the caller); times are not clamped. */
  spans: Array<{ start: number; end: number; tokens: number[] }>;
  /** Mel frames this window consumed. */
  advance: number;
}

export function splitWindow(tokens: readonly number[], vocabulary: WhisperVocabulary, timeOffset: number, windowFrames: number): WindowSegments {
  const begin = vocabulary.timestampBegin;
  const isTimestamp = tokens.map((t) => t >= begin);
  const singleTimestampEnding = isTimestamp.length >= 2 && !isTimestamp.at(-2) && isTimestamp.at(-1)!;
  const consecutive: number[] = [];
  for (let i = 1; i < tokens.length; i++) if (isTimestamp[i] && isTimestamp[i - 1]) consecutive.push(i);
  const time = (token: number) => timeOffset + (token - begin) * TIME_PRECISION;
  const spans: WindowSegments['spans'] = [];
  if (consecutive.length > 0) {
    // Cut at the second timestamp of each pair; the last pair's segment keeps both (unless a single timestamp ends the window).
    const cuts = singleTimestampEnding ? [...consecutive, tokens.length] : [...consecutive.slice(0, -1), consecutive.at(-1)! + 1];
    let last = 0;
    cuts.forEach((cut, i) => {
      const run = tokens.slice(last, cut);
      const endIndex = i === cuts.length - 1 && !singleTimestampEnding ? run.length - 2 : run.length - 1;
      if (run.length > 0) spans.push({ start: time(run[0]!), end: time(run[endIndex]!), tokens: run });
      last = cut;
    });
    if (singleTimestampEnding) return { spans, advance: windowFrames };
    // Ends on a closed pair (and maybe unfinished text): resume at the pair's first timestamp.
    return { spans, advance: (tokens[consecutive.at(-1)! - 1]! - begin) * FRAMES_PER_STEP };
  }
  const stamps = tokens.filter((t) => t >= begin);
  const steps = stamps.length > 0 && stamps.at(-1) !== begin ? stamps.at(-1)! - begin : Math.floor(windowFrames / FRAMES_PER_STEP);
  if (tokens.length > 0) spans.push({ start: timeOffset, end: timeOffset + steps * TIME_PRECISION, tokens: [...tokens] });
  return { spans, advance: windowFrames };
}

/** The text tokens of a run (timestamps and other specials dropped). */
export function textTokens(tokens: readonly number[], vocabulary: Pick<WhisperVocabulary, 'eot'>): number[] {
  return tokens.filter((t) => t < vocabulary.eot);
}

/**
 * The prompt tokens a window's segments leave for the next one (transformers'
 * condition_on_prev_tokens): every segment's tokens, timestamps included,
 * except that a segment ending on two timestamps loses the second.
 */
export function promptTokens(segments: ReadonlyArray<{ tokens: readonly number[] }>, timestampBegin: number): number[] {
  const out: number[] = [];
  for (const { tokens } of segments) {
    const pairEnding = tokens.length >= 2 && tokens.at(-1)! >= timestampBegin && tokens.at(-2)! >= timestampBegin;
    out.push(...(pairEnding ? tokens.slice(0, -1) : tokens));
  }
  return out;
}

/**
 * How repetitive a text is (openai/whisper): its UTF-8 length over its zlib
 * length (level 6), 0 for no text; whisper falls back above 2.4. The length
 * must be stock zlib's, as Python's zlib.compress gives it: Node bundles
 * Chromium's zlib fork, whose deflate picks other matches (a 957-byte Whisper
 * text: 711 bytes there, 709 in stock zlib), so pako (a port of stock zlib)
 * does the counting.
 */
export function compressionRatio(text: string): number {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length === 0) return 0;
  return bytes.length / deflate(bytes, { level: 6 }).length;
}
