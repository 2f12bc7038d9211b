import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import WebSocket from 'ws';
import { createStreamingLoader, type RecognizerStream, type StreamingRecognizer } from '../../src/families/sherpa-streaming/streaming.js';
import { Engine, defaultLoaders } from '../../src/compose.js';
import { startServer, type RunningServer } from '../../src/http/server.js';
import { fmt, median, percentile, repeatedSpeech, type Report } from './common.js';
import { benchZipformer } from './models.js';
import { zipformerBenchMacs } from './zipformer.js';

/**
 * Live recognition on the real-size synthetic streaming Zipformer2
 * (bench/asr/zipformer.ts), in sherpa-onnx's child process as lserve runs it.
 *
 * - Chunk latency: each stream pushes 100 ms of audio (speech.wav repeated)
 *   every 100 ms, in real time, streams started at staggered moments. For
 *   every push, the time until the recognizer process reports (its
 *   `progress` message, sent right after the decode and its result) that it
 *   has decoded everything decodable up to that push. Most pushes only add
 *   features (sherpa decodes a 32-frame chunk once 45 frames are there:
 *   every 320 ms of audio); the pushes that complete a chunk wait for its
 *   decode, and for the other streams' decodes queued before it — those are
 *   the ones that matter, printed separately ("decode pushes").
 * - Capacity: more and more streams until the recognizer falls behind real
 *   time (undecoded audio left 1 s after the last push, or decode pushes'
 *   p95 over one chunk period).
 * - Onset latency over the WebSocket route (GET /v1/audio/transcriptions/stream,
 *   PCM16 frames): from sending the first 100 ms of sound after ≥ 2.5 s of
 *   silence (an endpoint has closed the last utterance) to the first
 *   non-empty partial: what a user sees, including the model's own chunk
 *   delay (up to a 320 ms chunk plus 130 ms of right context must arrive
 *   before the first sound frames can be decoded).
 *
 * All of it once with the engine's thread count (what lserve passes to
 * sherpa-onnx as numThreads), then with 1 thread, each in its own process.
 */

const RATE = 16_000;
const CHUNK = 1600; // 100 ms

export interface StreamingOptions {
  threads: number;
  /** Seconds of audio per stream in each latency run. */
  seconds: number;
  /** Stream counts to try for the capacity search (ascending; stops at the first that falls behind). */
  capacity: number[];
  /** Latency runs (1 and 4 streams), each `seconds` long. */
  runs: number;
}

interface StreamTrace {
  pushes: Array<{ at: number; end: number; decode: boolean }>;
  progress: Array<{ at: number; consumed: number }>;
  finishedAt: number;
}

interface LiveResult {
  all: number[];
  decodes: number[];
  /** Undecoded audio (ms of audio) per stream when the last push was made, worst stream. */
  backlogAtEndMs: number;
  /** After the last push, until every stream's audio was decoded. */
  drainMs: number;
}

/** Pushes that complete a chunk: sherpa decodes once T = 45 frames (25 ms window, 10 ms hop) beyond the last 32-frame chunk exist. */
function completesChunk(samplesBefore: number, samplesAfter: number): boolean {
  const frames = (n: number) => (n < 400 ? 0 : Math.floor((n - 400) / 160) + 1);
  const chunks = (f: number) => (f < 45 ? 0 : Math.floor((f - 45) / 32) + 1);
  return chunks(frames(samplesAfter)) > chunks(frames(samplesBefore));
}

