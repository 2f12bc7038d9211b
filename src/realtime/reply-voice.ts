import type { Engine } from '../core/engine.js';
import { prepareVoice, type PreparedVoice } from '../core/tasks/speak.js';
import type { SpokenSentence } from './heard-text.js';

/**
 * The speech of one spoken reply: its sentences, handed over as the text
 * yields them, spoken one after another by one voice. The voice is prepared
 * at the first sentence and held until the reply ends (or is cancelled, or
 * fails): its model resolved and leased once, a cloned voice's reference
 * decoded once and handed to the runtime as the same object for every
 * sentence (which a runtime may cache what it derives from), where
 * preparing it per sentence paid all of that again before each sentence's
 * audio. Prepared lazily, so that a reply with no text (only function
 * calls) never loads a speech model.
 */

export interface SpeechSettings {
  model?: string;
  /** A voice of the speech model, or any voice name /v1/audio/speech accepts (OpenAI's pick the model's default voice). */
  voice?: string;
  speed: number;
  /** A voice-design model's described voice; a voice-clone model's reference audio (bytes of an audio file) and its transcript. */
  voiceDescription?: string;
  refAudio?: Uint8Array;
  refText?: string;
  /** Every sentence's seed: a described or cloned voice stays the same voice across sentences. */
  seed?: number;
}

export interface VoiceEvents {
  /** Audio of the reply, in order, at `sampleRate`. */
  audio(samples: Float32Array, sampleRate: number): void;
  /** A sentence's audio is complete: where it lies in the reply's audio. */
  spoken?(sentence: SpokenSentence): void;
  /** Pauses the reply's text until the first audio; resolves with what resumes it. */
  holdText(): Promise<() => void>;
}

export class ReplyVoice {
  /** Each sentence spoken, and where its audio lies in the reply's. */
  readonly spoken: SpokenSentence[] = [];
  /** Seconds of audio made. */
  audioSeconds = 0;
  /** What stopped the speech, when it failed (the sentences after it are not spoken). */
  error: unknown;
  private voice: Promise<PreparedVoice> | undefined;
  /** The sentences handed over, spoken in order. */
  private speaking: Promise<void> = Promise.resolve();
  private sentences = 0;

  constructor(
    private readonly engine: Engine,
    private readonly settings: SpeechSettings,
    private readonly on: VoiceEvents,
    /** The reply's: aborting it stops the sentence being spoken and drops the rest. */
    private readonly signal: AbortSignal,
  ) {}

  /** Speaks `sentence` after those handed over before it. */
  say(sentence: string): void {
    const first = this.sentences++ === 0;
    this.speaking = this.speaking.then(() => this.speak(sentence, first));
  }

  /** Settles once every sentence handed over is spoken (or stopped with the signal), the voice released. */
  async end(): Promise<void> {
    await this.speaking;
    await this.voice?.then(
      (voice) => voice.release(),
      () => {},
    );
  }

  private async speak(sentence: string, first: boolean): Promise<void> {
    if (this.signal.aborted || this.error) return;
    let resumeText = () => {};
    try {
      const { model, voice: name, speed, voiceDescription, refAudio, refText, seed } = this.settings;
      const voice = await (this.voice ??= prepareVoice(this.engine, { model, voice: name, speed, voiceDescription, refAudio, refText, seed }, this.signal));
      if (first && voice.info.framesPerSecond !== undefined) {
        // The first audio is what the listener waits for, and a model that speaks frame by frame takes long enough to it
        // that the text's decoding beside it doubled the wait (Qwen3-TTS: 0.55 s alone, 1.09 s beside it): the text,
        // far ahead of the speech, pauses until the first audio is out. Not waited for: the synthesis starts at once.
        const hold = this.on.holdText();
        resumeText = () => void hold.then((resume) => resume());
      }
      const start = this.audioSeconds;
      let cut = true;
      try {
        await voice.speak(
          sentence,
          (samples) => {
            this.audioSeconds += samples.length / voice.sampleRate;
            this.on.audio(samples, voice.sampleRate);
            resumeText();
          },
          this.signal,
        );
        cut = false;
      } finally {
        // A sentence stopped halfway (barge-in) was partly heard: its audio is part of the reply's, which a truncation may reach into.
        if (!cut || this.audioSeconds > start) {
          const done = { text: sentence, start, end: this.audioSeconds, ...(cut ? { cut } : {}) };
          this.spoken.push(done);
          this.on.spoken?.(done);
        }
      }
    } catch (error) {
      this.error ??= error;
    } finally {
      resumeText();
    }
  }
}
