/**
 * Realtime API benchmark (not a test): voice-to-voice latency of GET
 * /v1/realtime, from the end of the user's speech to the first byte of the
 * spoken answer, split by stage, as a user experiences it. An lserve server
 * runs in this process (models in runner processes, as `lserve serve` runs
 * them) with a Qwen3-0.6B-sized chat model, a whisper-base-sized Whisper
 * whose decoding says "Hello world." (bench/realtime/whisper.ts) and one voice (the
 * synthetic Piper voice, then Qwen3-TTS-0.6B-sized: a server of its own
 * each, as the session speaks with the server's only voice); the
 * client runs in a process of its own (bench/realtime/client.ts) and streams
 * speech.wav's utterances in real time, 20 ms chunks every 20 ms, silence
 * between them. Per turn, times from the true end of speech:
 *
 *   VAD hangover    → input_audio_buffer.speech_stopped
 *   transcription   → conversation.item.input_audio_transcription.completed
 *   first token     → the first response.output_audio_transcript.delta
 *   first piece     → the deltas hold the first piece the server speaks (its
 *                     SentenceStream with the same options, fed the same
 *                     deltas here: its first clause or sentence end followed
 *                     by more text, a space before 80 characters, or the end
 *                     of the text)
 *   first audio     → the first response.output_audio.delta
 *
 * Then each model's work alone on the same idle server (transcribeSamples,
 * chat, prepareSpeech on the first pieces the turns spoke), to tell the
 * session's own cost from the models'.
 *
 * `--speculation off` answers each turn only once it has ended, as before
 * speculative turns (the session's work from the first pause in the speech).
 * `--warm off` leaves the chat model cold while the user speaks (the
 * session's warm-up evaluates the conversation meanwhile). `--asr
 * whisper-base,whisper-base-q8` also runs each voice with the Whisper's
 * MatMuls in int8, as the catalog's `-q8` entry; `--asr default` installs both as the catalog's
 * `whisper-base` and `whisper-base-q8` and names none (the server's choice for a realtime session).
 *
 * `--cancel qwen3-tts` (the default) cancels each answer of the voices named
 * once its first audio has come (response.cancel, as a user cutting in): the
 * bench Qwen3-TTS talker is a plain Qwen3 on random weights that never
 * draws end of speech (bench/tts/model.ts), so each piece of an answer
 * would speak to its length limit and a turn would wait minutes for the one
 * before; nothing up to the first audio changes, and the next turn starts,
 * as always, once the answer is done. `--cancel ''` hears every answer out.
 *
 * `--polling auto,off` alternates LSERVE_LLAMA_POLLING turn by turn (`--turns`
 * of each): whether the chat's threadpool spins between decodes while the
 * session's voice activity detection and audio keep the server busy.
 *
 *   npx tsx bench/realtime.ts [--voices piper,qwen3-tts] [--turns 5] [--warmup 1] [--threads 2]
 *                             [--max-tokens 40] [--silence-ms 500] [--polling auto] [--speculation on] [--warm on] [--asr whisper-base] [--skip alone]
 *                             [--cancel qwen3-tts]
 */
import { fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { decodeAudio } from '../src/audio/decode.js';
import { Engine } from '../src/compose.js';
import type { EngineEvent } from '../src/core/events.js';
import { chat } from '../src/core/tasks/chat.js';
import { prepareSpeech } from '../src/core/tasks/speak.js';
import { realtimeAsrModel, transcribeSamples } from '../src/core/tasks/transcribe.js';
import { startServer } from '../src/http/server.js';
import type { ClientOptions, TurnTiming } from './realtime/client.js';
import { CHAT, RECOGNIZERS, registerModels, VOICE, VOICES, WHISPER, type RecognizerName, type VoiceName } from './realtime/models.js';

const { values: args } = parseArgs({
  options: {
    voices: { type: 'string', default: VOICES.join(',') },
    asr: { type: 'string', default: 'whisper-base' },
    turns: { type: 'string', default: '5' },
    warmup: { type: 'string', default: '1' },
    threads: { type: 'string', default: String(Math.min(os.availableParallelism(), 2)) },
    'max-tokens': { type: 'string', default: '40' },
    'silence-ms': { type: 'string', default: '500' },
    polling: { type: 'string', default: 'auto' },
    speculation: { type: 'string', default: 'on' },
    warm: { type: 'string', default: 'on' },
    skip: { type: 'string', default: '' },
    cancel: { type: 'string', default: 'qwen3-tts' },
  },
});
const threads = Number(args.threads);
const skip = new Set(args.skip.split(',').filter(Boolean));
const pollingModes = args.polling.split(',').filter(Boolean);
for (const flag of ['speculation', 'warm'] as const) if (args[flag] !== 'on' && args[flag] !== 'off') throw new Error(`--${flag} is on or off (got '${args[flag]}')`);
const INSTRUCTIONS = 'You are a voice assistant. Answer in one short sentence.';
const GOAL_MS = 800;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s[(s.length - 1) >> 1]! + s[s.length >> 1]!) / 2 : NaN;
};
const fmt = (x: number, digits = 0) => (Number.isFinite(x) ? x.toFixed(digits) : '—');
const load = () => os.loadavg().map((l) => l.toFixed(2)).join(' ');

