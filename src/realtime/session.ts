import { InputAudioDecoder, INPUT_RATE } from '../api/realtime/audio-format.js';
import { parseClientEvent, type ClientEvent, type ResponseParams } from '../api/realtime/client-events.js';
import { RealtimeEventError } from '../api/realtime/errors.js';
import { newEventId, newId } from '../api/realtime/ids.js';
import type { UserMessageItem } from '../api/realtime/items.js';
import { errorEvent, itemObject, serverEventName } from '../api/realtime/server-events.js';
import { mergeSessionPatch, sessionObject } from '../api/realtime/session-config.js';
import type { Dialect, SessionConfig } from '../api/realtime/types.js';
import { decodeAudio } from '../audio/decode.js';
import type { Engine } from '../core/engine.js';
import { asLserveError, InvalidRequestError, ServerError } from '../core/errors.js';
import { prefillChat } from '../core/tasks/chat.js';
import { MAX_REFERENCE_SECONDS } from '../core/tasks/speak.js';
import type { VoiceActivityStream } from '../core/voice-activity.js';
import { Conversation, type Item } from './conversation.js';
import { InputAudio } from './input-audio.js';
import { replyRequest, ResponseRun, truncateHeard } from './response-run.js';
import { SpeculativeTurn } from './speculative-turn.js';
import { TurnTranscriber } from './turn-transcription.js';

/**
 * One realtime session (GET /v1/realtime): the client's events in, the
 * server's out, whatever carries them (the WebSocket route). Client events
 * are handled one after another in arrival order; a response or a turn's
 * transcription runs beside them, so audio keeps flowing while the model
 * answers (and can interrupt it). A bad event is answered with an `error`
 * event naming it, and the session goes on.
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

/** Client events that leave a speculative turn's work valid: audio, and reading the conversation or stopping audio no turn is playing yet. */
const QUIET_EVENTS = new Set<ClientEvent['type']>(['input_audio_buffer.append', 'conversation.item.retrieve', 'output_audio_buffer.clear']);

export interface SessionHost {
  engine: Engine;
  dialect: Dialect;
  /** Sends one server event (already in the client's dialect). */
  send(event: Record<string, unknown>): void;
  log(message: string): void;
  /** A voice turn's latency: from the end of the user's speech to the first audio of the answer. */
  voiceLatency?(seconds: number): void;
  /** Turns are worked on from the first pause (default true; false only to compare, the client sees the same events either way). */
  speculate?: boolean;
  /** The chat model evaluates the conversation while the user speaks (default true; false only to compare). */
  warm?: boolean;
  /** What became of each turn worked on from a pause (for tests and benchmarks). */
  speculation?(event: SpeculationEvent): void;
  /** The bytes of a voice-clone reference as sent (base64, a data URI, or a path or URL where the server allows them); errors name `param`. Without it sessions take no reference. */
  readReferenceAudio?(value: string, param: string, signal: AbortSignal): Promise<Uint8Array>;
}

export type SpeculationEvent =
  | { type: 'started'; itemId: string }
  /** The turn's work made an event, held until the turn ends. */
  | { type: 'held'; itemId: string; event: string }
  /** The turn committed as expected; `released`: the events held until then, sent at once. */
  | { type: 'adopted'; itemId: string; released: readonly string[] }
  | { type: 'discarded'; itemId: string; reason: string };

export class RealtimeSession {
  readonly id = newId('sess');
  private config: SessionConfig;
  /** Replaced by a speculative turn's copy when that turn is adopted. */
  private conversation = new Conversation();
  private readonly closed = new AbortController();
  private decoder: InputAudioDecoder;
  private input: InputAudio | undefined;
  private vad: VoiceActivityStream | undefined;
  private response: ResponseRun | undefined;
  private readonly outOfBand = new Set<ResponseRun>();
  /** Client events, handled in order. */
  private queue: Promise<void> = Promise.resolve();
  /** Turns being transcribed, answered in order. */
  private turns: Promise<void> = Promise.resolve();
  /** How many turns `turns` is still transcribing. */
  private transcribing = 0;
  /** The turn in progress, worked on since its speech paused. */
  private speculation: SpeculativeTurn | undefined;
  /** Discarded speculative turns whose work is still stopping. */
  private stopping: Promise<void> = Promise.resolve();
  /** The chat model's warm-up for the turn being spoken (prefillAnswer). */
  private prefilled: Promise<void> = Promise.resolve();
  /** A committed turn waits for the response in progress to end. */
  private unanswered = false;
  /** performance.now() when the user's last turn ended, until its answer's first audio. */
  private speechEndedAt: number | undefined;
  private readonly transcriber: TurnTranscriber;

