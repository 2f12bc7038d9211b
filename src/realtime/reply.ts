import { randomUUID } from 'node:crypto';
import type { Engine } from '../core/engine.js';
import { chat, holdChat, type ChatRequest, type ChatToolCall, type ChatUsage, type FinishReason } from '../core/tasks/chat.js';
import { prepareSpeech } from '../core/tasks/speak.js';
import { SentenceStream } from '../core/tasks/speak/sentences.js';

/**
 * One spoken reply of a realtime session: the chat model's answer streams
 * as text, and each sentence goes to speech synthesis the moment it is
 * complete, so the first audio leaves while the model is still writing.
 * Sentences are spoken one after another (one synthesis at a time per
 * reply); the text never waits for the speech. Aborting `signal` stops both.
 */

export interface SpeechSettings {
  model?: string;
  /** An lserve voice of the speech model; OpenAI's voice names (alloy, marin, …) pick the model's default voice. */
  voice?: string;
  speed: number;
  /** A voice-design model's described voice; a voice-clone model's reference audio (bytes of an audio file) and its transcript. */
  voiceDescription?: string;
  refAudio?: Uint8Array;
  refText?: string;
  /** Every sentence's seed: a described or cloned voice stays the same voice across sentences. */
  seed?: number;
}

/** OpenAI's Realtime voices: clients send them by default, and no local model has them. */
const OPENAI_VOICES = new Set(['alloy', 'ash', 'ballad', 'coral', 'echo', 'sage', 'shimmer', 'verse', 'marin', 'cedar']);

/** Where a sentence's audio starts in the reply's audio, for cutting the transcript at what was heard. */
export interface SpokenSentence {
  text: string;
  /** Seconds into the reply's audio. */
  start: number;
  end: number;
  /** The reply was stopped while this sentence was being spoken: its audio ends early, and which of its words it holds is unknown. */
  cut?: boolean;
}

/** Longest the text waits for the first piece's audio (a slow voice's first audio; the wait ends with it). */
const FIRST_PIECE_HOLD_MS = 1500;

/** How an answer is cut for speech: the first piece may be a clause or a few words, as it decides when the first audio leaves. */
export const SPOKEN_PIECES = { firstMinChars: 10, firstWordsChars: 20 } as const;

export interface ReplyEvents {
  /** The answer's text as the model writes it (the audio's transcript when there is audio). */
  text(delta: string): void;
  /** Audio of the answer, in order, at `sampleRate`. */
  audio(samples: Float32Array, sampleRate: number): void;
  toolCall(call: ChatToolCall): void;
  /** A sentence's audio is complete: where it lies in the reply's audio. */
  spoken?(sentence: SpokenSentence): void;
}

export interface ReplyResult {
  finishReason: FinishReason;
  usage: ChatUsage;
  text: string;
  /** With speech: each sentence spoken and where its audio lies. */
  spoken: SpokenSentence[];
  /** Seconds of audio made. */
  audioSeconds: number;
}

export async function runReply(engine: Engine, request: ChatRequest, speech: SpeechSettings | undefined, on: ReplyEvents, signal: AbortSignal): Promise<ReplyResult> {
  const spoken: SpokenSentence[] = [];
  let audioSeconds = 0;
  let speaking: Promise<void> = Promise.resolve();
  let speechError: unknown;
  const generationId = randomUUID();
  let firstPiece = true;
  const speak = (sentence: string) => {
    const first = firstPiece;
    firstPiece = false;
    speaking = speaking.then(async () => {
      if (signal.aborted || speechError) return;
      let resumeText = () => {};
      try {
        const voice = speech!.voice !== undefined && OPENAI_VOICES.has(speech!.voice) ? undefined : speech!.voice;
        const { model, speed, voiceDescription, refAudio, refText, seed } = speech!;
        const prepared = await prepareSpeech(engine, { model, input: sentence, voice, speed, voiceDescription, refAudio, refText, seed }, signal);
        if (first && prepared.info.framesPerSecond !== undefined) {
          // The first audio is what the listener waits for, and a model that speaks frame by frame takes long enough to it
          // that the text's decoding beside it doubled the wait (Qwen3-TTS: 0.55 s alone, 1.09 s beside it): the text,
          // far ahead of the speech, pauses until the first audio is out. Not waited for: the synthesis starts at once.
          const hold = holdChat(engine, request.model, generationId, FIRST_PIECE_HOLD_MS);
          resumeText = () => void hold.then((resume) => resume());
        }
        const start = audioSeconds;
        let cut = true;
        try {
          await prepared.run((samples) => {
            audioSeconds += samples.length / prepared.sampleRate;
            on.audio(samples, prepared.sampleRate);
            resumeText();
          }, signal);
          cut = false;
        } finally {
          // A sentence stopped halfway (barge-in) was partly heard: its audio is part of the reply's, which a truncation may reach into.
          if (!cut || audioSeconds > start) {
            const done = { text: sentence, start, end: audioSeconds, ...(cut ? { cut } : {}) };
            spoken.push(done);
            on.spoken?.(done);
          }
        }
      } catch (error) {
        speechError ??= error;
      } finally {
        resumeText();
      }
    });
  };
  const sentences = new SentenceStream(SPOKEN_PIECES);
  let text = '';
  let finishReason: FinishReason = 'stop';
  let usage: ChatUsage = { promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 };
  try {
    for await (const delta of chat(engine, { ...request, generationId }, signal)) {
      if (delta.type === 'content') {
        text += delta.text;
        on.text(delta.text);
        if (speech) for (const sentence of sentences.push(delta.text)) speak(sentence);
      } else if (delta.type === 'tool_call') {
        on.toolCall(delta.call);
      } else if (delta.type === 'done') {
        finishReason = delta.finishReason;
        usage = delta.usage;
      }
    }
    if (speech) for (const sentence of sentences.end()) speak(sentence);
  } finally {
    // Whatever ended the text, the speech already queued finishes or stops with the signal.
    await speaking;
  }
  if (speechError && !signal.aborted) throw speechError;
  return { finishReason, usage, text, spoken, audioSeconds };
}

/**
 * The part of a reply's text the listener heard, when playback stopped
 * `heardSeconds` into its audio (a client's conversation.item.truncate):
 * every sentence whose audio ended before, and of the one playing then the
 * words in proportion to its audio played, to the last whole word. Of a
 * sentence cut short, none: how many of its words its audio holds is
 * unknown, and the model had better forget words than remember unheard ones.
 */
export function heardText(spoken: readonly SpokenSentence[], heardSeconds: number): string {
  const parts: string[] = [];
  for (const sentence of spoken) {
    if (sentence.cut) break;
    if (sentence.end <= heardSeconds) {
      parts.push(sentence.text);
      continue;
    }
    if (sentence.start < heardSeconds) {
      const words = sentence.text.split(/\s+/);
      const fraction = (heardSeconds - sentence.start) / Math.max(sentence.end - sentence.start, 1e-6);
      const kept = words.slice(0, Math.floor(words.length * fraction)).join(' ');
      if (kept) parts.push(kept);
    }
    break;
  }
  return parts.join(' ');
}
