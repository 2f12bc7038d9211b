import { INPUT_RATE } from '../api/realtime/audio-format.js';
import { newId } from '../api/realtime/ids.js';
import type { UserMessageItem } from '../api/realtime/items.js';
import { itemObject } from '../api/realtime/server-events.js';
import type { SessionConfig } from '../api/realtime/types.js';
import { InvalidRequestError, ServerError } from '../core/errors.js';
import { prefillChat } from '../core/tasks/chat.js';
import type { VoiceActivityStream } from '../core/voice-activity.js';
import type { Conversation } from './conversation.js';
import { InputAudio } from './input-audio.js';
import { replyRequest, type ResponseRun } from './response-run.js';
import type { SessionHost } from './session-host.js';
import { SpeculativeTurns, type SpeculativeTurn } from './speculative-turn.js';
import { TurnTranscriber } from './turn-transcription.js';

/**
 * The user's side of a realtime session: the input audio buffer, and each
 * turn committed from it (by the end of speech with turn detection, or by
 * the client), transcribed in turn order and answered.
 *
 * Turn taking (server VAD): speech start → speech_started (and barge-in: the
 * response in progress is cancelled); end of speech after the silence →
 * speech_stopped, the turn committed as a user item, transcribed, and
 * answered. Without turn detection the client commits and asks for
 * responses itself.
 *
 * A turn is transcribed by the session's transcription model once it is
 * committed; a streaming recogniser (kind asr-stream) hears it while the
 * user speaks instead (turn-transcription.ts), its deltas going out during
 * the turn.
 *
 * With server VAD, a turn is also worked on from the first pause in the
 * speech, before the silence that ends it has lasted: transcribed and
 * answered, all of it held (speculative-turn.ts). When the turn ends there,
 * the session adopts that work, and its events go out as if the turn had
 * been committed, transcribed and answered at that moment; otherwise the
 * work is discarded unseen.
 */

/** What turn taking needs of its session. */
export interface TurnSession {
  host: SessionHost;
  config(): SessionConfig;
  conversation(): Conversation;
  /** A speculative turn's conversation becomes the session's when the turn is adopted. */
  adoptConversation(conversation: Conversation): void;
  /** The response in progress (not an out-of-band one). */
  response(): ResponseRun | undefined;
  /** Answers the turns committed: a response, unless the client asked for one first. */
  answer(): void;
  /** A response begun by a speculative turn, now the session's. */
  track(run: ResponseRun): void;
  emit(type: string, fields: Record<string, unknown>): void;
  fail(error: unknown): void;
  log(message: string): void;
  /** The session's end. */
  signal: AbortSignal;
}

export class TurnTaking {
  private input: InputAudio | undefined;
  private vad: VoiceActivityStream | undefined;
  private readonly transcriber: TurnTranscriber;
  /** Turns being transcribed, answered in order. */
  private turns: Promise<void> = Promise.resolve();
  /** How many turns `turns` is still transcribing. */
  private transcribing = 0;
  /** The turn in progress, worked on since its speech paused. */
  private readonly speculation: SpeculativeTurns;
  /** The chat model's warm-up for the turn being spoken (prefillAnswer). */
  private prefilled: Promise<void> = Promise.resolve();
  /** A committed turn waits for the response in progress to end. */
  private unanswered = false;
  /** performance.now() when the user's last turn ended, until its answer's first audio. */
  private speechEndedAt: number | undefined;
  /** The item id of the turn being spoken, from speech_started. */
  private pendingTurn: string | undefined;

  constructor(private readonly session: TurnSession) {
    this.transcriber = new TurnTranscriber(session.host.engine, (type, fields) => session.emit(type, fields), session.log, session.signal);
    this.speculation = new SpeculativeTurns((event) => session.host.speculation?.(event));
  }

  /** Readies the input for the current turn detection and the transcription model. */
  async open(): Promise<void> {
    await this.configureInput();
    await this.useTranscriptionModel(this.session.config().input.transcription?.model);
  }

  /** The session's turn detection changed: the turn being heard is dropped. */
  async turnDetectionChanged(): Promise<void> {
    this.transcriber.drop();
    await this.configureInput();
  }

  useTranscriptionModel(model: string | undefined): Promise<void> {
    return this.transcriber.useModel(model);
  }

  /** The session closed: turn detection stops (its work stops with the session's signal). */
  close(): void {
    this.vad?.close();
  }

  /** Settles when every turn is transcribed and the work beside them has stopped. */
  async settled(): Promise<void> {
    await this.turns;
    await Promise.all([this.speculation.settled(), this.prefilled]);
  }

