import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultSessionConfig } from '../../src/api/realtime/session-config.js';
import { RealtimeSession } from '../../src/realtime/session.js';
import type { SpeculationEvent } from '../../src/realtime/session-host.js';
import type { Engine } from '../../src/core/engine.js';
import { CHAT_MODEL_ID } from '../helpers/chat-model.js';
import { busyModels, EventLog, pcm24k, silence, SPEECH_WAV, startVoiceServer, streamAudioLive, type WireEvent } from '../helpers/realtime.js';
import type { TestServer } from '../helpers/server.js';

/**
 * Turns answered from the first pause in the user's speech (speculative
 * turns): the session works on the turn as soon as the speech pauses, holds
 * everything, and sends it when the turn does end there, or drops it when
 * the speech goes on. The sessions here are the route's RealtimeSession on
 * the real models (tiny Qwen3, Whisper, synthetic Piper), driven in the
 * test's process so that speculation can be switched off to compare and
 * its outcomes observed; the audio is streamed at the pace it plays, as a
 * microphone sends it. Each comparison uses a fresh engine per side, so
 * that neither finds the other's work cached.
 */

let servers: TestServer[] = [];
let speech: Buffer;

beforeAll(async () => {
  servers = await Promise.all([startVoiceServer(), startVoiceServer()]).then((started) => started.map((s) => s.server));
  // Loaded before the sessions, as on a server in use: a turn is not spent loading its models.
  for (const { engine } of servers) {
    for (const [id, kind] of [[CHAT_MODEL_ID, 'chat'], ['whisper-test', 'asr'], ['piper-test', 'tts']] as const) (await engine.acquire(id, [kind])).release();
    await engine.voiceActivity();
  }
  speech = await pcm24k(SPEECH_WAV);
}, 120_000);

afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
});

/** "hello world" (it ends 1.28 s in) and the start of the silence after it: a pause, not yet the end of the turn with 800 ms of silence to end it. */
const spoken = () => Buffer.concat([silence(0.5), speech.subarray(0, 1.4 * 24_000 * 2), silence(0.3)]);
/** The rest of the silence: the turn ends. */
const ended = () => silence(1.5);
const TURN = { type: 'server_vad', silence_duration_ms: 800 };

interface Run {
  log: EventLog<WireEvent>;
  /** performance.now() when each event was sent, by index. */
  sentAt: number[];
  speculations: SpeculationEvent[];
}

/**
 * One session on `engine`: the settings, the audio streamed live, until the
 * answer is done; then the session ends and its work settles. With `heldFirst`,
 * the client stops sending after `audio[0]` until the speculative turn has held
 * an event of that type (the server's VAD only moves on with audio, so the
 * turn cannot end meanwhile), then sends `audio[1]`.
 */
async function runSession(engine: Engine, options: { speculate: boolean; session: Record<string, unknown>; audio: Buffer[]; heldFirst?: string }): Promise<Run> {
  const log = new EventLog<WireEvent>();
  const sentAt: number[] = [];
  const speculations: SpeculationEvent[] = [];
  const session = new RealtimeSession(
    {
      engine,
      dialect: 'ga',
      send: (event) => {
        sentAt.push(performance.now());
        log.push(event as WireEvent);
      },
      log: () => {},
      speculate: options.speculate,
      speculation: (event) => speculations.push(event),
    },
    // Greedy answers (a setting of the beta's sessions only, here the session's own): the two sides of a comparison answer alike.
    { ...defaultSessionConfig(CHAT_MODEL_ID), temperature: 0 },
  );
  session.open();
  await log.next('session.created');
  session.receive(JSON.stringify({ type: 'session.update', session: { type: 'realtime', ...options.session } }));
  await log.next('session.updated');
  const microphone = { send: (event: unknown) => session.receive(JSON.stringify(event)) };
  for (const [i, audio] of options.audio.entries()) {
    if (i > 0 && options.heldFirst) await expect.poll(() => speculations.some((s) => s.type === 'held' && s.event === options.heldFirst), { timeout: 60_000, interval: 20 }).toBe(true);
    await streamAudioLive(microphone, audio);
  }
  await log.next('response.done');
  session.close();
  await session.settled();
  return { log, sentAt, speculations };
}

/**
 * The events with what differs between any two sessions made the same:
 * event ids, and session, item, response and conversation ids (each named by where
 * it first appears); the prompt tokens found cached (the server's own
 * prior work, like timing).
 */
function normalized(events: WireEvent[]): unknown[] {
  const names = new Map<string, string>();
  const rename = (value: unknown): unknown => {
    if (typeof value === 'string' && /^(item|resp|conv|sess)_/.test(value)) {
      if (!names.has(value)) names.set(value, `${value.slice(0, value.indexOf('_'))}#${names.size}`);
      return names.get(value);
    }
    if (Array.isArray(value)) return value.map(rename);
    if (value && typeof value === 'object') {
      return Object.fromEntries(
        Object.entries(value)
          .filter(([key]) => key !== 'event_id')
          .map(([key, v]) => [key, key === 'cached_tokens' ? 'n' : rename(v)]),
      );
    }
    return value;
  };
  return events.map(rename);
}