async function live(recognizer: StreamingRecognizer, streams: number, seconds: number, audio: Float32Array): Promise<LiveResult> {
  const traces: StreamTrace[] = [];
  const runs: Array<Promise<void>> = [];
  const t0 = performance.now() + 50;
  for (let k = 0; k < streams; k++) {
    const trace: StreamTrace = { pushes: [], progress: [], finishedAt: 0 };
    traces.push(trace);
    const stream: RecognizerStream = recognizer.open();
    const internal = stream as unknown as { progress(consumed: number): void };
    const progress = internal.progress.bind(stream);
    internal.progress = (consumed: number) => {
      trace.progress.push({ at: performance.now(), consumed });
      progress(consumed);
    };
    // Staggered starts (as users connect at random moments) and different places in the audio.
    const phase = (k * 100) / streams + (k % 7) * 37;
    const offset = (k * 23_000) % audio.length;
    const total = Math.round((seconds * RATE) / CHUNK);
    runs.push(
      (async () => {
        let sent = 0;
        for (let i = 0; i < total; i++) {
          const due = t0 + phase + i * 100;
          const wait = due - performance.now();
          if (wait > 0) await new Promise((r) => setTimeout(r, wait));
          const chunk = new Float32Array(CHUNK);
          for (let j = 0; j < CHUNK; j++) chunk[j] = audio[(offset + sent + j) % audio.length]!;
          trace.pushes.push({ at: performance.now(), end: sent + CHUNK, decode: completesChunk(sent, sent + CHUNK) });
          stream.push(chunk);
          sent += CHUNK;
        }
        // Wait (≤ 5 s) until everything decodable was decoded.
        const last = trace.pushes.at(-1)!;
        const deadline = performance.now() + 5000;
        while (performance.now() < deadline && !trace.progress.some((p) => p.consumed >= last.end)) await new Promise((r) => setTimeout(r, 5));
        trace.finishedAt = trace.progress.find((p) => p.consumed >= last.end)?.at ?? Number.POSITIVE_INFINITY;
        stream.close();
      })(),
    );
  }
  await Promise.all(runs);
  const all: number[] = [];
  const decodes: number[] = [];
  let backlogAtEndMs = 0;
  let lastPush = 0;
  let finished = 0;
  for (const t of traces) {
    for (const p of t.pushes) {
      const covered = t.progress.find((q) => q.consumed >= p.end && q.at >= p.at);
      const latency = (covered?.at ?? Number.POSITIVE_INFINITY) - p.at;
      all.push(latency);
      if (p.decode) decodes.push(latency);
    }
    const last = t.pushes.at(-1)!;
    const acknowledged = [...t.progress].reverse().find((q) => q.at <= last.at)?.consumed ?? 0;
    backlogAtEndMs = Math.max(backlogAtEndMs, ((last.end - acknowledged) / RATE) * 1000);
    lastPush = Math.max(lastPush, last.at);
    finished = Math.max(finished, t.finishedAt);
  }
  return { all, decodes, backlogAtEndMs, drainMs: finished - lastPush };
}

/** Over the WebSocket route: sound after silence, time to the first non-empty partial. */
async function onsets(server: RunningServer, streams: number, seconds: number, model: string): Promise<number[]> {
  const latencies: number[] = [];
  const pattern = (i: number) => i % 40 < 15; // 1.5 s of sound, 2.5 s of silence (an endpoint: rule 1/2 at 1.2–2.4 s of trailing silence)
  const noise = repeatedSpeech(2);
  await Promise.all(
    Array.from({ length: streams }, async (_, k) => {
      const socket = new WebSocket(`${server.url.replace('http', 'ws')}/v1/audio/transcriptions/stream?model=${model}`);
      await new Promise<void>((resolve, reject) => {
        socket.once('open', () => resolve());
        socket.once('error', reject);
      });
      let onsetAt = 0;
      let waiting = false;
      socket.on('message', (data) => {
        const message = JSON.parse(data.toString()) as { text?: string };
        if (waiting && message.text) {
          latencies.push(performance.now() - onsetAt);
          waiting = false;
        }
      });
      const total = Math.round((seconds * RATE) / CHUNK);
      const t0 = performance.now() + 50 + (k * 100) / streams;
      for (let i = 0; i < total; i++) {
        const wait = t0 + i * 100 - performance.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const pcm = Buffer.alloc(CHUNK * 2);
        if (pattern(i)) for (let j = 0; j < CHUNK; j++) pcm.writeInt16LE(Math.round(((Math.random() * 2 - 1) * 0.3 + noise[(i * CHUNK + j) % noise.length]!) * 16000), j * 2);
        if (pattern(i) && !pattern(i - 1) && i > 0) {
          onsetAt = performance.now();
          waiting = true;
        }
        socket.send(pcm);
      }
      socket.send(JSON.stringify({ type: 'end' }));
      await new Promise<void>((resolve) => socket.once('close', () => resolve()));
    }),
  );
  return latencies;
}