  /** Nothing a committed turn would wait for: no response, no turn before it still to be transcribed or answered. */
  idle(): boolean {
    return !this.session.response() && !this.unanswered && this.transcribing === 0 && !this.session.signal.aborted;
  }

  append(samples: Float32Array, arrivedAt: number): void {
    try {
      this.requireInput().append(samples, arrivedAt);
    } catch (error) {
      // The buffer overflowed and was cleared: the turn in progress is gone.
      this.discardSpeculation('the input audio buffer was cleared');
      throw error;
    }
    this.transcriber.heard(samples);
  }

  /** input_audio_buffer.clear. */
  clear(): void {
    this.requireInput().clear();
    this.transcriber.drop();
  }

  /** input_audio_buffer.commit: the buffer, and the decoder's `tail`, become a turn the client answers itself. */
  commit(tail: () => Float32Array): void {
    const input = this.requireInput();
    const [held, rest] = [input.commit(), tail()];
    const clip = new Float32Array(held.length + rest.length);
    clip.set(held);
    clip.set(rest, held.length);
    if (clip.length < INPUT_RATE / 10) {
      throw new InvalidRequestError(`Cannot commit: the input audio buffer holds ${Math.round((clip.length * 1000) / INPUT_RATE)} ms of audio; at least 100 ms is needed.`, {
        code: 'input_audio_buffer_commit_empty',
      });
    }
    this.speechEndedAt = performance.now();
    this.commitTurn(clip, this.pendingTurn ?? newId('item'), false);
    this.pendingTurn = undefined;
  }

  /** The response in progress ended: a turn committed meanwhile is answered now. */
  responseEnded(): void {
    if (this.unanswered && !this.session.signal.aborted) this.answerWhenFree();
  }

  /** A response's first audio went out: a spoken turn's answer is heard from now. */
  firstAudio(run: ResponseRun): void {
    if (this.speechEndedAt === undefined || run.outOfBand) return;
    this.session.host.voiceLatency?.((performance.now() - this.speechEndedAt) / 1000);
    this.speechEndedAt = undefined;
  }

  discardSpeculation(reason: string): void {
    this.speculation.discard(reason);
  }

  /** The input buffer for the current turn detection, with a VAD stream when it detects turns. */
  private async configureInput(): Promise<void> {
    const turnDetection = this.session.config().input.turnDetection;
    if (turnDetection && !this.vad) this.vad = (await this.session.host.engine.voiceActivity()).createStream();
    if (this.input) {
      this.input.configure(turnDetection);
      return;
    }
    this.input = new InputAudio(
      turnDetection,
      this.vad,
      {
        speechStarted: (startMs) => this.speechStarted(startMs),
        speechStopped: (endMs, clip) => this.speechStopped(endMs, clip),
        speechPaused: (endMs, clip) => this.speechPaused(endMs, clip),
        speechResumed: () => this.discardSpeculation('the speech went on'),
        failed: (error) => {
          this.discardSpeculation('turn detection failed');
          this.session.log(`voice activity detection failed: ${(error as Error).message}`);
          this.session.fail(new ServerError('Turn detection failed: commit the audio yourself (turn_detection: null).', { cause: error }));
        },
      },
      this.session.signal,
    );
  }

  private requireInput(): InputAudio {
    if (!this.input) throw new InvalidRequestError('The session is not ready for audio yet.', { code: 'session_not_ready' });
    return this.input;
  }

  private speechStarted(startMs: number): void {
    const config = this.session.config();
    this.discardSpeculation('a new turn began');
    this.pendingTurn = newId('item');
    this.session.emit('input_audio_buffer.speech_started', { audio_start_ms: startMs, item_id: this.pendingTurn });
    // From the padded start of the speech, which the detector hears a little after it arrives.
    if (config.input.transcription) this.transcriber.started(this.pendingTurn, this.requireInput().turnAudio());
    else this.transcriber.drop();
    // Barge-in: the user speaks over the answer.
    const response = this.session.response();
    if (response && config.input.turnDetection?.interruptResponse) response.cancel('turn_detected');
    else if (this.session.host.warm !== false && config.type === 'realtime' && config.input.turnDetection?.createResponse && config.input.transcription && this.idle()) this.prefillAnswer();
  }

