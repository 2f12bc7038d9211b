import type { UserMessageItem } from '../api/realtime/items.js';
import { itemObject } from '../api/realtime/server-events.js';
import type { Dialect, SessionConfig } from '../api/realtime/types.js';
import type { Engine } from '../core/engine.js';
import type { LserveError } from '../core/errors.js';
import type { Conversation } from './conversation.js';
import { ResponseRun } from './response-run.js';
import type { SpeculationEvent } from './session-host.js';
import { TurnTranscriber } from './turn-transcription.js';

/**
 * A user turn worked on before it ends, as voice agents do to answer
 * sooner: at the first pause in the user's speech (the silence that ends
 * the turn if it lasts silence_duration_ms), the audio so far is
 * transcribed and answered (chat and speech) on a copy of the conversation
 * with the turn in it. Nothing of it is visible meanwhile: its events, its
 * conversation and what its work reports (metrics) are held.
 *
 * If the turn then ends there, the session adopts it: the held events go
 * out in the order they were made (after the turn's own speech_stopped,
 * committed and item.added, which the session sends), exactly those the
 * turn committed and answered at that moment would have sent, and the rest
 * as it comes; its conversation becomes the session's. If the speech goes
 * on, or anything the work depends on changes first (the session's
 * settings, its conversation, a response asked for), the session discards
 * it: the work stops at once (its models released) and nothing it did
 * remains.
 */

export interface SpeculationHost {
  engine: Engine;
  dialect: Dialect;
  /** Sends a server event by its GA name, as the session does. */
  emit(type: string, fields: Record<string, unknown>): void;
  log(message: string): void;
  /** The answer's first audio delta went out. */
  firstAudio(run: ResponseRun): void;
  /** The answer failed (an `error` event). */
  failed(error: LserveError): void;
  /** The session's end: the work stops with it. */
  signal: AbortSignal;
  /** An event was held (its GA type): for watching the work, as tests do. */
  held?(type: string): void;
}

export class SpeculativeTurn {
  /** The turn's user item, its transcript written into it once there. */
  readonly item: UserMessageItem & { id: string };
  /** The item as conversation.item.added carries it when the turn commits (before its transcript). */
  readonly committedItem: ReturnType<typeof itemObject>;
  /** The item before the turn's (previous_item_id). */
  readonly previous: string | null;
  /** The session's conversation, then this turn, then the answer as it is written: the session's own once adopted. */
  readonly conversation: Conversation;
  /** Which version of the session's conversation it copied. */
  private readonly basedOn: number;
  /** Settles when the turn's transcript is there or has failed (never rejects). */
  readonly transcribed: Promise<void>;
  /** The answer, once the transcript is there (while held). */
  private run: ResponseRun | undefined;
  private state: 'held' | 'adopted' | 'discarded' = 'held';
  private held: Array<() => void> = [];
  /** The types of the events held, in order (what adoption released at once). */
  private heldTypes: string[] = [];
  private readonly controller = new AbortController();