  constructor(
    private readonly host: SessionHost,
    config: SessionConfig,
  ) {
    this.config = config;
    this.decoder = new InputAudioDecoder(config.input.format);
    this.transcriber = new TurnTranscriber(host.engine, (type, fields) => this.emit(type, fields), (message) => host.log(`realtime ${this.id}: ${message}`), this.closed.signal);
  }

  /** Announces the session (session.created) and readies turn detection. */
  open(): void {
    this.enqueue(async () => {
      await this.configureInput();
      await this.transcriber.useModel(this.config.input.transcription?.model);
      this.emit('session.created', { session: sessionObject(this.config, this.id, this.host.dialect) });
    });
  }

  /** One text message from the client, `arrivedAt` (performance.now()) when it arrived. */
  receive(text: string, arrivedAt = performance.now()): void {
    let event: ClientEvent;
    try {
      event = parseClientEvent(text, this.host.dialect);
    } catch (error) {
      this.fail(error);
      return;
    }
    this.enqueue(() => this.handle(event, arrivedAt), event.eventId);
  }

  /** The client left: every piece of work stops and its models are released. */
  close(): void {
    if (this.closed.signal.aborted) return;
    this.closed.abort(new Error('the session closed'));
    this.discardSpeculation('the session closed');
    this.response?.cancel('client_cancelled');
    for (const run of this.outOfBand) run.cancel('client_cancelled');
    this.vad?.close();
  }

  /** Settles when all work of the session has ended (its responses included). */
  async settled(): Promise<void> {
    await this.queue;
    await this.turns;
    await Promise.all([this.response?.done, this.stopping, this.prefilled, ...[...this.outOfBand].map((r) => r.done)]);
  }

  private enqueue(work: () => Promise<void> | void, eventId?: string): void {
    this.queue = this.queue.then(async () => {
      if (this.closed.signal.aborted) return;
      try {
        await work();
      } catch (error) {
        this.fail(error, eventId);
      }
    });
  }

  private async handle(event: ClientEvent, arrivedAt: number): Promise<void> {
    // Whatever the client does besides speaking and reading may change what the turn in progress would be answered with.
    if (!QUIET_EVENTS.has(event.type)) this.discardSpeculation(`the client sent ${event.type}`);
    switch (event.type) {
      case 'session.update': {
        const refAudio = typeof event.session.refAudio === 'string' ? await this.referenceAudio(event.session.refAudio) : undefined;
        return this.update(mergeSessionPatch(this.config, event.session, refAudio));
      }
      case 'input_audio_buffer.append':
        return this.append(event.audio, arrivedAt);
      case 'input_audio_buffer.commit':
        return this.commit();
      case 'input_audio_buffer.clear':
        this.requireInput().clear();
        this.transcriber.drop();
        this.emit('input_audio_buffer.cleared', {});
        return;
      case 'output_audio_buffer.clear':
        // Audio goes out as deltas, never buffered here (OpenAI's buffer is WebRTC's): stopping the response is what the client asks for.
        this.response?.cancel('client_cancelled');
        this.emit('output_audio_buffer.cleared', {});
        return;
      case 'conversation.item.create': {
        const item = { ...event.item, id: event.item.id ?? newId('item'), status: 'completed' as const } as Item;
        const previous = this.conversation.add(item, event.previousItemId);
        this.emit('conversation.item.added', { previous_item_id: previous, item: itemObject(item, this.host.dialect) });
        this.emit('conversation.item.done', { previous_item_id: previous, item: itemObject(item, this.host.dialect) });
        return;
      }
      case 'conversation.item.retrieve':
        this.emit('conversation.item.retrieved', { item: itemObject(this.conversation.get(event.itemId), this.host.dialect, { audio: true }) });
        return;
      case 'conversation.item.truncate':
        return this.truncate(event.itemId, event.contentIndex, event.audioEndMs);
      case 'conversation.item.delete':
        this.conversation.delete(event.itemId);
        this.emit('conversation.item.deleted', { item_id: event.itemId });
        return;
      case 'response.create':
        return this.createResponse(event.response);
      case 'response.cancel': {
        const run = event.responseId ? [this.response, ...this.outOfBand].find((r) => r?.id === event.responseId) : this.response;
        if (!run) throw new InvalidRequestError(event.responseId ? `No response '${event.responseId}' is in progress.` : 'No response is in progress.', { code: 'response_cancel_not_active', param: 'response_id' });
        run.cancel('client_cancelled');
        return;
      }
    }
  }

