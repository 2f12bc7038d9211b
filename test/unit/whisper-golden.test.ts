import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeAudio } from '../../src/audio/decode.js';
import { Engine } from '../../src/compose.js';
import type { Segment, Transcriber, Transcription } from '../../src/core/tasks/transcribe/transcriber.js';
import type { WhisperRuntime } from '../../src/families/whisper/decode.js';
import { transcribeSamples } from '../../src/families/whisper/longform.js';
import { holdModel } from '../helpers/held-model.js';

/**
 * The Whisper pipeline against transformers' long-form decoding
 * (test/golden/whisper/reference.json, written by scripts/golden/whisper.py;
 * scripts/golden/compare-whisper.ts prints every difference). The golden
 * model is registered and loaded by the engine as `lserve pull --kind asr`
 * would, then each clip goes through the long-form loop without voice
 * activity detection (as the reference runs), with the pipeline's own
 * features. Asserted: the features of every window (exact columns, padding,
 * whole-file normalisation), per window its prompt and the temperatures
 * tried, and the segments: token ids (timestamps included), text, times
 * (±0.02 s), avg_logprob and no_speech_prob (±1e-3), temperature.
 *
 * Deliberate difference: reported times are clamped to the audio (start ≤
 * end ≤ duration, in order); the reference's are not (a segment may end past
 * the clip), so its times are compared clamped the same way. Token ids and
 * boundaries are the reference's.
 *
 * The compression ratio is stock zlib's byte count (Node's bundled zlib
 * differs on clip long, window @0: 711 bytes instead of 709).
 */

const GOLDEN = fileURLToPath(new URL('../golden/whisper/', import.meta.url));
const HOP = 160;
const WINDOW_FRAMES = 3000;

interface RefAttempt {
  temperature: number;
  tokens: number[];
  compression_ratio: number;
}
interface RefWindow {
  seek: number;
  frames: number;
  prompt: number[];
  attempts: RefAttempt[];
  temperature: number;
  skipped: boolean;
  features: { max: number; min: number; mean: number; columns: Record<string, number[]> };
}
/** A segment of reference.json: the task's Segment without its id. */
type RefSegment = Omit<Segment, 'id'>;
interface RefClip {
  file: string;
  duration: number;
  language: { code: string };
  windows: RefWindow[];
  segments: RefSegment[];
  text: string;
}

const reference = JSON.parse(await readFile(path.join(GOLDEN, 'reference.json'), 'utf8')) as { clips: Record<string, RefClip> };

let home: string;
let engine: Engine;
let runtime: WhisperRuntime & Transcriber;
let release: (() => Promise<void>) | undefined;

beforeAll(async () => {
  home = await mkdtemp(path.join(os.tmpdir(), 'lserve-whisper-golden-'));
  // The family's own runtime in this process: the test calls its internals (runners serve only the task interface).
  engine = new Engine({ home, log: () => {}, threads: 1, isolation: 'server' });
  await engine.store.registerDirectory(GOLDEN, { kind: 'asr', id: 'whisper-golden' });
  ({ runtime, release } = await holdModel<WhisperRuntime & Transcriber>(engine, 'whisper-golden', ['asr']));
});

afterAll(async () => {
  await release?.();
  await engine?.close();
  if (home) await rm(home, { recursive: true, force: true });
});

async function samplesOf(clip: RefClip): Promise<Float32Array> {
  const audio = await decodeAudio(await readFile(path.join(GOLDEN, clip.file)), { sampleRate: 16_000, maxDurationSec: 3600 });
  return audio.samples;
}

/** The runtime with its encoder and decoder recorded: per window, the decoder prompt of each temperature tried. */
function traced(model: WhisperRuntime): { runtime: WhisperRuntime; windows: Array<{ prompts: number[][] }> } {
  const windows: Array<{ prompts: number[][] }> = [];
  const wrapped = Object.create(model) as WhisperRuntime;
  Object.defineProperty(wrapped, 'encode', {
    value: (features: Float32Array) => {
      windows.push({ prompts: [] });
      return model.encode(features);
    },
  });
  Object.defineProperty(wrapped, 'decoder', {
    value: (window: Parameters<WhisperRuntime['decoder']>[0], options?: Parameters<WhisperRuntime['decoder']>[1]) => {
      const decoder = model.decoder(window, options);
      const start = decoder.start.bind(decoder);
      // Language detection starts from <|startoftranscript|> alone; a window's decodes from the full prompt.
      decoder.start = (tokens, rows) => {
        if (tokens.length > 1) windows.at(-1)?.prompts.push([...tokens]);
        return start(tokens, rows);
      };
      return decoder;
    },
  });
  return { runtime: wrapped, windows };
}

