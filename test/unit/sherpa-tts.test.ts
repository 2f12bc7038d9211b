import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTtsLoader, speechInfo, ttsConfig, type SherpaTtsLoader } from '../../src/families/sherpa-voices/tts.js';
import type { LoadOptions } from '../../src/core/loader.js';
import { Catalog, DEFAULT_CATALOG_PATH } from '../../src/core/catalog.js';
import { ModelLoadError, ServerError } from '../../src/core/errors.js';
import { defaultLoaders } from '../../src/compose.js';
import { ModelStore, type InstalledModel } from '../../src/core/store.js';
import type { SpeechRuntime, SynthesisRequest } from '../../src/core/tasks/speak/synthesizer.js';
import { SAMPLES_PER_ID, syntheticPiperVoice, writePiperVoice } from '../fixtures/onnx/piper.js';

/**
 * Speech synthesis through the real sherpa-onnx OfflineTts in its child
 * process, on synthetic Piper voices (test/fixtures/onnx/piper.ts: the real
 * graph interface, metadata, tokens and espeak-ng phonemization; each
 * phoneme id is 900 samples × length_scale of a tone, so durations and
 * speakers are observable).
 */

const OPTIONS: LoadOptions = { threads: 1 };
const CACHE = fileURLToPath(new URL('../.cache/', import.meta.url));
const SPEAKERS = ['ava', 'ben', 'cleo', 'dan'];

let home: string;
let store: ModelStore;
let loader: SherpaTtsLoader;
let voice: SpeechRuntime;
let voiceDir: string;

/** Registers a voice folder the way `lserve pull ./dir --kind tts --id NAME` does. */
async function register(dir: string, id: string): Promise<InstalledModel> {
  const { model, layout } = await store.registerDirectory(dir, { kind: 'tts', id });
  expect(layout.id).toBe('piper-en-lessac');
  return model;
}

interface Synthesis {
  blocks: Float32Array[];
  samples: Float32Array;
}

async function speak(runtime: SpeechRuntime, request: Partial<SynthesisRequest> & { text: string }, signal = new AbortController().signal): Promise<Synthesis> {
  const blocks: Float32Array[] = [];
  const result = await runtime.synthesize({ speed: 1, ...request }, (block) => blocks.push(block), signal);
  expect(result.frames).toBe(0);
  const samples = new Float32Array(blocks.reduce((n, b) => n + b.length, 0));
  let at = 0;
  for (const b of blocks) {
    samples.set(b, at);
    at += b.length;
  }
  return { blocks, samples };
}

const rms = (samples: Float32Array) => Math.sqrt(samples.reduce((sum, x) => sum + x * x, 0) / Math.max(1, samples.length));
const sentences = (n: number) => Array.from({ length: n }, (_, i) => `Sentence number ${i + 1} is here.`).join(' ');

beforeAll(async () => {
  home = await mkdtemp(path.join(tmpdir(), 'lserve-tts-'));
  store = new ModelStore(home, Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH)));
  voiceDir = await syntheticPiperVoice();
  loader = createTtsLoader();
  voice = await loader.load(await register(voiceDir, 'synthetic-piper'), OPTIONS);
}, 60_000);

afterAll(async () => {
  loader?.synthesizer.close();
  if (home) await rm(home, { recursive: true, force: true });
});

