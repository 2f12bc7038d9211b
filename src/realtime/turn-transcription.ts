import { INPUT_RATE } from '../api/realtime/audio-format.js';
import type { UserMessageItem } from '../api/realtime/items.js';
import type { SessionConfig } from '../api/realtime/types.js';
import type { Engine } from '../core/engine.js';
import { asLserveError } from '../core/errors.js';
import { realtimeAsrModel, transcribeSamples } from '../core/tasks/transcribe.js';
import { LiveTranscription } from './live-transcription.js';

/**
 * The transcripts of a realtime session's user turns, through which the chat
 * model hears them. With a streaming recogniser as the transcription model,
 * a turn is transcribed while it is spoken (deltas as the text grows, from
 * speech start); with any other model, the committed clip at once.
 */
export class TurnTranscriber {
  /** The transcription model when it is a streaming recogniser. */
  private streamingModel: string | undefined;
  /** The turn in progress, transcribed live. */
  private live: { itemId: string; transcription: LiveTranscription } | undefined;

  constructor(
    private readonly engine: Engine,
    private readonly emit: (type: string, fields: Record<string, unknown>) => void,
    private readonly log: (message: string) => void,
    private readonly signal: AbortSignal,
  ) {}

  /** The session's transcription model (changed); a model that cannot be found is the transcription's to report, turn by turn. */
  async useModel(model: string | undefined): Promise<void> {
    this.streamingModel = undefined;
    if (!model) return;
    try {
      const installed = await this.engine.resolve(model, ['asr', 'asr-stream']);
      if (installed.entry.kind === 'asr-stream') this.streamingModel = model;
    } catch {
      // Unknown or of another kind: each turn's transcription fails saying so.
    }
  }

  /** Whether turns are transcribed live, while spoken (the transcription model is a streaming recogniser). */
  get streaming(): boolean {
    return this.streamingModel !== undefined;
  }

  /** Speech started (turn `itemId`, its audio so far): a streaming model starts transcribing it. */
  started(itemId: string, audio: Float32Array): void {
    this.drop();
    if (!this.streamingModel) return;
    const transcription = this.liveTranscription(itemId, this.streamingModel);
    transcription.push(audio);
    this.live = { itemId, transcription };
  }

  /** More audio of the turn in progress. */
  heard(samples: Float32Array): void {
    this.live?.transcription.push(samples);
  }

  /** The turn in progress will not be committed (cleared, turn detection changed): its live transcription ends. */
  drop(): void {
    this.live?.transcription.close();
    this.live = undefined;
  }

  /**
   * The committed turn's transcript into `item`, with its events; settles
   * when it is there or has failed (never rejects). Without transcription
   * settings nothing is transcribed.
   */
  async transcribe(item: UserMessageItem & { id: string }, clip: Float32Array, options: SessionConfig['input']['transcription']): Promise<void> {
    let live = this.live?.itemId === item.id ? this.live.transcription : undefined;
    if (live) this.live = undefined;
    if (!options) return live?.close();
    const where = { item_id: item.id, content_index: 0 };
    try {
      if (!live && this.streamingModel && options.model === this.streamingModel) {
        live = this.liveTranscription(item.id, this.streamingModel);
        live.push(clip);
      }
      let transcript: string;
      if (live) {
        transcript = await live.finish();
      } else {
        const model = await realtimeAsrModel(this.engine, options.model);
        transcript = (await transcribeSamples(this.engine, { model, samples: clip, language: options.language, prompt: options.prompt }, this.signal)).text.trim();
        this.emit('conversation.item.input_audio_transcription.delta', { ...where, delta: transcript });
      }
      item.content[0] = { type: 'input_audio', transcript };
      this.emit('conversation.item.input_audio_transcription.completed', { ...where, transcript, usage: { type: 'duration', seconds: clip.length / INPUT_RATE } });
    } catch (error) {
      if (this.signal.aborted) return;
      const typed = asLserveError(error);
      if (typed.status >= 500) this.log(`transcription failed: ${(typed.cause as Error)?.stack ?? typed.stack}`);
      this.emit('conversation.item.input_audio_transcription.failed', { ...where, error: { type: typed.type, code: typed.code, message: typed.message, param: typed.param } });
    }
  }

  private liveTranscription(itemId: string, model: string): LiveTranscription {
    const delta = (text: string) => this.emit('conversation.item.input_audio_transcription.delta', { item_id: itemId, content_index: 0, delta: text });
    return new LiveTranscription(this.engine, model, delta, this.signal);
  }
}