/** Reported times: clamped to the audio, each segment starting no earlier than the previous one ended. */
function clampedTimes(segments: readonly RefSegment[], duration: number): Array<{ start: number; end: number }> {
  let floor = 0;
  return segments.map((s) => {
    const start = Math.min(Math.max(s.start, floor), duration);
    const end = Math.min(Math.max(s.end, start), duration);
    floor = end;
    return { start, end };
  });
}

// Every golden clip: one to three windows each (≈ 10 s in all on 2 cores).
describe.each(Object.keys(reference.clips))('Whisper golden clip %s (transformers reference)', (name) => {
  const clip = reference.clips[name]!;
  let samples: Float32Array;
  let result: Transcription;
  let windows: Array<{ prompts: number[][] }>;

  beforeAll(async () => {
    samples = await samplesOf(clip);
    const trace = traced(runtime);
    result = await transcribeSamples(trace.runtime, samples, {}, new AbortController().signal);
    windows = trace.windows;
  }, 120_000);

  it('computes each window’s features as the reference: log-mel over the whole file, its maximum, zero padding', async () => {
    for (const w of clip.windows) {
      const features = await runtime.mel.compute(samples, w.seek * HOP, w.frames * HOP, 'file');
      let max = -Infinity;
      let min = Infinity;
      let sum = 0;
      for (const v of features) {
        max = Math.max(max, v);
        min = Math.min(min, v);
        sum += v;
      }
      expect(max).toBeCloseTo(w.features.max, 4);
      expect(min).toBeCloseTo(w.features.min, 4);
      expect(sum / features.length).toBeCloseTo(w.features.mean, 4);
      for (const [column, values] of Object.entries(w.features.columns)) {
        const t = Number(column);
        const ours = values.map((_, m) => features[m * WINDOW_FRAMES + t]!);
        ours.forEach((v, m) => expect(Math.abs(v - values[m]!), `@${w.seek} frame ${t} band ${m}`).toBeLessThan(1e-4));
      }
      // Past the window's audio frames: 0.0, as transformers pads the sliced features.
      for (let m = 0; m < 80; m++) for (let t = w.frames; t < WINDOW_FRAMES; t += 97) expect(features[m * WINDOW_FRAMES + t]).toBe(0);
    }
  });

  it('decodes the same windows from the same prompts, trying the same temperatures', () => {
    expect(result.language).toBe(clip.language.code);
    expect(windows.length).toBe(clip.windows.length);
    clip.windows.forEach((w, i) => {
      expect(windows[i]!.prompts.length, `window @${w.seek}: temperatures tried`).toBe(w.attempts.length);
      // Every attempt of a window starts from its prompt (the reference's includes timestamps, capped at 223 tokens).
      for (const prompt of windows[i]!.prompts) expect(prompt, `window @${w.seek}: prompt`).toEqual(w.prompt);
    });
  });

  it('emits the reference’s segments: token ids, text, times, window values', () => {
    const times = clampedTimes(clip.segments, samples.length / 16_000);
    expect(result.segments.length).toBe(clip.segments.length);
    clip.segments.forEach((r, i) => {
      const o = result.segments[i]!;
      const label = `segment ${i}`;
      expect(o.tokens, label).toEqual(r.tokens);
      expect(o.text, label).toBe(r.text);
      expect(o.seek, label).toBe(r.seek);
      expect(Math.abs(o.start - times[i]!.start), `${label} start`).toBeLessThanOrEqual(0.02);
      expect(Math.abs(o.end - times[i]!.end), `${label} end`).toBeLessThanOrEqual(0.02);
      expect(o.start, label).toBeLessThanOrEqual(o.end);
      expect(o.temperature, label).toBe(r.temperature);
      expect(Math.abs(o.avg_logprob - r.avg_logprob), `${label} avg_logprob`).toBeLessThanOrEqual(1e-3);
      expect(Math.abs(o.no_speech_prob - r.no_speech_prob), `${label} no_speech_prob`).toBeLessThanOrEqual(1e-3);
    });
    expect(result.text).toBe(clip.text);
  });

  it('computes the compression ratio over the window’s stripped text, as stock zlib counts it', () => {
    clip.segments.forEach((r, i) => {
      expect(Math.abs(result.segments[i]!.compression_ratio - r.compression_ratio), `segment ${i} compression_ratio`).toBeLessThanOrEqual(1e-3);
    });
  });
});
