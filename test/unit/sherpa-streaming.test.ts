import { statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createStreamingLoader, type RecognitionResult, type RecognizerStream, type StreamingLoader, type StreamingRecognizer } from '../../src/families/sherpa-streaming/streaming.js';
import { Catalog, DEFAULT_CATALOG_PATH } from '../../src/core/catalog.js';
import { ModelLoadError, OverloadedError, ServerError } from '../../src/core/errors.js';
import { defaultLoaders } from '../../src/compose.js';
import type { LoadOptions } from '../../src/core/loader.js';
import type { EngineEvent } from '../../src/core/events.js';
import type { InstalledModel } from '../../src/core/store.js';
import { seededRandom } from '../fixtures/gguf/format.js';
import { tinyZipformerModel, writeZipformerModel, zipformerFiles } from '../fixtures/onnx/zipformer.js';

/**
 * Streaming recognition end to end through the real sherpa-onnx runtime in its
 * child process, on the synthetic Zipformer2 transducer (random weights,
 * steered so that sound decodes to words and silence to blanks: endpoints
 * fire after pauses as with a real model).
 */

const RATE = 16_000;
const OPTIONS: LoadOptions = { threads: 1 };
const CACHE = fileURLToPath(new URL('../.cache/', import.meta.url));

function installed(dir: string, id: string): InstalledModel {
  const entry = Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH)).get('zipformer-en-streaming')!;
  const files = Object.fromEntries(Object.entries(zipformerFiles()).map(([role, name]) => [role, path.join(dir, name)]));
  const sizeBytes = Object.values(files).reduce((sum, file) => sum + statSync(file).size, 0);
  return { id, entry: { ...entry, id }, source: 'local', files, sizeBytes };
}

/** Segments of noise ("speech") and digital silence, in seconds. */
function utterances(pattern: Array<['sound' | 'silence', number]>, seed = 1): Float32Array {
  const random = seededRandom(seed);
  const total = pattern.reduce((sum, [, seconds]) => sum + Math.round(seconds * RATE), 0);
  const out = new Float32Array(total);
  let at = 0;
  for (const [what, seconds] of pattern) {
    const n = Math.round(seconds * RATE);
    if (what === 'sound') for (let i = 0; i < n; i++) out[at + i] = (random() * 2 - 1) * 0.2;
    at += n;
  }
  return out;
}

interface Collected {
  results: RecognitionResult[];
  errors: Error[];
  ended: Promise<void>;
  failed: Promise<Error>;
}

function collect(stream: RecognizerStream): Collected {
  const collected: Collected = { results: [], errors: [], ended: undefined!, failed: undefined! };
  collected.ended = new Promise<void>((resolve) => stream.on('end', resolve));
  collected.failed = new Promise<Error>((resolve) => stream.on('error', resolve));
  stream.on('result', (r) => collected.results.push(r));
  stream.on('error', (e) => collected.errors.push(e));
  return collected;
}

/** Pushes `audio` in random chunk sizes (10–400 ms), waiting for 'drain' whenever push() asks to. */
async function feed(stream: RecognizerStream, audio: Float32Array, seed = 7): Promise<void> {
  const random = seededRandom(seed);
  for (let at = 0; at < audio.length && stream.state === 'open'; ) {
    const n = Math.round(RATE * (0.01 + random() * 0.39));
    const more = stream.push(audio.subarray(at, at + n));
    at += n;
    if (!more && stream.state === 'open') await new Promise<void>((resolve) => stream.on('drain', resolve));
  }
}

const until = (what: () => boolean, ms = 20_000) =>
  new Promise<void>((resolve, reject) => {
    const started = Date.now();
    const timer = setInterval(() => {
      if (what()) {
        clearInterval(timer);
        resolve();
      } else if (Date.now() - started > ms) {
        clearInterval(timer);
        reject(new Error('timed out'));
      }
    }, 5);
  });

const SPEECH: Array<['sound' | 'silence', number]> = [
  ['silence', 0.3],
  ['sound', 1],
  ['silence', 1.6],
  ['sound', 0.8],
  ['silence', 0.1],
];