describe('sherpa-onnx speech synthesis', () => {
  it('is the loader registered for sherpa:tts, in a process of its own that goes with the last voice', async () => {
    const registered = (await defaultLoaders['sherpa:tts']!()) as SherpaTtsLoader;
    const loaded = (await registered.load(await register(voiceDir, 'synthetic-piper-registered'), OPTIONS)) as SpeechRuntime;
    try {
      expect(registered.synthesizer.pids).toHaveLength(1);
      expect(registered.synthesizer.pids[0]).not.toBe(process.pid);
      // The catalog layout's defaults carry over to a registered folder: one voice under the layout's name.
      expect(loaded.info).toEqual({ sampleRate: 22050, mode: 'preset', languages: ['English'], speakers: ['lessac'], defaultSpeaker: 'lessac', rateControl: true });
    } finally {
      await loaded.dispose();
    }
    expect(registered.synthesizer.pids).toEqual([]);
  });

  it('synthesises at the voice rate; longer text gives longer audio; speed 2 halves the duration', async () => {
    const short = await speak(voice, { text: 'Hello.' });
    const long = await speak(voice, { text: 'Hello there, this sentence is quite a lot longer than the first one.' });
    expect(short.samples.length).toBeGreaterThan(0.3 * 22050);
    expect(long.samples.length).toBeGreaterThan(3 * short.samples.length);
    expect(rms(long.samples)).toBeGreaterThan(0.1);
    for (const x of long.samples) if (Math.abs(x) > 1) throw new Error(`sample ${x} out of [-1, 1]`);
    const fast = await speak(voice, { text: 'Hello there, this sentence is quite a lot longer than the first one.', speed: 2 });
    expect(fast.samples.length / long.samples.length).toBeCloseTo(0.5, 2);
    const slow = await speak(voice, { text: 'Hello.', speed: 0.5 });
    expect(slow.samples.length / short.samples.length).toBeCloseTo(2, 2);
  });

  it('hands over each sentence as a block while the rest is still being generated', async () => {
    const started = performance.now();
    let firstBlockAt = 0;
    const blocks: number[] = [];
    await voice.synthesize(
      { text: sentences(200), speed: 1 },
      (block) => {
        firstBlockAt ||= performance.now() - started;
        blocks.push(block.length);
      },
      new AbortController().signal,
    );
    const total = performance.now() - started;
    expect(blocks).toHaveLength(200);
    expect(firstBlockAt).toBeLessThan(total / 4);
  });

  it('picks the speaker of a multi-speaker voice by the names in its config', async () => {
    const dir = await writePiperVoice(path.join(CACHE, 'piper-voice-4-speakers'), { speakers: SPEAKERS });
    const multi = await loader.load(await register(dir, 'synthetic-piper-4'), OPTIONS);
    try {
      expect(multi.info.speakers).toEqual(SPEAKERS);
      expect(multi.info.defaultSpeaker).toBe('ava');
      const [a, b, again] = [await speak(multi, { text: 'Hello world.', speaker: 'ava' }), await speak(multi, { text: 'Hello world.', speaker: 'cleo' }), await speak(multi, { text: 'Hello world.', speaker: 'ava' })];
      expect(b.samples.length).toBe(a.samples.length);
      expect(b.samples).not.toEqual(a.samples);
      expect(again.samples).toEqual(a.samples);
    } finally {
      await multi.dispose();
    }
  });

  it('stops at the next sentence when aborted, rejecting with the abort reason, and serves the next request', async () => {
    // How long the whole text takes when let run.
    let started = performance.now();
    await speak(voice, { text: sentences(300) });
    const full = performance.now() - started;

    const controller = new AbortController();
    const reason = new Error('client went away');
    let blocks = 0;
    const aborted = voice.synthesize(
      { text: sentences(300), speed: 1 },
      () => {
        blocks++;
        if (blocks === 2) controller.abort(reason);
      },
      controller.signal,
    );
    await expect(aborted).rejects.toBe(reason);
    expect(blocks).toBe(2);
    // The next request for the voice waits for the aborted one: if the child generated all 300 sentences, this would take `full`.
    started = performance.now();
    const next = await speak(voice, { text: 'Hello.' });
    const waited = performance.now() - started;
    expect(next.samples.length).toBeGreaterThan(0);
    expect(waited).toBeLessThan(full / 3);
    expect(loader.synthesizer.activeSyntheses).toBe(0);

    // Already aborted: nothing starts.
    const gone = new AbortController();
    gone.abort(reason);
    await expect(voice.synthesize({ text: 'Hello.', speed: 1 }, () => undefined, gone.signal)).rejects.toBe(reason);
  });

  it('text with nothing to pronounce voices no phoneme, and is not an error', async () => {
    // espeak-ng finds no phoneme in '...': the voice is handed only its start and end marks around one
    // pad (^ _ $). This voice sounds a tone for every id but the pad (a real one makes a short breath).
    const quiet = await speak(voice, { text: '...' });
    expect(quiet.samples.length).toBe(3 * SAMPLES_PER_ID);
    const [start, pad, end] = [0, 1, 2].map((i) => rms(quiet.samples.subarray(i * SAMPLES_PER_ID, (i + 1) * SAMPLES_PER_ID)));
    // Measured: the pad's silence is 0, a tone 0.4/√2 ≈ 0.28 (the marks'); the bound is far from both.
    expect(pad).toBeLessThan(0.01);
    expect(start).toBeGreaterThan(0.2);
    expect(end).toBeGreaterThan(0.2);
  });

  it('fails a synthesis whose process dies with a 500 naming the cause, and the next one runs in a new process', async () => {
    const before = loader.synthesizer.pids;
    expect(before).toHaveLength(1);
    let killed = false;
    const lost = voice.synthesize(
      { text: sentences(300), speed: 1 },
      () => {
        if (!killed) process.kill(before[0]!, 'SIGKILL');
        killed = true;
      },
      new AbortController().signal,
    );
    const error = await lost.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ServerError);
    expect((error as ServerError).status).toBe(500);
    expect((error as Error).message).toMatch(/^The speech synthesizer process was killed \(SIGKILL\); this synthesis was lost/);
    const again = await speak(voice, { text: 'Hello again.' });
    expect(again.samples.length).toBeGreaterThan(0);
    expect(loader.synthesizer.pids).toHaveLength(1);
    expect(loader.synthesizer.pids[0]).not.toBe(before[0]);
  });

  it('reports a voice whose load kills sherpa-onnx as a load failure naming it, refuses it at once for a while, and keeps serving', async () => {
    const bad = await writePiperVoice(path.join(CACHE, 'piper-voice-no-sample-rate'), { omitMetadata: ['sample_rate'] });
    const model = await register(bad, 'synthetic-piper-corrupt');
    const log: string[] = [];
    const failing = createTtsLoader({ log: (message) => log.push(message) });
    const processesStarted = () => log.filter((m) => /^started the sherpa-onnx /.test(m)).length;
    try {
      const error = await failing.load(model, OPTIONS).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ModelLoadError);
      expect((error as Error).message).toMatch(/^Model 'synthetic-piper-corrupt' could not be loaded: the sherpa-onnx process exited \(code 255\) while loading it: 'sample_rate' does not exist in the metadata\.$/);
      expect(failing.synthesizer.pids).toEqual([]);
      // A second request gets the same answer without starting (and killing) a new process.
      const started = processesStarted();
      expect(started).toBeGreaterThan(0);
      await expect(failing.load(model, OPTIONS)).rejects.toBe(error);
      expect(processesStarted()).toBe(started);
      // The same loader still loads and serves a good voice.
      const good = await failing.load(await register(voiceDir, 'synthetic-piper-good'), OPTIONS);
      expect((await speak(good, { text: 'Still here.' })).samples.length).toBeGreaterThan(0);
      await good.dispose();
    } finally {
      failing.synthesizer.close();
    }
  });

  it('replaces its process after so many syntheses: the running one ends in the old process, the next runs in the new one, nothing is lost or counted as a restart', async () => {
    const log: string[] = [];
    const restarts: string[] = [];
    const recycling = createTtsLoader({ replaceAfterSyntheses: 3, log: (m) => log.push(m), onRestart: (label) => restarts.push(label) });
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    try {
      const runtime = await recycling.load(await register(voiceDir, 'synthetic-piper-recycled'), OPTIONS);
      const [first] = recycling.synthesizer.pids;
      await speak(runtime, { text: 'One.' });
      await speak(runtime, { text: 'Two.' });
      expect(recycling.synthesizer.pids).toEqual([first]);
      // The third opens the replacement; it runs to its end where it started.
      const third = await speak(runtime, { text: sentences(40) });
      expect(third.blocks).toHaveLength(40);
      await expect.poll(() => recycling.synthesizer.pids[0], { timeout: 20_000 }).not.toBe(first);
      const [second] = recycling.synthesizer.pids;
      await expect.poll(() => alive(first!), { timeout: 10_000 }).toBe(false);
      expect((await speak(runtime, { text: 'Four.' })).samples.length).toBeGreaterThan(0);
      expect(recycling.synthesizer.pids).toEqual([second]);
      expect(log.some((m) => m.startsWith(`replacing the sherpa-onnx speech synthesizer process (pid ${first}) after 3 jobs`))).toBe(true);
      expect(restarts).toEqual([]);
      expect(recycling.synthesizer.activeSyntheses).toBe(0);
      await runtime.dispose();
      expect(recycling.synthesizer.pids).toEqual([]);
      await expect.poll(() => alive(second!), { timeout: 10_000 }).toBe(false);
    } finally {
      recycling.synthesizer.close();
    }
  });

  it('loads and unloads voices while its process is being replaced, whichever process they land in', async () => {
    const recycling = createTtsLoader({ replaceAfterSyntheses: 1 });
    try {
      const first = await recycling.load(await register(voiceDir, 'synthetic-piper-recycled-a'), OPTIONS);
      const [before] = recycling.synthesizer.pids;
      // Every synthesis opens a replacement; the second voice loads while one is under way (into the old process or the fresh one).
      const running = speak(first, { text: sentences(20) });
      const second = await recycling.load(await register(voiceDir, 'synthetic-piper-recycled-b'), OPTIONS);
      expect((await running).blocks).toHaveLength(20);
      for (let i = 0; i < 4; i++) {
        expect((await speak(second, { text: 'Second voice.' })).samples.length).toBeGreaterThan(0);
        expect((await speak(first, { text: 'First voice.' })).samples.length).toBeGreaterThan(0);
      }
      await expect.poll(() => recycling.synthesizer.pids[0], { timeout: 20_000 }).not.toBe(before);
      await first.dispose();
      expect((await speak(second, { text: 'Still here.' })).samples.length).toBeGreaterThan(0);
      await second.dispose();
      expect(recycling.synthesizer.pids).toEqual([]);
      expect(recycling.synthesizer.activeSyntheses).toBe(0);
    } finally {
      recycling.synthesizer.close();
    }
  });

  it('tries a new voice in a probe process while a synthesis runs, so a corrupt one cannot take it down', async () => {
    const bad = await writePiperVoice(path.join(CACHE, 'piper-voice-no-n-speakers'), { omitMetadata: ['n_speakers'] });
    // Same espeak data folder as the live voice, so the same process would host it.
    const model = await register(bad, 'synthetic-piper-corrupt-2');
    const running = speak(voice, { text: sentences(100) });
    const pid = loader.synthesizer.pids[0];
    await expect(loader.load({ ...model, files: { ...model.files, espeak_phontab: path.join(voiceDir, 'espeak-ng-data/phontab') } }, OPTIONS)).rejects.toThrow(
      /'synthetic-piper-corrupt-2'.*'n_speakers' does not exist in the metadata/,
    );
    expect((await running).blocks).toHaveLength(100);
    expect(loader.synthesizer.pids[0]).toBe(pid);
  });
});