/** A turn as the client timed it, with the server's own figures for it. */
interface Turn extends TurnTiming {
  /** The server's voice-latency metric (from the end of speech as its VAD placed it). */
  serverLatencyMs: number;
  /** The chat's decode rate (its `chat` event). */
  decodeRate: number;
}

/** The stages of a turn: [label, ms]. */
const STAGES: Array<[string, (t: Turn) => number]> = [
  ['VAD hangover (end of speech → speech_stopped)', (t) => t.stopped],
  ['transcription (→ transcription.completed)', (t) => t.transcribed - t.stopped],
  ['first token (→ first transcript delta)', (t) => t.firstToken - t.transcribed],
  ['  of which → response.created', (t) => t.created - t.transcribed],
  ['first piece for speech (→ its last delta)', (t) => t.firstSentence - t.firstToken],
  ['first audio after the first piece (TTS)', (t) => t.firstAudio - t.firstSentence],
  ['  while the text was still being written', (t) => (t.lastToken > t.firstAudio ? t.firstAudio - t.firstSentence : NaN)],
  ['  after the text was written', (t) => (t.lastToken <= t.firstAudio ? t.firstAudio - t.firstSentence : NaN)],
  ['total: end of speech → first audio', (t) => t.firstAudio],
  ['  the server\'s voice-latency metric', (t) => t.serverLatencyMs],
  ['VAD end placement (audio_end_ms − true end)', (t) => t.vadEndMs - t.trueEndMs],
  ['answer done (→ response.done)', (t) => t.done],
];

interface VoiceResult {
  voice: VoiceName;
  recognizer: RecognizerName;
  turns: Turn[];
  alone?: Alone;
}

/** Each model's work alone, ms (medians). */
interface Alone {
  transcription: number;
  chatFirstToken: number;
  /** From the last token to the end of the chat's stream (what the last piece waits for before it is spoken). */
  chatEnd: number;
  speechFirstAudio: number;
}

/** Runs the client; before each turn it names the LSERVE_LLAMA_POLLING to set (read by the runners whenever the set of busy models changes). */
function runClient(options: ClientOptions): Promise<TurnTiming[]> {
  const child = fork(fileURLToPath(new URL('./realtime/client.ts', import.meta.url)), [JSON.stringify(options)], { stdio: 'inherit' });
  const saved = process.env.LSERVE_LLAMA_POLLING;
  return new Promise<TurnTiming[]>((resolve, reject) => {
    let timings: TurnTiming[] | undefined;
    child.on('message', (message: { polling?: string; timings?: TurnTiming[] }) => {
      if (message.polling) process.env.LSERVE_LLAMA_POLLING = message.polling;
      timings ??= message.timings;
    });
    child.on('error', reject);
    child.on('exit', (code) => (timings ? resolve(timings) : reject(new Error(`the client exited with ${code}`))));
  }).finally(() => {
    if (saved === undefined) delete process.env.LSERVE_LLAMA_POLLING;
    else process.env.LSERVE_LLAMA_POLLING = saved;
  });
}

