import { InvalidRequestError } from '../../core/errors.js';
import type { Segment, Transcription, TranscriptionOptions } from '../../core/tasks/transcribe/transcriber.js';
import { compressionRatio, promptTokens, splitWindow, textTokens } from './segments.js';
import { decodeWindow, detectLanguage, type DecodeResult, type WhisperRuntime } from './decode.js';
import { windowWords } from './word-times.js';
import type { Word } from '../../core/tasks/transcribe/transcriber.js';

/**
 * Whisper's long-form loop (openai/whisper's transcribe): 16 kHz samples in,
 * text with timed segments out. 30 s windows, each encoded once and decoded
 * with timestamps; the next window starts where the last complete segment
 * ended; a window that decodes into repetition or low confidence is decoded
 * again at a higher temperature; a window the model calls silence is skipped.
 */

/** The task's options (core/tasks/transcribe/transcriber.ts), as this loop reads them. */
export type LongformOptions = TranscriptionOptions;
export type { Transcription } from '../../core/tasks/transcribe/transcriber.js';

const SAMPLE_RATE = 16_000;
const HOP = 160;
const FALLBACK_TEMPERATURES = [0, 0.2, 0.4, 0.6, 0.8, 1.0];
/** openai/whisper's thresholds: above this zlib ratio a window is repetition; below this mean logprob, a guess. */
const MAX_COMPRESSION_RATIO = 2.4;
const MIN_AVG_LOGPROB = -1;
const NO_SPEECH_THRESHOLD = 0.6;

