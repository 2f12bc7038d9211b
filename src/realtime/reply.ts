import { randomUUID } from 'node:crypto';
import type { Engine } from '../core/engine.js';
import { chat, holdChat, type ChatRequest, type ChatToolCall, type ChatUsage, type FinishReason } from '../core/tasks/chat.js';
import { SentenceStream } from '../core/tasks/speak/sentences.js';
import type { SpokenSentence } from './heard-text.js';
import { ReplyVoice, type SpeechSettings } from './reply-voice.js';

/**
 * One spoken reply of a realtime session: the chat model's answer streams
 * as text, and each sentence goes to speech synthesis the moment it is
 * complete, so the first audio leaves while the model is still writing.
 * Sentences are spoken one after another by one voice held for the reply
 * (reply-voice.ts); the text never waits for the speech. Aborting `signal`
 * stops both.
 */

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
  const generationId = randomUUID();
  const voice = speech
    ? new ReplyVoice(engine, speech, { audio: on.audio, spoken: on.spoken, holdText: () => holdChat(engine, request.model, generationId, FIRST_PIECE_HOLD_MS) }, signal)
    : undefined;
  const sentences = new SentenceStream(SPOKEN_PIECES);
  let text = '';
  let finishReason: FinishReason = 'stop';
  let usage: ChatUsage = { promptTokens: 0, cachedPromptTokens: 0, completionTokens: 0, reasoningTokens: 0 };
  try {
    for await (const delta of chat(engine, { ...request, generationId }, signal)) {
      if (delta.type === 'content') {
        text += delta.text;
        on.text(delta.text);
        if (voice) for (const sentence of sentences.push(delta.text)) voice.say(sentence);
      } else if (delta.type === 'tool_call') {
        on.toolCall(delta.call);
      } else if (delta.type === 'done') {
        finishReason = delta.finishReason;
        usage = delta.usage;
      }
    }
    if (voice) for (const sentence of sentences.end()) voice.say(sentence);
  } finally {
    // Whatever ended the text, the speech already handed over finishes or stops with the signal, and the voice is released.
    await voice?.end();
  }
  if (voice?.error && !signal.aborted) throw voice.error;
  return { finishReason, usage, text, spoken: voice?.spoken ?? [], audioSeconds: voice?.audioSeconds ?? 0 };
}