  private async update(next: SessionConfig): Promise<void> {
    if (next.type !== this.config.type) {
      // GA clients open a transcription session as a realtime one (the SDKs need a model to connect) and then say so: nothing was said yet, so nothing is lost.
      const fresh = this.conversation.size === 0 && !this.response && this.outOfBand.size === 0;
      if (next.type !== 'transcription' || !fresh) {
        const when = next.type === 'transcription' ? ' once its conversation has begun' : '';
        throw new RealtimeEventError('invalid_value', `A ${this.config.type} session cannot become a ${next.type} session${when}: open another.`, { param: 'session.type' });
      }
    }
    if (next.type === 'realtime' && next.model !== this.config.model) await this.host.engine.resolve(next.model, ['chat'], 'session.model');
    if (next.output.speechModel !== undefined && next.output.speechModel !== this.config.output.speechModel) {
      await this.host.engine.resolve(next.output.speechModel, ['tts'], this.host.dialect === 'ga' ? 'session.audio.output.model' : 'session.speech_model');
    }
    const before = this.config;
    this.config = next;
    if (JSON.stringify(next.input.format) !== JSON.stringify(before.input.format)) this.decoder = new InputAudioDecoder(next.input.format);
    if (JSON.stringify(next.input.turnDetection) !== JSON.stringify(before.input.turnDetection)) {
      this.transcriber.drop();
      await this.configureInput();
    }
    if (next.input.transcription?.model !== before.input.transcription?.model) await this.transcriber.useModel(this.config.input.transcription?.model);
    this.emit('session.updated', { session: sessionObject(this.config, this.id, this.host.dialect) });
  }

  /** A voice-clone reference, read and checked to be audio a voice can be copied from, once: every sentence of every answer speaks with it. */
  private async referenceAudio(value: string): Promise<Uint8Array> {
    const param = this.host.dialect === 'ga' ? 'session.audio.output.ref_audio' : 'session.ref_audio';
    if (!this.host.readReferenceAudio) throw new InvalidRequestError('This server takes no reference audio in realtime sessions.', { param, code: 'unsupported_value' });
    const bytes = await this.host.readReferenceAudio(value, param, this.closed.signal);
    const audio = await decodeAudio(bytes, { sampleRate: INPUT_RATE, maxDurationSec: MAX_REFERENCE_SECONDS, param, signal: this.closed.signal });
    if (audio.duration < 0.5) throw new InvalidRequestError(`The reference audio is ${audio.duration.toFixed(2)} s long; give at least half a second of the voice.`, { param, code: 'invalid_value' });
    return bytes;
  }

  /** The input buffer for the current turn detection, with a VAD stream when it detects turns. */
  private async configureInput(): Promise<void> {
    const turnDetection = this.config.input.turnDetection;
    if (turnDetection && !this.vad) this.vad = (await this.host.engine.voiceActivity()).createStream();
    if (this.input) {
      this.input.configure(turnDetection);
      return;
    }
    this.input = new InputAudio(turnDetection, this.vad, {
      speechStarted: (startMs) => this.speechStarted(startMs),
      speechStopped: (endMs, clip) => this.speechStopped(endMs, clip),
      speechPaused: (endMs, clip) => this.speechPaused(endMs, clip),
      speechResumed: () => this.discardSpeculation('the speech went on'),
      failed: (error) => {
        this.discardSpeculation('turn detection failed');
        this.host.log(`realtime ${this.id}: voice activity detection failed: ${(error as Error).message}`);
        this.fail(new ServerError('Turn detection failed: commit the audio yourself (turn_detection: null).', { cause: error }));
      },
    }, this.closed.signal);
  }

  private requireInput(): InputAudio {
    if (!this.input) throw new InvalidRequestError('The session is not ready for audio yet.', { code: 'session_not_ready' });
    return this.input;
  }

  private append(audio: string, arrivedAt: number): void {
    const samples = this.decoder.decode(audio);
    try {
      this.requireInput().append(samples, arrivedAt);
    } catch (error) {
      // The buffer overflowed and was cleared: the turn in progress is gone.
      this.discardSpeculation('the input audio buffer was cleared');
      throw error;
    }
    this.transcriber.heard(samples);
  }

  private pendingTurn: string | undefined;