/** One engine (its own sherpa-onnx process) with `threads` for the recognizer: latency at 1 and 4 streams, then the capacity ladder. */
async function measure(report: Report, o: StreamingOptions, dir: string, threads: number, audio: Float32Array, withOnsets: boolean): Promise<{ p95At4: number; sustained: number }> {
  const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-stream-'));
  const loader = createStreamingLoader({ maxStreams: Math.max(16, ...o.capacity) });
  const engine = new Engine({ home, threads, keepAliveMs: -1, loaders: { ...defaultLoaders, 'onnx:asr-stream': async () => loader } });
  await engine.store.registerDirectory(dir, { kind: 'asr-stream', id: 'zipformer-synth' });
  const server = await startServer(engine, { host: '127.0.0.1', port: 0, cors: false, maxBodyBytes: 8 << 20, maxUploadBytes: 8 << 20, logFormat: 'off', log: () => {} });
  let p95At4 = Number.NaN;
  let sustained = 0;
  const label = `${threads} thread${threads > 1 ? 's' : ''}`;
  try {
    const lease = await engine.acquire<StreamingRecognizer>('zipformer-synth', ['asr-stream']);
    try {
      const recognizer = lease.model;
      await live(recognizer, 1, 2, audio); // warm-up: the sessions' first runs
      for (const n of [1, 4]) {
        const results: LiveResult[] = [];
        for (let i = 0; i < o.runs; i++) results.push(await live(recognizer, n, o.seconds, audio));
        const decodes = results.flatMap((r) => r.decodes);
        const all = results.flatMap((r) => r.all);
        const p95 = percentile(decodes, 95);
        if (n === 4) p95At4 = p95;
        report.row(
          `${label}, ${n} stream${n > 1 ? 's' : ''}: decode pushes → decoded (p50 / p95 / max)`,
          `${fmt(median(decodes), 0)} / ${fmt(p95, 0)} / ${fmt(Math.max(...decodes), 0)} ms`,
          `all pushes p50 ${fmt(median(all), 1)} ms; ${decodes.length} decode pushes`,
        );
      }
      for (const n of o.capacity) {
        const r = await live(recognizer, n, o.seconds, audio);
        const p95 = percentile(r.decodes, 95);
        const keeps = r.drainMs < 1000 && p95 < 320;
        report.row(`${label}, ${n} streams: decode p95 / backlog at last push / drain`, `${fmt(p95, 0)} / ${fmt(r.backlogAtEndMs, 0)} / ${fmt(Math.min(r.drainMs, 99_999), 0)} ms`, keeps ? 'real time' : 'FALLS BEHIND');
        if (!keeps) break;
        sustained = n;
      }
      report.row(`${label}: concurrent real-time streams sustained`, `${sustained}`, `of ${o.capacity.join(', ')} (stops at the first that falls behind)`);
    } finally {
      lease.release();
    }
    if (withOnsets) {
      for (const n of [1, 4]) {
        const latencies = await onsets(server, n, 16, 'zipformer-synth');
        report.row(`${label}, WebSocket, ${n} stream${n > 1 ? 's' : ''}: sound onset → first partial (p50 / max)`, `${fmt(median(latencies), 0)} / ${fmt(Math.max(...latencies), 0)} ms`, `${latencies.length} onsets; up to ~450 ms of it is the model's chunk + right context`);
      }
    }
  } finally {
    await server.close();
    await rm(home, { recursive: true, force: true });
  }
  return { p95At4, sustained };
}

export async function streamingSection(report: Report, o: StreamingOptions): Promise<{ p95At4: number }> {
  const dir = await benchZipformer();
  const audio = repeatedSpeech(30);
  report.section(
    `Streaming recognition: synthetic Zipformer2 at zipformer-en-2023-06-26's dimensions (${fmt(zipformerBenchMacs() / 1e6, 0)} M multiply-adds per 320 ms chunk, int8 MatMuls), ` +
      `sherpa-onnx child process, 100 ms pushes in real time, ${o.seconds} s per stream; the engine's ${o.threads} threads (what lserve gives sherpa-onnx)${o.threads !== 1 ? ', then 1 thread' : ''}:`,
  );
  const main = await measure(report, o, dir, o.threads, audio, true);
  if (o.threads !== 1) await measure(report, o, dir, 1, audio, false);
  report.row('goal: 4 streams, p95 per chunk < 300 ms', Number.isFinite(main.p95At4) ? (main.p95At4 < 300 ? 'met' : 'NOT met') : 'n/a', `p95 ${fmt(main.p95At4, 0)} ms at ${o.threads} threads`);
  return { p95At4: main.p95At4 };
}