describe('voice layouts', () => {
  const catalog = Catalog.load(fileURLToPath(DEFAULT_CATALOG_PATH));
  /** The catalog entry installed at `dir` (files by their repo paths), as `lserve pull <id>` lays it out. */
  const installedAt = (id: string, dir: string): InstalledModel => {
    const entry = catalog.get(id)!;
    const files = Object.fromEntries(Object.entries(entry.files).map(([role, spec]) => [role, path.join(dir, spec.path!)]));
    return { id, entry, source: 'catalog', files, sizeBytes: 0 };
  };

  it('gives sherpa-onnx a Kokoro model with its voices, and names its speakers from the catalog', async () => {
    // ttsConfig checks that every file exists: lay out empty files under the Kokoro entry's paths.
    const dir = await mkdtemp(path.join(tmpdir(), 'lserve-kokoro-'));
    try {
      const model = installedAt('kokoro-en', dir);
      for (const file of Object.values(model.files)) {
        await mkdir(path.dirname(file), { recursive: true });
        await writeFile(file, '');
      }
      expect(ttsConfig(model, 2)).toEqual({
        model: {
          kokoro: { model: path.join(dir, 'model.onnx'), voices: path.join(dir, 'voices.bin'), tokens: path.join(dir, 'tokens.txt'), dataDir: path.join(dir, 'espeak-ng-data') },
          numThreads: 2,
          provider: 'cpu',
          debug: 0,
        },
        maxNumSentences: 1,
        silenceScale: 0.2,
      });
      const info = speechInfo(model, { sampleRate: 24000, numSpeakers: 11 });
      expect(info).toMatchObject({ sampleRate: 24000, mode: 'preset', languages: ['English'], defaultSpeaker: 'af', rateControl: true });
      expect(info.speakers).toEqual(catalog.get('kokoro-en')!.defaults.speakers);
      // A model with more speakers than the catalog names (another export in the same layout): numbered names.
      expect(speechInfo(model, { sampleRate: 24000, numSpeakers: 3 }).speakers).toEqual(['speaker_0', 'speaker_1', 'speaker_2']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('says which file a voice lacks', () => {
    const model = installedAt('piper-en-lessac', voiceDir);
    const { tokens: _tokens, ...rest } = model.files;
    expect(() => ttsConfig({ ...model, files: rest }, 1)).toThrow(/Model 'piper-en-lessac' is not a voice sherpa-onnx can run: it has no tokens file/);
    expect(() => ttsConfig({ ...model, files: { ...model.files, tokens: path.join(voiceDir, 'nope.txt') } }, 1)).toThrow(ModelLoadError);
  });
});