export async function transcribeSamples(runtime: WhisperRuntime, samples: Float32Array, request: LongformOptions, signal: AbortSignal): Promise<Transcription> {
  const { vocabulary, mel } = runtime;
  const multilingual = vocabulary.languages.size > 0;
  let language = request.language === undefined || request.language === 'auto' ? undefined : request.language.toLowerCase();
  if (language !== undefined && multilingual && !vocabulary.languages.has(language)) {
    throw new InvalidRequestError(`Unknown language '${request.language}'; this model knows ${[...vocabulary.languages.keys()].join(', ')}, or 'auto'.`, {
      param: 'language',
      code: 'invalid_language',
    });
  }
  if (!multilingual) {
    if (language !== undefined && language !== 'en') throw new InvalidRequestError(`This model is English-only; language '${request.language}' is not available.`, { param: 'language', code: 'invalid_language' });
    language = 'en';
  }
  const task = request.task ?? 'transcribe';
  const temperatures = request.temperature !== undefined && request.temperature > 0 ? [request.temperature] : FALLBACK_TEMPERATURES;
  const random = seededRandom(request.seed ?? 0);
  // The whole file's log-mel frames (the centred STFT's last frame dropped), as transformers counts them.
  const audioFrames = samples.length > 0 ? Math.max(1, Math.floor(samples.length / HOP)) : 0;
  const regions = (request.regions ?? [{ start: 0, end: samples.length / SAMPLE_RATE }]).map((r) => ({
    from: Math.max(0, Math.floor((r.start * SAMPLE_RATE) / HOP)),
    to: Math.min(audioFrames, Math.ceil((r.end * SAMPLE_RATE) / HOP)),
  }));
  const totalFrames = regions.reduce((sum, r) => sum + Math.max(0, r.to - r.from), 0);
  const windowFrames = mel.frames;
  const segments: Segment[] = [];
  const words: Word[] | undefined = request.wordTimestamps ? [] : undefined;
  const duration = samples.length / SAMPLE_RATE;
  const initialPrompt = request.prompt ? runtime.encodeText(` ${request.prompt.trim()}`) : [];
  // The decoded segments' tokens condition each window (transformers' condition_on_prev_tokens), except right after a hot one.
  const history: Array<{ tokens: readonly number[] }> = [];
  let conditionOnPrevious = true;
  /** Decoded text of text tokens ('' for none: the tokenizer refuses an empty array). */
  const textOf = (tokens: readonly number[]): string => {
    const text = textTokens(tokens, vocabulary);
    return text.length > 0 ? runtime.decodeText(text) : '';
  };
  let done = 0;
  for (const region of regions) {
    let seek = region.from;
    while (seek < region.to) {
      signal.throwIfAborted();
      const frames = Math.min(windowFrames, region.to - seek);
      // Long-form features: log-mel over the whole file, normalised by its maximum, this window's frames zero-padded.
      const features = await mel.compute(samples, seek * HOP, frames * HOP, 'file');
      const window = await runtime.encode(features);
      let result: DecodeResult | undefined;
      let ratio = 0;
      try {
        if (language === undefined) language = (await detectLanguage(runtime, window)).code;
        const prompt = conditionOnPrevious ? [...initialPrompt, ...promptTokens(history, vocabulary.timestampBegin)] : [];
        const base = { language: vocabulary.languages.get(language) ?? -1, task, timestamps: true, prompt, random, signal, attention: words !== undefined } as const;
        for (const temperature of temperatures) {
          result = await decodeWindow(runtime, window, { ...base, temperature });
          // openai/whisper's ratio: zlib over the window's stripped text, once per window.
          ratio = compressionRatio(textOf(result.tokens).trim());
          const failed = ratio > MAX_COMPRESSION_RATIO || result.avgLogprob < MIN_AVG_LOGPROB;
          if (!failed || isSilence(result)) break;
        }
      } finally {
        await window.release();
      }
      conditionOnPrevious = result!.temperature < 0.5;
      // A window must move on, whatever the model emitted.
      let advance = frames;
      if (!isSilence(result!)) {
        const split = splitWindow(result!.tokens, vocabulary, (seek * HOP) / SAMPLE_RATE, frames);
        // Text tokens of each span, for word timing.
        const bounds: Array<{ tokens: number[]; start: number; end: number }> = [];
        for (const span of split.spans) {
          // Reported times are clamped to the audio, in order (the reference's are not: a segment may end past the clip).
          const floor = segments.at(-1)?.end ?? 0;
          const start = round(Math.min(Math.max(span.start, floor), duration));
          const end = round(Math.min(Math.max(span.end, start), duration));
          const segment: Segment = {
            id: segments.length,
            seek,
            start,
            end,
            text: textOf(span.tokens),
            tokens: span.tokens,
            temperature: result!.temperature,
            avg_logprob: result!.avgLogprob,
            compression_ratio: ratio,
            no_speech_prob: result!.noSpeechProb,
          };
          segments.push(segment);
          history.push(span);
          bounds.push({ tokens: textTokens(span.tokens, vocabulary), start, end });
        }
        if (words && result!.attention && split.spans.length > 0) {
          const perSegment = await windowWords(
            {
              decoded: result!.tokens,
              attention: result!.attention,
              // The encoder halves the mel frames: attention beyond the audio is padding.
              frames: Math.max(1, Math.floor(frames / 2)),
              offset: (seek * HOP) / SAMPLE_RATE,
              spans: bounds,
              timestampBegin: vocabulary.timestampBegin,
              language,
              filterWidth: runtime.medianFilterWidth,
              after: words.at(-1)?.end,
            },
            (tokens) => runtime.decodeText(tokens),
          );
          words.push(...perSegment.flat());
        }
        if (split.advance > 0) advance = Math.min(split.advance, frames);
      }
      seek += advance;
      done += advance;
      request.onProgress?.(done, totalFrames);
    }
  }
  return {
    text: segments.map((s) => s.text).join('').trim(),
    language: language ?? 'en',
    duration: samples.length / SAMPLE_RATE,
    segments,
    ...(words ? { words } : {}),
  };
}

/** What the model calls silence: no speech likely, and nothing said with confidence. */
function isSilence(result: DecodeResult): boolean {
  return result.noSpeechProb > NO_SPEECH_THRESHOLD && result.avgLogprob < MIN_AVG_LOGPROB;
}

function round(seconds: number): number {
  return Math.round(seconds * 1000) / 1000;
}

/** xorshift32: reproducible sampling per request. */
function seededRandom(seed: number): () => number {
  let state = (seed >>> 0) || 0x9e3779b9;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
}