async function runVoice(voice: VoiceName, recognizer: RecognizerName): Promise<VoiceResult> {
  const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-realtime-'));
  const engine = new Engine({ home, threads, keepAliveMs: -1, log: () => {} });
  // One of each per turn, in turn order (warm-ups included): each turn's answer has audio and one chat generation.
  const latencies: number[] = [];
  const rates: number[] = [];
  let listening = true;
  const off = engine.events.on((event: EngineEvent) => {
    if (!listening) return;
    if (event.type === 'voice-latency') latencies.push(event.seconds * 1000);
    if (event.type === 'chat') rates.push(event.decodeTokensPerSecond ?? NaN);
  });
  await registerModels(engine, voice, recognizer);
  const server = await startServer(engine, { host: '127.0.0.1', port: 0, cors: false, maxBodyBytes: 8 << 20, maxUploadBytes: 8 << 20, logFormat: 'off', log: () => {}, speculativeTurns: args.speculation === 'on', warmAnswers: args.warm === 'on' });
  try {
    console.log(`\n## ${voice}, ${recognizer} (load average ${load()})`);
    const warmup = Number(args.warmup);
    const timings = await runClient({
      url: `${server.url.replace(/^http/, 'ws')}/v1/realtime?model=${CHAT}`,
      turns: Number(args.turns),
      warmup,
      maxOutputTokens: Number(args['max-tokens']),
      silenceMs: Number(args['silence-ms']),
      instructions: INSTRUCTIONS,
      // `--asr default`: the session names none, and the server chooses among the two installed.
      transcriptionModel: recognizer === 'default' ? undefined : WHISPER,
      polling: pollingModes,
      cancelAfterAudio: args.cancel.split(',').includes(voice),
    });
    listening = false;
    const turns = timings.map((t, i) => ({ ...t, serverLatencyMs: latencies[warmup + i] ?? NaN, decodeRate: rates[warmup + i] ?? NaN }));
    return { voice, recognizer, turns, alone: skip.has('alone') ? undefined : await aloneSection(engine, turns, recognizer) };
  } finally {
    off();
    await server.close();
    await rm(home, { recursive: true, force: true });
  }
}

/**
 * The three models' work alone, on the idle server, as the session calls
 * it: the turns' utterances transcribed (16 kHz, as the session's clip, with
 * its 300 ms of padding before the speech), a chat answer to the first of
 * them, and the first pieces the turns spoke, synthesised to their first audio.
 */
async function aloneSection(engine: Engine, timings: Turn[], recognizer: RecognizerName): Promise<Alone> {
  const signal = new AbortController().signal;
  const audio = await decodeAudio(readFileSync(new URL('../test/fixtures/audio/speech.wav', import.meta.url)), { sampleRate: 16_000 });
  const segments = (JSON.parse(readFileSync(new URL('../test/fixtures/audio/speech.json', import.meta.url), 'utf8')) as { segments: Array<{ start: number; end: number }> }).segments;
  const clips = segments.map((s) => audio.samples.slice(Math.round((s.start - 0.3) * 16_000), Math.round(s.end * 16_000)));
  const timed = async (fn: () => Promise<unknown>) => {
    const started = performance.now();
    await fn();
    return performance.now() - started;
  };
  const transcription: number[] = [];
  const model = recognizer === 'default' ? await realtimeAsrModel(engine) : WHISPER;
  console.log(`  transcription model: ${model}`);
  for (const [i] of timings.entries()) transcription.push(await timed(() => transcribeSamples(engine, { model, samples: clips[i % clips.length]!, language: 'en' }, signal)));
  const chatFirst: number[] = [];
  const chatEnd: number[] = [];
  for (const [i, t] of timings.entries()) {
    const started = performance.now();
    // A prompt of its own each time (no cached prefix), as long as a session's first turn.
    const messages = [{ role: 'system' as const, content: `Run ${i}. ${INSTRUCTIONS}` }, { role: 'user' as const, content: t.heard }];
    let first: number | undefined;
    let last = NaN;
    for await (const delta of chat(engine, { model: CHAT, messages, maxTokens: Number(args['max-tokens']), thinking: false }, signal)) {
      if (delta.type !== 'content') continue;
      last = performance.now();
      first ??= last - started;
    }
    chatFirst.push(first ?? NaN);
    chatEnd.push(performance.now() - last);
  }
  const speechFirst: number[] = [];
  for (const t of timings) {
    const started = performance.now();
    const prepared = await prepareSpeech(engine, { model: VOICE, input: t.firstPiece, speed: 1 }, signal);
    let first: number | undefined;
    await prepared.run(() => (first ??= performance.now() - started), signal);
    speechFirst.push(first ?? NaN);
  }
  const list = (xs: number[]) => xs.map((x) => fmt(x)).join(', ');
  console.log(`  alone: transcription ${list(transcription)} ms; chat first token ${list(chatFirst)} ms, last token → end ${list(chatEnd)} ms; speech first audio ${list(speechFirst)} ms`);
  return { transcription: median(transcription), chatFirstToken: median(chatFirst), chatEnd: median(chatEnd), speechFirstAudio: median(speechFirst) };
}

