import { gzipSync } from 'node:zlib';
import type { WhisperVocabulary } from './decode.js';

/**
 * Turning one window's tokens into timed segments, and where the next window
 * starts — openai/whisper's transcribe loop: text between timestamp pairs is
 * a segment; a window that ends on a closed pair is cut at its last
 * timestamp (the rest is decoded again with the next window), one that ends
 * on a single timestamp or none is consumed whole.
 */

/** Seconds per timestamp step (<|0.02|> − <|0.00|>). */
export const TIME_PRECISION = 0.02;
/** Mel frames per timestamp step (the encoder halves the 100 frames/s). */
const FRAMES_PER_STEP = 2;

export type { Segment } from '../../core/tasks/transcribe/transcriber.js';

export interface WindowSegments {
  /** Segments as token runs with their times (text filled in by the caller). */
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
    const cuts = singleTimestampEnding ? [...consecutive, tokens.length] : consecutive;
    let last = 0;
    for (const cut of cuts) {
      const run = tokens.slice(last, cut);
      if (run.length > 0) spans.push({ start: time(run[0]!), end: time(run.at(-1)!), tokens: textOnly(run, begin) });
      last = cut;
    }
    if (singleTimestampEnding) return { spans, advance: windowFrames };
    // Ends on a closed pair: resume at its timestamp.
    return { spans, advance: (tokens[last - 1]! - begin) * FRAMES_PER_STEP };
  }
  const stamps = tokens.filter((t) => t >= begin);
  const duration = stamps.length > 0 && stamps.at(-1) !== begin ? (stamps.at(-1)! - begin) * TIME_PRECISION : windowFrames / 100;
  const text = textOnly(tokens, begin);
  if (text.length > 0) spans.push({ start: timeOffset, end: timeOffset + duration, tokens: text });
  return { spans, advance: windowFrames };
}

function textOnly(tokens: readonly number[], timestampBegin: number): number[] {
  return tokens.filter((t) => t < timestampBegin);
}

/** How repetitive a text is: its length over its gzip length (whisper falls back above 2.4). */
export function compressionRatio(text: string): number {
  const bytes = Buffer.from(text, 'utf8');
  return bytes.length === 0 ? 0 : bytes.length / gzipSync(bytes).length;
}