let dir: string;
let loader: StreamingLoader;
let model: StreamingRecognizer;
/** What the runtime reported to the engine (restarts of its process). */
const events: EngineEvent[] = [];
const restarts = () => events.filter((e) => e.type === 'restart');

beforeAll(async () => {
  dir = await tinyZipformerModel();
  loader = createStreamingLoader({ maxStreams: 4 });
  model = await loader.load(installed(dir, 'zipformer-synthetic'), { ...OPTIONS, report: (event) => events.push(event) });
});

afterAll(() => {
  loader?.supervisor.close();
});

describe('sherpa-onnx streaming recognizer', () => {
  it('is the loader registered for onnx:asr-stream', async () => {
    const registered = (await defaultLoaders['onnx:asr-stream']!()) as StreamingLoader;
    const loaded = (await registered.load(installed(dir, 'zipformer-registered'), OPTIONS)) as StreamingRecognizer;
    try {
      expect(loaded.sampleRate).toBe(16_000);
      expect(loaded.maxStreams).toBe(16);
      expect(registered.supervisor.pid).toBeGreaterThan(0);
      expect(registered.supervisor.pid).not.toBe(process.pid);
    } finally {
      await loaded.dispose();
    }
    // The last model gone, its process goes too.
    expect(registered.supervisor.pid).toBeUndefined();
  });

  it('recognizes three concurrent streams: partials as text changes, a final per pause, a last final after finish()', async () => {
    const a = utterances(SPEECH, 1);
    const other = utterances([['sound', 0.6], ['silence', 1.5], ['sound', 1.2]], 2);
    const streams = [model.open(), model.open(), model.open()];
    const collected = streams.map(collect);
    await Promise.all([feed(streams[0]!, a, 11), feed(streams[1]!, a, 12), feed(streams[2]!, other, 13)]);
    for (const s of streams) s.finish();
    await Promise.all(collected.map((c) => c.ended));

    for (const [i, c] of collected.entries()) {
      expect(c.errors, `stream ${i}`).toEqual([]);
      for (const r of c.results) {
        expect(Object.keys(r).sort()).toEqual(['isFinal', 'segment', 'text']);
        expect(typeof r.text).toBe('string');
        expect(Number.isInteger(r.segment)).toBe(true);
      }
      const partials = c.results.filter((r) => !r.isFinal);
      const finals = c.results.filter((r) => r.isFinal);
      expect(partials.length, `stream ${i} partials`).toBeGreaterThan(1);
      expect(partials.every((r) => r.text.length > 0)).toBe(true);
      // Two utterances: a final at the pause (rule 2, 1.2 s of silence after speech), then the last one.
      expect(finals.length, `stream ${i} finals`).toBe(2);
      expect(finals[0]!.text.length).toBeGreaterThan(0);
      expect(finals.map((f) => f.segment)).toEqual([0, 1]);
      expect(c.results.at(-1)!.isFinal).toBe(true);
      // A partial's text grows into its utterance's final; segments never go back.
      for (let k = 1; k < c.results.length; k++) expect(c.results[k]!.segment).toBeGreaterThanOrEqual(c.results[k - 1]!.segment);
      const firstFinal = c.results.indexOf(finals[0]!);
      expect(c.results[firstFinal - 1]!.text).toBe(finals[0]!.text);
      expect(streams[i]!.state).toBe('ended');
    }
    // Same audio, different chunking, batched with other streams: same transcript.
    expect(collected[1]!.results.filter((r) => r.isFinal)).toEqual(collected[0]!.results.filter((r) => r.isFinal));
    expect(collected[2]!.results.filter((r) => r.isFinal)).not.toEqual(collected[0]!.results.filter((r) => r.isFinal));
    expect(loader.supervisor.activeStreams).toBe(0);
  });

  it('fails the open streams when the recognizer process dies, and serves new streams from a new one', async () => {
    const audio = utterances([['sound', 2]], 3);
    const streams = [model.open(), model.open()];
    const collected = streams.map(collect);
    for (const s of streams) s.push(audio.subarray(0, RATE));
    await until(() => collected.every((c) => c.results.length > 0));
    const pid = loader.supervisor.pid!;
    expect(restarts()).toEqual([]);
    process.kill(pid, 'SIGKILL');
    const errors = await Promise.all(collected.map((c) => c.failed));
    for (const [i, error] of errors.entries()) {
      expect(error).toBeInstanceOf(ServerError);
      expect(error.message).toMatch(/recognizer process was killed \(SIGKILL\)/);
      expect(streams[i]!.state).toBe('failed');
      expect(streams[i]!.push(audio)).toBe(false); // ignored, not thrown
    }
    expect(loader.supervisor.activeStreams).toBe(0);
    // Nothing is restarted until there is work for a process again.
    expect(restarts()).toEqual([]);

    const again = model.open();
    // The replacement process is a restart, reported to the engine (the server's /metrics).
    expect(restarts()).toEqual([{ type: 'restart', process: 'sherpa-onnx speech recognizer' }]);
    const c = collect(again);
    await feed(again, utterances(SPEECH, 4));
    again.finish();
    await c.ended;
    expect(c.errors).toEqual([]);
    expect(c.results.filter((r) => r.isFinal).length).toBe(2);
    expect(loader.supervisor.pid).not.toBe(pid);
  });

  it('reports a model whose load kills sherpa-onnx as a load failure naming the model, without retrying it at once', async () => {
    const bad = await writeZipformerModel(path.join(CACHE, 'zipformer-streaming-no-T'), { omitEncoderMetadata: ['T'] });
    const log: string[] = [];
    const failing = createStreamingLoader({ log: (message) => log.push(message) });
    const processesStarted = () => log.filter((m) => /^started the sherpa-onnx /.test(m)).length;
    try {
      const error = await failing.load(installed(bad, 'zipformer-corrupt'), OPTIONS).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ModelLoadError);
      expect((error as Error).message).toMatch(/^Model 'zipformer-corrupt' could not be loaded: the sherpa-onnx process exited \(code 255\) while loading it: 'T' does not exist in the metadata\.$/);
      expect(failing.supervisor.pid).toBeUndefined();
      // A second request gets the same answer at once, without starting (and killing) a new process.
      const started = processesStarted();
      expect(started).toBeGreaterThan(0);
      await expect(failing.load(installed(bad, 'zipformer-corrupt'), OPTIONS)).rejects.toBe(error);
      expect(processesStarted()).toBe(started);
      expect(failing.supervisor.pid).toBeUndefined();
      // The same supervisor still loads and serves a good model.
      const good = await failing.load(installed(dir, 'zipformer-good'), OPTIONS);
      const s = good.open();
      const c = collect(s);
      await feed(s, utterances([['sound', 0.5], ['silence', 0.2]], 5));
      s.finish();
      await c.ended;
      expect(c.results.at(-1)!.isFinal).toBe(true);
      await good.dispose();
    } finally {
      failing.supervisor.close();
    }
  });

  it('tries a new model in a probe process while streams are open, so a corrupt one cannot take them down', async () => {
    const bad = await writeZipformerModel(path.join(CACHE, 'zipformer-streaming-no-T'), { omitEncoderMetadata: ['T'] });
    const live = model.open();
    const c = collect(live);
    const pid = loader.supervisor.pid;
    live.push(utterances([['sound', 0.8]], 6));
    await expect(loader.load(installed(bad, 'zipformer-corrupt-2'), OPTIONS)).rejects.toThrow(/'zipformer-corrupt-2'.*'T' does not exist in the metadata/);
    expect(loader.supervisor.pid).toBe(pid);
    live.push(utterances([['silence', 0.3]], 6));
    live.finish();
    await c.ended;
    expect(c.errors).toEqual([]);
    expect(c.results.at(-1)!.isFinal).toBe(true);
  });

  it('survives a result listener that throws (reported as a warning)', async () => {
    const s = model.open();
    const warned = new Promise<Error>((resolve) => process.once('warning', resolve));
    s.on('result', () => {
      throw new Error('listener bug');
    });
    const c = collect(s);
    s.push(utterances([['sound', 0.5]], 8));
    s.finish();
    await c.ended;
    expect((await warned).message).toMatch(/listener threw: Error: listener bug/);
    expect(c.results.at(-1)!.isFinal).toBe(true);
  });

  it('says so when sherpa-onnx-node itself cannot be loaded', async () => {
    const broken = createStreamingLoader({ sherpaModule: path.join(CACHE, 'no-such-sherpa-onnx-node.js') });
    try {
      const error = await broken.load(installed(dir, 'zipformer-nowhere'), OPTIONS).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ServerError);
      expect((error as Error).message).toMatch(/^Model 'zipformer-nowhere' could not be loaded: sherpa-onnx-node could not be loaded: Cannot find module/);
    } finally {
      broken.supervisor.close();
    }
  });

  it('refuses more streams than the maximum with OverloadedError', () => {
    const open = Array.from({ length: 4 }, () => model.open());
    expect(() => model.open()).toThrow(OverloadedError);
    try {
      model.open();
    } catch (error) {
      expect((error as OverloadedError).status).toBe(503);
      expect((error as Error).message).toMatch(/All 4 streaming speech recognition slots are in use/);
    }
    open[0]!.close();
    const replacement = model.open();
    expect(replacement.state).toBe('open');
    for (const s of [...open, replacement]) s.close();
    expect(loader.supervisor.activeStreams).toBe(0);
  });

  it('bounds undecoded audio: push() asks to wait past the high-water mark, and a stream far ahead fails with OverloadedError', async () => {
    const tight = createStreamingLoader({ highWaterSeconds: 0.5, maxBufferedSeconds: 2 });
    try {
      const m = await tight.load(installed(dir, 'zipformer-tight'), OPTIONS);
      const polite = m.open();
      const drained = new Promise<void>((resolve) => polite.on('drain', resolve));
      expect(polite.push(utterances([['sound', 0.3]]))).toBe(true);
      expect(polite.push(utterances([['sound', 0.3]]))).toBe(false);
      await drained;
      polite.close();

      const greedy = m.open();
      const c = collect(greedy);
      // All in one tick: nothing can be decoded in between.
      for (let i = 0; i < 5; i++) greedy.push(utterances([['sound', 0.5]]));
      const error = await c.failed;
      expect(error).toBeInstanceOf(OverloadedError);
      expect(error.message).toMatch(/faster than it can be recognized/);
      expect(greedy.state).toBe('failed');
      await m.dispose();
    } finally {
      tight.supervisor.close();
    }
  });

  it('4 streams fed 100 ms chunks in real time each report both utterances (latency is measured in bench/asr.ts)', async () => {
    // Each stream: silence, then sound starting at two known chunks; every stream must show text for both.
    const streams = Array.from({ length: 4 }, () => model.open());
    const chunk = RATE / 10;
    const onsets = [1.0, 3.2]; // seconds where sound starts
    const pattern: Array<['sound' | 'silence', number]> = [['silence', 1], ['sound', 0.6], ['silence', 1.6], ['sound', 0.6], ['silence', 0.3]];
    const audio = streams.map((_, i) => utterances(pattern, 20 + i));
    const seen: number[][] = streams.map(() => []);
    const chunkCount = audio[0]!.length / chunk;
    const done = streams.map(
      (s, i) =>
        new Promise<void>((resolve, reject) => {
          s.on('result', (r) => {
            if (r.text && !seen[i]!.includes(r.segment)) seen[i]!.push(r.segment);
          });
          s.on('end', resolve);
          s.on('error', reject);
        }),
    );
    const start = performance.now();
    for (let k = 0; k < chunkCount; k++) {
      const due = start + k * 100;
      await new Promise((resolve) => setTimeout(resolve, Math.max(0, due - performance.now())));
      streams.forEach((s, i) => s.push(audio[i]!.subarray(k * chunk, (k + 1) * chunk)));
    }
    for (const s of streams) s.finish();
    await Promise.all(done);
    // Utterance 0 and 1 of every stream showed text.
    expect(seen).toEqual(streams.map(() => onsets.map((_, segment) => segment)));
  });
});
