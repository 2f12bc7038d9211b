import { readFileSync } from 'node:fs';
import WebSocket from 'ws';
import { decodeAudio } from '../../src/audio/decode.js';
import { floatToInt16 } from '../../src/audio/encode/pcm16.js';
import { SPOKEN_PIECES } from '../../src/realtime/reply.js';
import { SentenceStream } from '../../src/core/tasks/speak/sentences.js';

/**
 * The realtime benchmark's client, in a process of its own (forked by
 * bench/realtime.ts), so that the server's work never delays its clock or
 * its microphone: it dials GET /v1/realtime with `ws`, configures the
 * session, and streams a microphone's audio in real time (24 kHz PCM16,
 * 20 ms chunks, each sent when its 20 ms have passed), silence between
 * turns and during the answers, as a user's microphone keeps sending. Each
 * turn is one utterance of test/fixtures/audio/speech.wav; the next starts
 * once the answer is done. All times are this process's performance.now().
 */

export interface ClientOptions {
  url: string;
  /** Turns per polling mode. */
  turns: number;
  /** Turns run first and left out of the figures (the models' first loads). */
  warmup: number;
  maxOutputTokens: number;
  silenceMs: number;
  instructions: string;
  /** Unset: the session names none (the server's choice). */
  transcriptionModel?: string;
  /** LSERVE_LLAMA_POLLING values, alternated turn by turn: the client asks its parent to set each before the turn. */
  polling: string[];
  /** Cancel each answer (response.cancel) once its first audio arrives, as a user cutting in would, rather than hear it out. */
  cancelAfterAudio: boolean;
}

/** One turn, times in ms from the true end of speech (endAt). */
export interface TurnTiming {
  turn: number;
  said: string;
  polling: string;
  /** The true end of speech on the session's timeline, and where the server's VAD put it (audio_end_ms). */
  trueEndMs: number;
  vadEndMs: number;
  stopped: number;
  transcribed: number;
  created: number;
  firstToken: number;
  firstSentence: number;
  /** How the first piece for speech was cut: at a sentence end (or line break), past the length limit (600 characters without one), or at the end of the text. */
  firstCut: 'sentence' | 'length' | 'end';
  firstPiece: string;
  firstAudio: number;
  /** The last transcript delta: the answer's text is written. */
  lastToken: number;
  done: number;
  status: string;
  outputTokens: number;
  transcript: string;
  heard: string;
  /** Latest a microphone chunk left after its due time, during this turn. */
  sendLagMs: number;
  speechStarts: number;
}

const RATE = 24_000;
const CHUNK = RATE / 50; // 20 ms
const SPEECH = new URL('../../test/fixtures/audio/speech.wav', import.meta.url);
const SEGMENTS = JSON.parse(readFileSync(new URL('../../test/fixtures/audio/speech.json', import.meta.url), 'utf8')) as { segments: Array<{ text: string; start: number; end: number }> };
/** Audio of each utterance taken from before its start: the file's own quiet lead-in. */
const LEAD_S = 0.2;

/** Each utterance of speech.wav at 24 kHz, from LEAD_S before its start to its end (espeak's word timing, checked against the waveform). */
export async function utterances(): Promise<Array<{ text: string; pcm: Int16Array; endSample: number; energyEndSample: number }>> {
  const audio = await decodeAudio(readFileSync(SPEECH), { sampleRate: RATE });
  return SEGMENTS.segments.map((s, i) => {
    const from = Math.round((s.start - LEAD_S) * RATE);
    const to = Math.round(s.end * RATE);
    const next = SEGMENTS.segments[i + 1] ? Math.round(SEGMENTS.segments[i + 1]!.start * RATE) : audio.samples.length;
    // The last sample above -40 dBFS before the next utterance: where the sound really stops.
    let last = to;
    for (let j = from; j < next; j++) if (Math.abs(audio.samples[j]!) > 0.01) last = j + 1;
    return { text: s.text, pcm: floatToInt16(audio.samples.subarray(from, to)), endSample: to - from, energyEndSample: last - from };
  });
}

/** A microphone: one 20 ms chunk every 20 ms, from what was queued, else silence. */
class Microphone {
  private readonly started = performance.now();
  private sent = 0;
  private queued: Int16Array[] = [];
  private offset = 0;
  private timer: NodeJS.Timeout | undefined;
  maxLag = 0;

  constructor(private readonly socket: WebSocket) {}