  private speechStarted(startMs: number): void {
    this.discardSpeculation('a new turn began');
    this.pendingTurn = newId('item');
    this.emit('input_audio_buffer.speech_started', { audio_start_ms: startMs, item_id: this.pendingTurn });
    // From the padded start of the speech, which the detector hears a little after it arrives.
    if (this.config.input.transcription) this.transcriber.started(this.pendingTurn, this.requireInput().turnAudio());
    else this.transcriber.drop();
    // Barge-in: the user speaks over the answer.
    if (this.response && this.config.input.turnDetection?.interruptResponse) this.response.cancel('turn_detected');
    else if (this.host.warm !== false && this.config.type === 'realtime' && this.config.input.turnDetection?.createResponse && this.config.input.transcription && this.idle()) this.prefillAnswer();
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
    const request = replyRequest(this.config, { conversation: 'auto' }, this.conversation);
    request.messages.push({ role: 'user', content: '' });
    this.prefilled = prefillChat(this.host.engine, request, this.closed.signal);
  }

  private speechStopped(endMs: number, clip: Float32Array): void {
    const id = this.pendingTurn ?? newId('item');
    this.pendingTurn = undefined;
    this.speechEndedAt = this.requireInput().arrivalOf(endMs);
    this.emit('input_audio_buffer.speech_stopped', { audio_end_ms: endMs, item_id: id });
    const speculation = this.takeSpeculation(id, endMs, clip);
    if (speculation) this.adopt(speculation);
    else this.commitTurn(clip, id, this.config.input.turnDetection?.createResponse ?? false);
  }

  /**
   * The speech paused: unless the session is busy with something a new
   * turn would wait for, the turn is worked on as if it ended here, held.
   */
  private speechPaused(endMs: number, clip: Float32Array): void {
    this.discardSpeculation('the speech paused again');
    const id = this.pendingTurn;
    const answers = this.config.type === 'realtime' && this.config.input.turnDetection?.createResponse;
    // A streaming recogniser's transcript is only final once the turn has ended.
    if (this.host.speculate === false || !id || !answers || this.transcriber.streaming || !this.idle()) return;
    this.speculation = new SpeculativeTurn(
      {
        engine: this.host.engine,
        dialect: this.host.dialect,
        emit: (type, fields) => this.emit(type, fields),
        log: (message) => this.host.log(`realtime ${this.id}: ${message}`),
        firstAudio: (run) => this.firstAudio(run),
        failed: (error) => this.fail(error),
        signal: this.closed.signal,
        held: (event) => this.host.speculation?.({ type: 'held', itemId: id, event }),
      },
      id,
      endMs,
      clip,
      this.config,
      this.conversation,
    );
    this.host.speculation?.({ type: 'started', itemId: id });
  }

  /** Nothing a committed turn would wait for: no response, no turn before it still to be transcribed or answered. */
  private idle(): boolean {
    return !this.response && !this.unanswered && this.transcribing === 0 && !this.closed.signal.aborted;
  }

  /** The speculative turn, when it is the turn that just ended (`id`, its end and audio) and nothing it was based on changed; else it is discarded. */
  private takeSpeculation(id: string, endMs: number, clip: Float32Array): SpeculativeTurn | undefined {
    const turn = this.speculation;
    if (!turn) return undefined;
    this.speculation = undefined;
    const same = turn.matches(id, endMs, clip, this.config, this.conversation);
    if (same && this.idle()) return turn;
    this.discard(turn, same ? 'the session became busy' : 'the turn ended elsewhere');
    return undefined;
  }

  private discardSpeculation(reason: string): void {
    const turn = this.speculation;
    this.speculation = undefined;
    if (turn) this.discard(turn, reason);
  }

  private discard(turn: SpeculativeTurn, reason: string): void {
    turn.discard();
    const stopped = turn.settled();
    this.stopping = Promise.all([this.stopping, stopped]).then(() => {});
    this.host.speculation?.({ type: 'discarded', itemId: turn.item.id, reason });
  }

  /** The turn ended where it paused: it commits with the speculative turn's work, whose held events go out now. */
  private adopt(turn: SpeculativeTurn): void {
    // The conversation the answer was written in: the session's, with the turn in it.
    this.conversation = turn.conversation;
    this.emit('input_audio_buffer.committed', { previous_item_id: turn.previous, item_id: turn.item.id });
    this.emit('conversation.item.added', { previous_item_id: turn.previous, item: turn.committedItem });
    const run = turn.adopt();
    this.host.speculation?.({ type: 'adopted', itemId: turn.item.id, released: turn.released });
    if (run) this.track(run);
    else this.afterTranscription(turn.item, turn.previous, turn.transcribed, true);
  }

  private commit(): void {
    const input = this.requireInput();
    const [held, tail] = [input.commit(), this.decoder.flush()];
    const clip = new Float32Array(held.length + tail.length);
    clip.set(held);
    clip.set(tail, held.length);
    if (clip.length < INPUT_RATE / 10) {
      throw new InvalidRequestError(`Cannot commit: the input audio buffer holds ${Math.round((clip.length * 1000) / INPUT_RATE)} ms of audio; at least 100 ms is needed.`, {
        code: 'input_audio_buffer_commit_empty',
      });
    }
    this.speechEndedAt = performance.now();
    this.commitTurn(clip, this.pendingTurn ?? newId('item'), false);
    this.pendingTurn = undefined;
  }