const ofType = <T>(run: Run, type: string) => run.log.events.filter((e) => e.type === type) as unknown as T[];
const adoption = (run: Run) => run.speculations.filter((s): s is Extract<SpeculationEvent, { type: 'adopted' }> => s.type === 'adopted');
const indexOf = (run: Run, type: string) => run.log.events.findIndex((e) => e.type === type);

describe('speculative turns', () => {
  it('sends the same events, in the same order, as a turn answered after it ended', async () => {
    const settings = { max_output_tokens: 8, audio: { input: { turn_detection: TURN }, output: { voice: 'lessac' } } };
    const [held, plain] = await Promise.all([
      runSession(servers[0]!.engine, { speculate: true, session: settings, audio: [spoken(), ended()], heldFirst: 'response.output_audio.delta' }),
      runSession(servers[1]!.engine, { speculate: false, session: settings, audio: [spoken(), ended()] }),
    ]);
    // The turn was answered from its pause, its first audio made before the turn ended: what was held went out at its end.
    expect(adoption(held)).toHaveLength(1);
    expect(adoption(held)[0]!.released).toContain('response.output_audio.delta');
    expect(plain.speculations).toEqual([]);
    expect(held.log.types()).toContain('response.done');
    expect(held.log.errors()).toEqual([]);
    expect(normalized(held.log.events)).toEqual(normalized(plain.log.events));
  }, 120_000);

  it('drops the work of a pause the speech went on after: nothing of it reaches the client, and its models are released', async () => {
    const engine = servers[0]!.engine;
    // The 1.5 s between the two phrases is a pause, not an end, with 2 s of silence to end a turn.
    const run = await runSession(engine, {
      speculate: true,
      session: { max_output_tokens: 8, audio: { input: { turn_detection: { type: 'server_vad', silence_duration_ms: 2000 } } } },
      audio: [Buffer.concat([silence(0.5), speech, silence(2.5)])],
    });
    const discarded = run.speculations.filter((s) => s.type === 'discarded');
    expect(discarded.map((s) => (s as { reason: string }).reason)).toContain('the speech went on');
    expect(run.speculations.at(-1)).toMatchObject({ type: 'adopted' });

    // One turn, one answer: the whole utterance's.
    for (const type of ['input_audio_buffer.speech_started', 'input_audio_buffer.speech_stopped', 'input_audio_buffer.committed', 'conversation.item.input_audio_transcription.completed', 'response.created', 'response.done']) {
      expect(ofType(run, type), type).toHaveLength(1);
    }
    const [stopped] = ofType<{ audio_end_ms: number }>(run, 'input_audio_buffer.speech_stopped');
    expect(stopped!.audio_end_ms).toBeGreaterThan(3500); // the first phrase ends at 1.8 s into the stream, the second at 4.1 s
    const [completed] = ofType<{ usage: { seconds: number } }>(run, 'conversation.item.input_audio_transcription.completed');
    expect(completed!.usage.seconds).toBeGreaterThan(3); // both phrases and the pause between
    const [created] = ofType<{ response: { id: string } }>(run, 'response.created');
    const responseIds = new Set(run.log.events.flatMap((e) => [(e as { response_id?: string }).response_id, (e as { response?: { id: string } }).response?.id]).filter(Boolean));
    expect([...responseIds]).toEqual([created!.response.id]);
    // Every event before the end of the turn is one the turn's speech made.
    expect(run.log.types().slice(0, indexOf(run, 'input_audio_buffer.speech_stopped'))).toEqual(['session.created', 'session.updated', 'input_audio_buffer.speech_started']);
    expect(run.log.errors()).toEqual([]);
    expect(busyModels(engine)).toEqual([]);
  }, 120_000);

  it('answers sooner: the first audio of the answer leaves with speech_stopped, not after the transcription and the answer', async () => {
    const settings = { max_output_tokens: 8, audio: { input: { turn_detection: TURN } } };
    const [held, plain] = await Promise.all([
      runSession(servers[0]!.engine, { speculate: true, session: settings, audio: [spoken(), ended()], heldFirst: 'response.output_audio.delta' }),
      runSession(servers[1]!.engine, { speculate: false, session: settings, audio: [spoken(), ended()] }),
    ]);
    // Where the work started: the transcript, the answer and its first audio were made before the turn ended, and left with its end at once.
    const [adopted] = adoption(held);
    expect(adopted!.released.slice(0, 4)).toEqual(['conversation.item.input_audio_transcription.delta', 'conversation.item.input_audio_transcription.completed', 'conversation.item.done', 'response.created']);
    expect(adopted!.released).toContain('response.output_audio.delta');
    // As the client sees it (a sanity bound only): without speculation the first audio waits for a transcription and an answer (model calls in other processes) after speech_stopped; with it, for nothing.
    const firstAudio = (run: Run) => run.sentAt[indexOf(run, 'response.output_audio.delta')]! - run.sentAt[indexOf(run, 'input_audio_buffer.speech_stopped')]!;
    expect(firstAudio(held)).toBeLessThan(firstAudio(plain));
  }, 120_000);
});