  /** When chunk `chunk`'s first sample was "captured" (performance.now() time); the chunk is sent when the next one's starts. */
  timeOf(chunk: number): number {
    return this.started + chunk * 20;
  }

  /** Queues audio to start at the next chunk boundary; returns the index of that chunk. */
  say(pcm: Int16Array): number {
    const at = this.sent + this.queued.reduce((n, q) => n + q.length / CHUNK, 0) - this.offset / CHUNK;
    // Padded to whole chunks, so each utterance starts on a chunk boundary.
    const padded = new Int16Array(Math.ceil(pcm.length / CHUNK) * CHUNK);
    padded.set(pcm);
    this.queued.push(padded);
    return at;
  }

  start(): void {
    const tick = () => {
      const now = performance.now();
      // Every chunk whose 20 ms have passed (several after a stall: a microphone's buffer).
      while (this.timeOf(this.sent + 1) <= now) {
        this.maxLag = Math.max(this.maxLag, now - this.timeOf(this.sent + 1));
        const chunk = this.next();
        this.socket.send(JSON.stringify({ type: 'input_audio_buffer.append', audio: Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength).toString('base64') }));
        this.sent++;
      }
      this.timer = setTimeout(tick, Math.max(0, this.timeOf(this.sent + 1) - performance.now()));
    };
    this.timer = setTimeout(tick, 20);
  }

  stop(): void {
    clearTimeout(this.timer);
  }

  private next(): Int16Array {
    const head = this.queued[0];
    if (!head) return new Int16Array(CHUNK);
    const chunk = head.subarray(this.offset, this.offset + CHUNK);
    this.offset += CHUNK;
    if (this.offset >= head.length) {
      this.queued.shift();
      this.offset = 0;
    }
    return chunk;
  }
}

type ServerEvent = Record<string, unknown> & { type: string };

/** A session: server events in arrival order, with their arrival times, and waits on them. */
class Session {
  readonly events: Array<{ at: number; event: ServerEvent }> = [];
  private waiters: Array<() => void> = [];

  constructor(socket: WebSocket) {
    socket.on('message', (data) => {
      const event = JSON.parse(String(data)) as ServerEvent;
      this.events.push({ at: performance.now(), event });
      if (event.type === 'error') console.error(`server error event: ${JSON.stringify(event.error)}`);
      for (const wake of this.waiters.splice(0)) wake();
    });
  }