  /** A user turn's audio becomes a conversation item; transcribed (in turn order), then answered when `answer`. */
  private commitTurn(clip: Float32Array, id: string, answer: boolean): void {
    const item: UserMessageItem & { id: string } = { id, type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_audio' }] };
    const previous = this.conversation.add(item);
    this.emit('input_audio_buffer.committed', { previous_item_id: previous, item_id: id });
    this.emit('conversation.item.added', { previous_item_id: previous, item: itemObject(item, this.host.dialect) });
    this.afterTranscription(item, previous, this.transcriber.transcribe(item, clip, this.config.input.transcription), answer);
  }

  /** Once the turn's transcript is there (in turn order), its item is done, and answered when `answer`. */
  private afterTranscription(item: UserMessageItem & { id: string }, previous: string | null, transcribed: Promise<void>, answer: boolean): void {
    this.transcribing++;
    this.turns = this.turns.then(async () => {
      await transcribed;
      this.transcribing--;
      if (this.closed.signal.aborted) return;
      this.emit('conversation.item.done', { previous_item_id: previous, item: itemObject(item, this.host.dialect) });
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
    if (this.config.type !== 'realtime' || this.input?.speaking) return;
    if (this.response) {
      this.unanswered = true;
      return;
    }
    this.unanswered = false;
    // A client's response.create may have come first: then that response answers the turn.
    this.enqueue(() => {
      if (!this.response) this.createResponse({ conversation: 'auto' });
    });
  }

  private createResponse(params: ResponseParams): void {
    if (this.config.type !== 'realtime') throw new InvalidRequestError('A transcription session makes no responses.', { code: 'invalid_session_type' });
    if (params.conversation === 'auto' && this.response) {
      throw new InvalidRequestError(`Conversation already has an active response in progress: ${this.response.id}. Wait until the response is finished before creating a new one.`, {
        code: 'conversation_already_has_active_response',
      });
    }
    const run = new ResponseRun(
      {
        engine: this.host.engine,
        dialect: this.host.dialect,
        conversation: this.conversation,
        emit: (type, fields) => this.emit(type, fields),
        firstAudio: () => this.firstAudio(run),
        failed: (error) => this.fail(error),
      },
      this.config,
      params,
    );
    this.track(run);
  }

  /** A response begun: the session's one in progress (or one of its out-of-band ones) until it is done. */
  private track(run: ResponseRun): void {
    if (run.outOfBand) this.outOfBand.add(run);
    else this.response = run;
    void run.done.finally(() => {
      if (this.response === run) {
        this.response = undefined;
        if (this.unanswered && !this.closed.signal.aborted) this.answerWhenFree();
      }
      this.outOfBand.delete(run);
    });
  }

  /** A response's first audio went out: a spoken turn's answer is heard from now. */
  private firstAudio(run: ResponseRun): void {
    if (this.speechEndedAt === undefined || run.outOfBand) return;
    this.host.voiceLatency?.((performance.now() - this.speechEndedAt) / 1000);
    this.speechEndedAt = undefined;
  }

  private truncate(itemId: string, contentIndex: number, audioEndMs: number): void {
    const item = this.conversation.get(itemId);
    try {
      truncateHeard(item, contentIndex, audioEndMs);
    } catch (error) {
      throw new RealtimeEventError('invalid_value', `Cannot truncate item '${itemId}': ${(error as Error).message}.`, { param: error instanceof RangeError ? 'audio_end_ms' : 'content_index' });
    }
    this.emit('conversation.item.truncated', { item_id: itemId, content_index: contentIndex, audio_end_ms: audioEndMs });
  }

  private emit(type: string, fields: Record<string, unknown>): void {
    const name = serverEventName(type, this.host.dialect, this.config.type);
    if (name === undefined || this.closed.signal.aborted) return;
    this.host.send({ event_id: newEventId(), type: name, ...fields });
  }

  /** An `error` event for what went wrong; the session goes on. */
  private fail(error: unknown, eventId?: string): void {
    if (this.closed.signal.aborted) return;
    const typed = asLserveError(error);
    if (typed.status >= 500 && typed.status !== 503) this.host.log(`realtime ${this.id}: ${(typed.cause as Error)?.stack ?? typed.stack}`);
    this.host.send(errorEvent(typed, eventId) as unknown as Record<string, unknown>);
  }
}

