import type { Transcription } from './transcriber.js';

/**
 * The response formats of OpenAI's transcription API, shared by the HTTP
 * route and `lserve transcribe --format`.
 */

export const RESPONSE_FORMATS = ['json', 'text', 'verbose_json', 'srt', 'vtt'] as const;
export type ResponseFormat = (typeof RESPONSE_FORMATS)[number];

export interface FormattedTranscription {
  contentType: string;
  body: string;
}

export interface FormatOptions {
  task?: 'transcribe' | 'translate';
  /** verbose_json lists the segments (default); OpenAI leaves them out when only word timestamps were asked for. */
  segments?: boolean;
}

/**
 * The body of one response format. `words` (when the result has them) appear
 * only in verbose_json, at its top level, as OpenAI's `words` array; the
 * other formats have no place for them.
 */
export function formatTranscription(result: Transcription, format: ResponseFormat, options: FormatOptions = {}): FormattedTranscription {
  switch (format) {
    case 'json':
      return json({ text: result.text, language: result.language, duration: result.duration });
    case 'verbose_json':
      return json({
        task: options.task ?? 'transcribe',
        language: result.language,
        duration: result.duration,
        text: result.text,
        ...(result.words ? { words: result.words } : {}),
        ...(options.segments === false ? {} : { segments: result.segments }),
      });
    case 'text':
      return { contentType: 'text/plain; charset=utf-8', body: `${result.text}\n` };
    case 'srt':
      return { contentType: 'application/x-subrip; charset=utf-8', body: cues(result, ',').map((c, i) => `${i + 1}\n${c}`).join('\n') };
    case 'vtt':
      return { contentType: 'text/vtt; charset=utf-8', body: `WEBVTT\n\n${cues(result, '.').join('\n')}` };
  }
}

function json(value: unknown): FormattedTranscription {
  return { contentType: 'application/json; charset=utf-8', body: JSON.stringify(value) };
}

/** "start --> end\ntext\n" per segment; SRT separates milliseconds with a comma, WebVTT with a dot. */
function cues(result: Transcription, separator: string): string[] {
  return result.segments.map((s) => `${timestamp(s.start, separator)} --> ${timestamp(s.end, separator)}\n${s.text.trim()}\n`);
}

export function timestamp(seconds: number, separator: string): string {
  const ms = Math.max(0, Math.round(seconds * 1000));
  const pad = (n: number, width = 2) => String(n).padStart(width, '0');
  return `${pad(Math.floor(ms / 3_600_000))}:${pad(Math.floor(ms / 60_000) % 60)}:${pad(Math.floor(ms / 1000) % 60)}${separator}${pad(ms % 1000, 3)}`;
}