  /**
   * While the user speaks a turn that will be answered, the chat model
   * evaluates the conversation so far (and the start of a user message), so
   * that the answer, once the turn is transcribed, evaluates only the
   * transcript: the first token comes that much sooner. It matters most
   * after an answer: templates such as Qwen3's render an earlier answer
   * unlike the tokens that generated it (its empty thought dropped), and an
   * answer cut at what the user heard differs from what was generated, so
   * the answer before the turn is evaluated again either way. (Without a
   * transcription model the turn reaches the model empty: nothing to warm.)
   */
  private prefillAnswer(): void {
    const request = replyRequest(this.session.config(), { conversation: 'auto' }, this.session.conversation());
    request.messages.push({ role: 'user', content: '' });
    this.prefilled = prefillChat(this.session.host.engine, request, this.session.signal);
  }

  private speechStopped(endMs: number, clip: Float32Array): void {
    const id = this.pendingTurn ?? newId('item');
    this.pendingTurn = undefined;
    this.speechEndedAt = this.requireInput().arrivalOf(endMs);
    this.session.emit('input_audio_buffer.speech_stopped', { audio_end_ms: endMs, item_id: id });
    const speculation = this.speculation.take(id, endMs, clip, this.session.config(), this.session.conversation(), this.idle());
    if (speculation) this.adopt(speculation);
    else this.commitTurn(clip, id, this.session.config().input.turnDetection?.createResponse ?? false);
  }

  /**
   * The speech paused: unless the session is busy with something a new
   * turn would wait for, the turn is worked on as if it ended here, held.
   */
  private speechPaused(endMs: number, clip: Float32Array): void {
    this.speculation.discard('the speech paused again');
    const { host } = this.session;
    const config = this.session.config();
    const id = this.pendingTurn;
    const answers = config.type === 'realtime' && config.input.turnDetection?.createResponse;
    // A streaming recogniser's transcript is only final once the turn has ended.
    if (host.speculate === false || !id || !answers || this.transcriber.streaming || !this.idle()) return;
    this.speculation.start(
      {
        engine: host.engine,
        dialect: host.dialect,
        emit: (type, fields) => this.session.emit(type, fields),
        log: this.session.log,
        firstAudio: (run) => this.firstAudio(run),
        failed: (error) => this.session.fail(error),
        signal: this.session.signal,
        held: (event) => host.speculation?.({ type: 'held', itemId: id, event }),
      },
      id,
      endMs,
      clip,
      config,
      this.session.conversation(),
    );
  }

  /** The turn ended where it paused: it commits with the speculative turn's work, whose held events go out now. */
  private adopt(turn: SpeculativeTurn): void {
    // The conversation the answer was written in: the session's, with the turn in it.
    this.session.adoptConversation(turn.conversation);
    this.session.emit('input_audio_buffer.committed', { previous_item_id: turn.previous, item_id: turn.item.id });
    this.session.emit('conversation.item.added', { previous_item_id: turn.previous, item: turn.committedItem });
    const run = turn.adopt();
    this.session.host.speculation?.({ type: 'adopted', itemId: turn.item.id, released: turn.released });
    if (run) this.session.track(run);
    else this.afterTranscription(turn.item, turn.previous, turn.transcribed, true);
  }

  /** A user turn's audio becomes a conversation item; transcribed (in turn order), then answered when `answer`. */
  private commitTurn(clip: Float32Array, id: string, answer: boolean): void {
    const item: UserMessageItem & { id: string } = { id, type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_audio' }] };
    const previous = this.session.conversation().add(item);
    this.session.emit('input_audio_buffer.committed', { previous_item_id: previous, item_id: id });
    this.session.emit('conversation.item.added', { previous_item_id: previous, item: itemObject(item, this.session.host.dialect) });
    this.afterTranscription(item, previous, this.transcriber.transcribe(item, clip, this.session.config().input.transcription), answer);
  }

  /** Once the turn's transcript is there (in turn order), its item is done, and answered when `answer`. */
  private afterTranscription(item: UserMessageItem & { id: string }, previous: string | null, transcribed: Promise<void>, answer: boolean): void {
    this.transcribing++;
    this.turns = this.turns.then(async () => {
      await transcribed;
      this.transcribing--;
      if (this.session.signal.aborted) return;
      this.session.emit('conversation.item.done', { previous_item_id: previous, item: itemObject(item, this.session.host.dialect) });
      if (answer) this.answerWhenFree();
    });
  }

  /**
   * Answers the turns committed so far: now, or when the response in progress
   * ends (a turn finished while the model was still answering the one before
   * is answered next, not left unanswered). Not while the user speaks: that
   * turn's end answers them all.
   */
  private answerWhenFree(): void {
    if (this.session.config().type !== 'realtime' || this.input?.speaking) return;
    if (this.session.response()) {
      this.unanswered = true;
      return;
    }
    this.unanswered = false;
    this.session.answer();
  }
}