  constructor(
    private readonly host: SpeculationHost,
    id: string,
    /** Where the turn ends if it ends here (audio_end_ms). */
    private readonly endMs: number,
    private readonly clip: Float32Array,
    /** The session's settings it works with. */
    private readonly config: SessionConfig,
    conversation: Conversation,
  ) {
    this.item = { id, type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_audio' }] };
    this.committedItem = itemObject(this.item, host.dialect);
    this.basedOn = conversation.version;
    this.conversation = conversation.fork();
    this.previous = this.conversation.add(this.item);
    const stop = () => this.controller.abort(host.signal.reason);
    host.signal.addEventListener('abort', stop, { once: true });
    // Held too: what the models did counts once the turn is adopted.
    const engine = host.engine.reportingTo((event) => this.hold(() => host.engine.report(event)));
    const transcriber = new TurnTranscriber(engine, (type, fields) => this.emit(type, fields), host.log, this.controller.signal);
    this.transcribed = transcriber.transcribe(this.item, clip, config.input.transcription).finally(() => host.signal.removeEventListener('abort', stop));
    void this.transcribed.then(() => this.answer(engine));
  }

  /** The types of the events adoption released at once. */
  get released(): readonly string[] {
    return this.heldTypes;
  }

  /**
   * Whether the turn that ended (`id` at `endMs` with `clip`) is this one,
   * and what its work was based on is unchanged: the same audio to the
   * sample, the session's settings and conversation as they were.
   */
  matches(id: string, endMs: number, clip: Float32Array, config: SessionConfig, conversation: Conversation): boolean {
    if (id !== this.item.id || endMs !== this.endMs || config !== this.config || conversation.version !== this.basedOn) return false;
    return clip.length === this.clip.length && clip.every((sample, i) => sample === this.clip[i]);
  }

  /**
   * The turn committed as expected: the events held go out in order, and the
   * rest as they come. Returns the answer when it has begun; without one (the
   * transcript not there yet) the session answers the turn as any other.
   */
  adopt(): ResponseRun | undefined {
    if (this.state !== 'held') throw new Error(`a ${this.state} speculative turn cannot be adopted`);
    this.state = 'adopted';
    const held = this.held;
    this.held = [];
    for (const action of held) action();
    return this.run;
  }

  /** The turn did not end here, or what it was based on changed: its work stops, and nothing it held is ever sent. */
  discard(): void {
    if (this.state !== 'held') return;
    this.state = 'discarded';
    this.held = [];
    this.controller.abort(new Error('the speculative turn was discarded'));
    this.run?.cancel('client_cancelled');
  }

  /** Settles when its work has ended (a discarded turn's models released). */
  async settled(): Promise<void> {
    await this.transcribed;
    await this.run?.done;
  }

  /** The transcript is there: the turn's item is done and answered, as the session does at commit (unless it was adopted meanwhile, and does). */
  private answer(engine: Engine): void {
    if (this.state !== 'held' || this.controller.signal.aborted) return;
    this.emit('conversation.item.done', { previous_item_id: this.previous, item: itemObject(this.item, this.host.dialect) });
    const run: ResponseRun = new ResponseRun(
      {
        engine,
        dialect: this.host.dialect,
        conversation: this.conversation,
        emit: (type, fields) => this.emit(type, fields),
        firstAudio: () => this.hold(() => this.host.firstAudio(run)),
        failed: (error) => this.hold(() => this.host.failed(error)),
      },
      this.config,
      { conversation: 'auto' },
    );
    this.run = run;
  }

  private emit(type: string, fields: Record<string, unknown>): void {
    this.hold(() => this.host.emit(type, fields), type);
  }

  /** Runs `action` now once adopted; until then in order at adoption, never once discarded. */
  private hold(action: () => void, type?: string): void {
    if (this.state === 'adopted') return action();
    if (this.state === 'discarded') return;
    this.held.push(action);
    if (!type) return;
    this.heldTypes.push(type);
    this.host.held?.(type);
  }
}

/** A session's speculative turns: the one being worked on (at most one), and those discarded until their work has stopped. */
export class SpeculativeTurns {
  private current: SpeculativeTurn | undefined;
  private stopping: Promise<void> = Promise.resolve();

  constructor(
    /** What became of each (SessionHost.speculation). */
    private readonly observe: ((event: SpeculationEvent) => void) | undefined,
  ) {}

  /** Works on turn `id` as if it ended at `endMs` with `clip` (the arguments of SpeculativeTurn), once the one before is discarded. */
  start(host: SpeculationHost, id: string, endMs: number, clip: Float32Array, config: SessionConfig, conversation: Conversation): void {
    if (this.current) throw new Error('a speculative turn is already being worked on');
    this.current = new SpeculativeTurn(host, id, endMs, clip, config, conversation);
    this.observe?.({ type: 'started', itemId: id });
  }

  /** The turn being worked on, when it is the turn that just ended (`id`, its end and audio), nothing it was based on changed and the session is `idle`; else it is discarded. */
  take(id: string, endMs: number, clip: Float32Array, config: SessionConfig, conversation: Conversation, idle: boolean): SpeculativeTurn | undefined {
    const turn = this.current;
    if (!turn) return undefined;
    this.current = undefined;
    const same = turn.matches(id, endMs, clip, config, conversation);
    if (same && idle) return turn;
    this.stop(turn, same ? 'the session became busy' : 'the turn ended elsewhere');
    return undefined;
  }

  /** The turn being worked on, if any, is discarded: its work stops and nothing it held is sent. */
  discard(reason: string): void {
    const turn = this.current;
    this.current = undefined;
    if (turn) this.stop(turn, reason);
  }

  /** Settles when the work of every discarded turn has stopped. */
  settled(): Promise<void> {
    return this.stopping;
  }

  private stop(turn: SpeculativeTurn, reason: string): void {
    turn.discard();
    this.stopping = Promise.all([this.stopping, turn.settled()]).then(() => {});
    this.observe?.({ type: 'discarded', itemId: turn.item.id, reason });
  }
}
