import { INPUT_RATE } from '../api/realtime/audio-format.js';
import type { Engine } from '../core/engine.js';
import { ServerError, type LserveError } from '../core/errors.js';
import type { Lease } from '../core/manager.js';
import type { RecognitionResult, RecognizerStream, StreamingRecognizer } from '../core/tasks/transcribe/streaming.js';

/**
 * A user turn transcribed by a streaming recogniser (a model of kind
 * asr-stream) while the user speaks: audio goes in as it arrives, and the
 * transcript grows in `delta`s, OpenAI's
 * conversation.item.input_audio_transcription.delta. OpenAI's deltas only
 * append: when the recogniser rewrites text it already gave, nothing is sent
 * until its text extends what was sent, and `finish` gives the final
 * transcript, which the completed event carries whole.
 *
 * The model loads and the stream opens in the background: audio pushed
 * before then waits, so the turn's first words are not lost to the load.
 * Audio also waits while the recogniser is behind (its 'drain'), so a long
 * clip given at once (a push-to-talk commit) is heard whole rather than
 * overflowing the stream's bound.
 * The lease is released when the stream ends, fails or is closed (the
 * session's end closes it through `signal`).
 */

export class LiveTranscription {
  private readonly ready: Promise<RecognizerStream>;
  private lease: Lease<StreamingRecognizer> | undefined;
  private stream: RecognizerStream | undefined;
  /** Audio not yet given to the stream: before it opens, and while it is behind. */
  private waiting: Float32Array[] = [];
  private behind = false;
  /** Called once `waiting` is empty (finish waits for it). */
  private drained: (() => void) | undefined;
  private samples = 0;
  private finals: string[] = [];
  private partial = '';
  private sent = '';
  private failure: LserveError | undefined;
  private finishing = false;
  private over = false;
  /** Settles `finish` when the stream ends, fails or is closed first. */
  private settle: ((error?: unknown) => void) | undefined;
  private readonly unlisten: () => void;

  constructor(
    private readonly engine: Engine,
    model: string,
    private readonly delta: (text: string) => void,
    signal: AbortSignal,
  ) {
    this.ready = this.open(model);
    // A failure to open is finish()'s to report.
    this.ready.catch(() => {});
    const abort = () => this.close();
    // Removed at the end: a session makes one per turn, all on its one signal.
    this.unlisten = () => signal.removeEventListener('abort', abort);
    if (signal.aborted) this.close();
    else signal.addEventListener('abort', abort, { once: true });
  }

  /** The turn's audio so far (16 kHz), in order. */
  push(samples: Float32Array): void {
    if (this.over || this.finishing || samples.length === 0) return;
    this.samples += samples.length;
    // In pieces of at most a second, so that the stream takes no more than its bound ahead of its decoding.
    for (let at = 0; at < samples.length; at += INPUT_RATE) this.waiting.push(samples.subarray(at, at + INPUT_RATE));
    this.pump();
  }

  /** No more audio: resolves with the final transcript, once the last delta went out. */
  async finish(): Promise<string> {
    this.finishing = true;
    try {
      const stream = await this.ready;
      await new Promise<void>((resolve, reject) => {
        if (this.failure) return reject(this.failure);
        if (this.over) return reject(new ServerError('The transcription stream was closed.'));
        this.settle = (error) => (error ? reject(error) : resolve());
        stream.on('end', () => this.settle?.());
        this.drained = () => {
          this.drained = undefined;
          stream.finish();
        };
        if (this.waiting.length === 0) this.drained();
      });
      this.engine.report({ type: 'transcription', model: this.lease!.installed.id, audioSeconds: this.samples / INPUT_RATE });
      return this.text();
    } finally {
      this.close();
    }
  }

  /** Abandons the transcription (the session ended, the turn was dropped) and releases the model. */
  close(): void {
    if (this.over) return;
    this.over = true;
    this.unlisten();
    this.waiting = [];
    this.stream?.close();
    this.lease?.release();
    this.settle?.(new ServerError('The transcription stream was closed.'));
  }

  private async open(model: string): Promise<RecognizerStream> {
    const lease = await this.engine.acquire<StreamingRecognizer>(model, ['asr-stream']);
    if (this.over) {
      lease.release();
      throw new ServerError('The transcription stream was closed.');
    }
    this.lease = lease;
    let stream: RecognizerStream;
    try {
      stream = lease.model.open(); // OverloadedError when the server runs its most streams
    } catch (error) {
      this.engine.reportRejection(lease.installed.id, error);
      this.close();
      throw error;
    }
    this.stream = stream;
    stream.on('result', (result) => this.result(result));
    stream.on('error', (error) => {
      this.failure = error;
      this.settle?.(error);
    });
    stream.on('drain', () => {
      this.behind = false;
      this.pump();
    });
    this.pump();
    return stream;
  }

  /** Gives the stream the audio waiting, until it is behind. */
  private pump(): void {
    const stream = this.stream;
    if (!stream || this.over) return;
    while (!this.behind && this.waiting.length > 0) this.behind = !stream.push(this.waiting.shift()!);
    if (this.waiting.length === 0) this.drained?.();
  }

  private result(result: RecognitionResult): void {
    if (result.isFinal) {
      if (result.text.trim()) this.finals.push(result.text.trim());
      this.partial = '';
    } else {
      this.partial = result.text.trim();
    }
    const text = this.text();
    if (text.length > this.sent.length && text.startsWith(this.sent)) {
      this.delta(text.slice(this.sent.length));
      this.sent = text;
    }
  }

  private text(): string {
    return [...this.finals, this.partial].filter(Boolean).join(' ');
  }
}
