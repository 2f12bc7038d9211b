import { InputAudioDecoder, INPUT_RATE } from '../api/realtime/audio-format.js';
import { parseClientEvent, type ClientEvent, type ResponseParams } from '../api/realtime/client-events.js';
import { RealtimeEventError } from '../api/realtime/errors.js';
import { newEventId, newId } from '../api/realtime/ids.js';
import { errorEvent, itemObject, serverEventName } from '../api/realtime/server-events.js';
import { mergeSessionPatch, sessionObject } from '../api/realtime/session-config.js';
import type { SessionConfig } from '../api/realtime/types.js';
import { decodeAudio } from '../audio/decode.js';
import { asLserveError, InvalidRequestError } from '../core/errors.js';
import { MAX_REFERENCE_SECONDS } from '../core/tasks/speak.js';
import { Conversation, type Item } from './conversation.js';
import { ResponseRun, truncateHeard } from './response-run.js';
import type { SessionHost } from './session-host.js';
import { TurnTaking } from './turn-taking.js';

/**
 * One realtime session (GET /v1/realtime): the client's events in, the
 * server's out, whatever carries them (the WebSocket route). Client events
 * are handled one after another in arrival order; a response or a turn's
 * transcription runs beside them, so audio keeps flowing while the model
 * answers (and can interrupt it). A bad event is answered with an `error`
 * event naming it, and the session goes on. The user's turns — input audio,
 * turn detection, transcription, turns worked on from a pause — are
 * turn-taking.ts's; the session holds its settings, its conversation and
 * its responses.
 */

/** Client events that leave a speculative turn's work valid: audio, and reading the conversation or stopping audio no turn is playing yet. */
const QUIET_EVENTS = new Set<ClientEvent['type']>(['input_audio_buffer.append', 'conversation.item.retrieve', 'output_audio_buffer.clear']);

export class RealtimeSession {
  readonly id = newId('sess');
  private config: SessionConfig;
  /** Replaced by a speculative turn's copy when that turn is adopted. */
  private conversation = new Conversation();
  private readonly closed = new AbortController();
  private decoder: InputAudioDecoder;
  private response: ResponseRun | undefined;
  private readonly outOfBand = new Set<ResponseRun>();
  /** Client events, handled in order. */
  private queue: Promise<void> = Promise.resolve();
  private readonly turns: TurnTaking;

  constructor(
    private readonly host: SessionHost,
    config: SessionConfig,
  ) {
    this.config = config;
    this.decoder = new InputAudioDecoder(config.input.format);
    this.turns = new TurnTaking({
      host,
      config: () => this.config,
      conversation: () => this.conversation,
      adoptConversation: (conversation) => (this.conversation = conversation),
      response: () => this.response,
      // A client's response.create may have come first: then that response answers the turn.
      answer: () =>
        this.enqueue(() => {
          if (!this.response) this.createResponse({ conversation: 'auto' });
        }),
      track: (run) => this.track(run),
      emit: (type, fields) => this.emit(type, fields),
      fail: (error) => this.fail(error),
      log: (message) => host.log(`realtime ${this.id}: ${message}`),
      signal: this.closed.signal,
    });
  }

  /** Announces the session (session.created) and readies turn detection. */
  open(): void {
    this.enqueue(async () => {
      await this.turns.open();
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
    this.turns.discardSpeculation('the session closed');
    this.response?.cancel('client_cancelled');
    for (const run of this.outOfBand) run.cancel('client_cancelled');
    this.turns.close();
  }

  /** Settles when all work of the session has ended (its responses included). */
  async settled(): Promise<void> {
    await this.queue;
    await this.turns.settled();
    await Promise.all([this.response?.done, ...[...this.outOfBand].map((r) => r.done)]);
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
    if (!QUIET_EVENTS.has(event.type)) this.turns.discardSpeculation(`the client sent ${event.type}`);
    switch (event.type) {
      case 'session.update': {
        const refAudio = typeof event.session.refAudio === 'string' ? await this.referenceAudio(event.session.refAudio) : undefined;
        return this.update(mergeSessionPatch(this.config, event.session, refAudio));
      }
      case 'input_audio_buffer.append':
        return this.turns.append(this.decoder.decode(event.audio), arrivedAt);
      case 'input_audio_buffer.commit':
        return this.turns.commit(() => this.decoder.flush());
      case 'input_audio_buffer.clear':
        this.turns.clear();
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
    if (JSON.stringify(next.input.turnDetection) !== JSON.stringify(before.input.turnDetection)) await this.turns.turnDetectionChanged();
    if (next.input.transcription?.model !== before.input.transcription?.model) await this.turns.useTranscriptionModel(this.config.input.transcription?.model);
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
        firstAudio: () => this.turns.firstAudio(run),
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
        this.turns.responseEnded();
      }
      this.outOfBand.delete(run);
    });
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