  /** The first event from index `from` on that matches, waiting for it up to `timeoutMs`. */
  async next(match: (e: ServerEvent) => boolean, from = 0, timeoutMs = 120_000): Promise<{ at: number; event: ServerEvent; index: number }> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const index = this.events.findIndex((e, i) => i >= from && match(e.event));
      if (index >= 0) return { ...this.events[index]!, index };
      if (performance.now() > deadline) throw new Error(`timed out; events since: ${this.events.slice(from).map((e) => e.event.type).join(', ')}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 1000);
        this.waiters.push(() => (clearTimeout(timer), resolve()));
      });
    }
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export async function runTurns(options: ClientOptions): Promise<TurnTiming[]> {
  const speech = await utterances();
  const socket = new WebSocket(options.url);
  const session = new Session(socket);
  await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
  await session.next((e) => e.type === 'session.created');
  socket.send(
    JSON.stringify({
      type: 'session.update',
      session: {
        type: 'realtime',
        instructions: options.instructions,
        max_output_tokens: options.maxOutputTokens,
        audio: {
          input: { transcription: { ...(options.transcriptionModel ? { model: options.transcriptionModel } : {}), language: 'en' }, turn_detection: { type: 'server_vad', silence_duration_ms: options.silenceMs } },
          output: { voice: 'marin' },
        },
      },
    }),
  );
  await session.next((e) => e.type === 'session.updated');
  const mic = new Microphone(socket);
  mic.start();
  await sleep(1000);
  const timings: TurnTiming[] = [];
  try {
    for (let turn = 0; turn < options.warmup + options.turns * options.polling.length; turn++) {
      // Counted turns: each polling mode in turn, each on every utterance alike; warm-ups on the first mode.
      const counted = turn - options.warmup;
      const modes = options.polling;
      const polling = counted < 0 ? modes[0]! : modes[counted % modes.length]!;
      const utterance = speech[(counted < 0 ? turn : Math.floor(counted / modes.length)) % speech.length]!;
      process.send?.({ polling });
      const from = session.events.length;
      mic.maxLag = 0;
      const chunk = mic.say(utterance.pcm);
      const endAt = mic.timeOf(chunk) + (utterance.endSample * 1000) / RATE;
      const trueEndMs = chunk * 20 + (utterance.endSample * 1000) / RATE;
      const stopped = await session.next((e) => e.type === 'input_audio_buffer.speech_stopped', from);
      const item = stopped.event.item_id;
      const transcribed = await session.next((e) => e.type === 'conversation.item.input_audio_transcription.completed' && e.item_id === item, from);
      const created = await session.next((e) => e.type === 'response.created', from);
      const response = (created.event.response as { id: string }).id;
      if (options.cancelAfterAudio) {
        await session.next((e) => e.type === 'response.output_audio.delta' && e.response_id === response, from);
        socket.send(JSON.stringify({ type: 'response.cancel', response_id: response }));
      }
      const done = await session.next((e) => e.type === 'response.done' && (e.response as { id: string }).id === response, from);
      const ofResponse = session.events.slice(from).filter((e) => e.event.response_id === response);
      const deltas = ofResponse.filter((e) => e.event.type === 'response.output_audio_transcript.delta');
      const firstAudio = ofResponse.find((e) => e.event.type === 'response.output_audio.delta');
      if (!deltas.length || !firstAudio) throw new Error(`turn ${turn}: no text or no audio in the answer (${ofResponse.map((e) => e.event.type).join(', ')})`);
      // The server cuts the first piece for speech with this same stream (src/realtime/reply.ts): fed the same deltas, it cuts here.
      const sentences = new SentenceStream(SPOKEN_PIECES);
      let first: { at: number; piece: string; cut: TurnTiming['firstCut'] } | undefined;
      for (const d of deltas) {
        const [piece] = sentences.push(String(d.event.delta));
        if (piece) {
          // A piece that ends in no sentence or clause mark was cut after its first words (firstWordsChars).
          first = { at: d.at, piece, cut: /[.!?…。！？,;:，；：、—–]["'”’」』)\]]*$/.test(piece) ? 'sentence' : 'length' };
          break;
        }
      }
      first ??= { at: deltas.at(-1)!.at, piece: sentences.end()[0] ?? '', cut: 'end' };
      const usage = (done.event.response as { status: string; usage?: { output_tokens?: number } });
      const since = (at: number) => at - endAt;
      const timing: TurnTiming = {
        turn,
        said: utterance.text,
        polling,
        trueEndMs,
        vadEndMs: Number(stopped.event.audio_end_ms),
        stopped: since(stopped.at),
        transcribed: since(transcribed.at),
        created: since(created.at),
        firstToken: since(deltas[0]!.at),
        firstSentence: since(first.at),
        firstCut: first.cut,
        firstPiece: first.piece,
        firstAudio: since(firstAudio.at),
        lastToken: since(deltas.at(-1)!.at),
        done: since(done.at),
        status: usage.status,
        outputTokens: usage.usage?.output_tokens ?? 0,
        transcript: deltas.map((d) => String(d.event.delta)).join(''),
        heard: String(transcribed.event.transcript),
        sendLagMs: mic.maxLag,
        speechStarts: session.events.slice(from).filter((e) => e.event.type === 'input_audio_buffer.speech_started').length,
      };
      if (turn >= options.warmup) timings.push(timing);
      console.log(
        `  ${counted < 0 ? 'warm-up' : `turn ${counted + 1}`}${modes.length > 1 ? ` (polling ${polling})` : ''}: "${utterance.text}" → stopped +${timing.stopped.toFixed(0)} ms, transcribed +${timing.transcribed.toFixed(0)}, ` +
          `first token +${timing.firstToken.toFixed(0)}, first piece +${timing.firstSentence.toFixed(0)} (${first.cut}, ${first.piece.length} chars), first audio +${timing.firstAudio.toFixed(0)} ms; ` +
          `${timing.outputTokens} tokens, ${timing.status}; mic lag ≤ ${timing.sendLagMs.toFixed(0)} ms`,
      );
      // The user listens to the end of the answer, then speaks again (the audio keeps streaming meanwhile).
      await sleep(800);
    }
  } finally {
    mic.stop();
    socket.close();
  }
  return timings;
}

/** Forked by bench/realtime.ts: options in argv[2], the timings back over IPC. */
if (process.send && process.argv[2]) {
  runTurns(JSON.parse(process.argv[2]) as ClientOptions).then(
    (timings) => process.send!({ timings }, () => process.exit(0)),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
}
