import { InvalidRequestError } from '../../errors.js';
import type { SpeechModelInfo } from './synthesizer.js';

/**
 * Speaker and language names as a request may spell them (any case; ISO
 * codes for languages) → as the model spells them, or a 400 that lists what
 * the model accepts.
 */

/** ISO 639-1 codes of the languages synthesis models name in words. */
const LANGUAGE_CODES: Readonly<Record<string, string>> = {
  zh: 'chinese',
  en: 'english',
  ja: 'japanese',
  ko: 'korean',
  de: 'german',
  fr: 'french',
  ru: 'russian',
  pt: 'portuguese',
  es: 'spanish',
  it: 'italian',
};

/** The model's spelling of `language`, or undefined for automatic (absent or `auto`). */
export function canonicalLanguage(language: string | undefined, accepted: readonly string[], model: string): string | undefined {
  if (language === undefined || language.trim() === '' || language.trim().toLowerCase() === 'auto') return undefined;
  if (accepted.length === 0) return language.trim();
  const wanted = language.trim().toLowerCase().replace(/[\s-]+/g, '_');
  // "en", "en-US", "zh_CN": the language's name.
  const code = /^([a-z]{2})(?:_[a-z]{2,4})?$/.exec(wanted)?.[1];
  const name = (code && LANGUAGE_CODES[code]) || wanted;
  const match = accepted.find((candidate) => candidate.toLowerCase().replace(/[\s-]+/g, '_') === name);
  if (match) return match;
  throw new InvalidRequestError(`Model '${model}' does not speak '${language}'. Languages: auto, ${accepted.join(', ')}.`, { param: 'language', code: 'unsupported_language' });
}

/**
 * OpenAI's voice names: its speech API's thirteen (its Realtime API takes a
 * subset of them, and no other). Its SDKs make `voice` required, so code
 * written for OpenAI always sends one of these: a model without a speaker of
 * that name speaks in its default voice instead of refusing the request.
 * The one list: /v1/audio/speech and realtime sessions accept every name in it.
 */
const OPENAI_VOICES = new Set(['alloy', 'ash', 'ballad', 'cedar', 'coral', 'echo', 'fable', 'marin', 'nova', 'onyx', 'sage', 'shimmer', 'verse']);

/** The model's spelling of the requested speaker (its default when none is asked for, or an OpenAI voice it lacks). */
export function canonicalSpeaker(requested: string | undefined, info: SpeechModelInfo, model: string, param: 'speaker' | 'voice'): string | undefined {
  const fallback = info.defaultSpeaker ?? info.speakers[0];
  if (requested === undefined || requested.trim() === '') return fallback;
  const wanted = requested.trim().toLowerCase();
  const match = info.speakers.find((speaker) => speaker.toLowerCase() === wanted);
  if (match) return match;
  if (param === 'voice' && OPENAI_VOICES.has(wanted)) return fallback;
  const list = info.speakers.length > 0 ? `Speakers: ${info.speakers.join(', ')}.` : 'It has no preset speakers.';
  throw new InvalidRequestError(`Model '${model}' has no speaker '${requested}'. ${list}`, { param, code: 'unknown_speaker' });
}