function table(results: VoiceResult[]): void {
  // A column per voice, recognizer and polling mode.
  const recognizers = new Set(results.map((r) => r.recognizer));
  const columns = results.flatMap((r) =>
    pollingModes.map((mode) => ({
      label: [r.voice, ...(recognizers.size > 1 ? [r.recognizer.replace('whisper-', '')] : []), ...(pollingModes.length > 1 ? [mode] : [])].join(' '),
      turns: r.turns.filter((t) => t.polling === mode),
      alone: r.alone,
    })),
  );
  const width = Math.max(12, ...columns.map((c) => c.label.length + 2));
  const line = (label: string, cells: string[]) => console.log([label.padEnd(52), ...cells.map((c) => c.padStart(width))].join(''));
  console.log(`\n## Medians, ms (${args.turns} turns per column after ${args.warmup} warm-up; ${threads} threads; load average ${load()})`);
  line('stage', columns.map((c) => c.label));
  // A stage that applies to some turns only: the median of those, and how many there were.
  const cell = (values: number[]) => {
    const some = values.filter(Number.isFinite);
    return some.length === values.length ? fmt(median(some)) : some.length ? `${fmt(median(some))} (${some.length})` : '—';
  };
  for (const [label, get] of STAGES) line(label, columns.map((c) => cell(c.turns.map(get))));
  const rows: Array<[string, (c: (typeof columns)[number]) => string]> = [
    [`goal: total ≤ ${GOAL_MS} ms`, (c) => (median(c.turns.map((t) => t.firstAudio)) <= GOAL_MS ? 'met' : 'NOT met')],
    ['turns', (c) => String(c.turns.length)],
    ['first piece cut at (sentence or clause/length/end)', (c) => ['sentence', 'length', 'end'].map((cut) => c.turns.filter((t) => t.firstCut === cut).length).join('/')],
    ['first piece, characters', (c) => fmt(median(c.turns.map((t) => t.firstPiece.length)))],
    ['answer tokens', (c) => fmt(median(c.turns.map((t) => t.outputTokens)))],
    ['answer text written (→ last transcript delta)', (c) => fmt(median(c.turns.map((t) => t.lastToken)))],
    ['chat decode, tok/s', (c) => fmt(median(c.turns.map((t) => t.decodeRate)), 1)],
    ['most microphone lag, ms', (c) => fmt(Math.max(...c.turns.map((t) => t.sendLagMs)))],
    ['alone: transcription', (c) => fmt(c.alone?.transcription ?? NaN)],
    ['alone: chat first token', (c) => fmt(c.alone?.chatFirstToken ?? NaN)],
    ['alone: chat last token → end of stream', (c) => fmt(c.alone?.chatEnd ?? NaN)],
    ['alone: speech first audio (same first pieces)', (c) => fmt(c.alone?.speechFirstAudio ?? NaN)],
  ];
  for (const [label, cell] of rows) line(label, columns.map(cell));
  for (const r of results) {
    const odd = r.turns.filter((t) => t.speechStarts !== 1);
    if (odd.length) console.log(`note: ${r.voice}: ${odd.length} turn(s) with ${odd.map((t) => t.speechStarts).join(', ')} speech_started events (one expected)`);
  }
}

async function main(): Promise<void> {
  const voices = args.voices.split(',').filter(Boolean);
  const unknown = voices.filter((v) => !(VOICES as readonly string[]).includes(v));
  if (unknown.length) throw new Error(`unknown voice(s) ${unknown.join(', ')} (${VOICES.join(', ')})`);
  console.log(`lserve realtime benchmark: speculative turns ${args.speculation}, warm-up ${args.warm}, ${threads} threads, node ${process.version}, ${os.cpus()[0]?.model ?? 'cpu'} ×${os.availableParallelism()}, load average ${load()}`);
  const { utterances } = await import('./realtime/client.js');
  for (const u of await utterances()) console.log(`utterance "${u.text}": speech.json end vs last sample above -40 dBFS: ${fmt(((u.energyEndSample - u.endSample) * 1000) / 24_000, 1)} ms`);
  const recognizers = args.asr.split(',').filter(Boolean);
  const unknownAsr = recognizers.filter((r) => !(RECOGNIZERS as readonly string[]).includes(r));
  if (unknownAsr.length) throw new Error(`unknown --asr ${unknownAsr.join(', ')} (${RECOGNIZERS.join(', ')})`);
  const results: VoiceResult[] = [];
  for (const voice of voices as VoiceName[]) for (const recognizer of recognizers as RecognizerName[]) results.push(await runVoice(voice, recognizer));
  table(results);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
