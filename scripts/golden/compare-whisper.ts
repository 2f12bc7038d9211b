/**
 * Our Whisper pipeline side by side with transformers' reference decoding
 * (test/golden/whisper/reference.json, written by scripts/golden/whisper.py)
 * on the same tiny model and clips. Prints every difference; changes nothing.
 *
 *   npx tsx scripts/golden/compare-whisper.ts [--clip speech] [--json out.json]
 *
 * The model is registered as a directory in a temporary store and loaded by
 * the engine, as `lserve pull ./dir --kind asr` would; then, per clip:
 *
 *   A. features: the reference's (log-mel over the whole file, normalised by
 *      its maximum, each window sliced and padded with zeros - recomputed here
 *      by a port of transformers' WhisperFeatureExtractor and checked against
 *      the exact values the reference stored) against the pipeline's own
 *      (LogMel.compute per window);
 *   B. one window at a time, on the reference's features and with the
 *      reference's prompt: the pipeline's language detection and decodeWindow
 *      (tokens, avg_logprob, no_speech_prob, compression ratio) against each
 *      temperature the reference tried - the decoding alone, whatever the
 *      features and the long-form loop do;
 *   C. the pipeline's long-form loop (transcribeSamples, no voice activity
 *      detection, as the reference runs) with only its log-mel swapped for
 *      the reference features: segments, times and per-window values against
 *      the reference's - the loop alone;
 *   D. end to end without voice activity detection (Transcriber.transcribe:
 *      the pipeline's own features and loop);
 *   E. for information, the transcription task as the server runs it (VAD
 *      regions first).
 */
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { decodeAudio } from '../../src/audio/decode.js';
import { Engine } from '../../src/compose.js';
import { transcribe as transcribeTask } from '../../src/core/tasks/transcribe.js';
import type { Segment, Transcriber, Transcription } from '../../src/core/tasks/transcribe/transcriber.js';
import { decodeWindow, detectLanguage, type DecodeResult, type WhisperRuntime } from '../../src/families/whisper/decode.js';
import { transcribeSamples } from '../../src/families/whisper/longform.js';
import { compressionRatio } from '../../src/families/whisper/segments.js';

const GOLDEN = fileURLToPath(new URL('../../test/golden/whisper/', import.meta.url));
const SR = 16_000;
const HOP = 160;
const N_FFT = 400;
const N_MELS = 80;
const WINDOW_FRAMES = 3000;
const EOT = 50257;
const TS0 = 50364;

// ------------------------------------------------------------------ reference.json

interface Attempt {
  temperature: number;
  tokens: number[];
  ended_with_eot: boolean;
  text: string;
  avg_logprob: number;
  no_speech_prob: number;
  compression_ratio: number;
  compression_ratio_transformers: number;
  needs_fallback: boolean;
  should_skip: boolean;
  min_greedy_gap: number | null;
}

interface FeatureSummary {
  shape: [number, number];
  sha256: string;
  max: number;
  min: number;
  mean: number;
  columns: Record<string, number[]>;
  row0_first100: number[];
  log10_max?: number;
}

interface RefWindow {
  seek: number;
  frames: number;
  time_offset: number;
  mode: string;
  prompt: number[];
  features: FeatureSummary;
  attempts: Attempt[];
  temperature: number;
  skipped: boolean;
  tokens: number[];
  text_tokens: number[];
  avg_logprob: number;
  compression_ratio: number;
  no_speech_prob: number;
}

/** A segment of reference.json: the task's Segment without its id, with the window it came from. */
type RefSegment = Omit<Segment, 'id'> & { window: number };

interface RefClip {
  file: string;
  samples: number;
  duration: number;
  pcm_sha256: string;
  features: FeatureSummary;
  language: { code: string; token: number; probability: number; logit_margin: number };
  windows: RefWindow[];
  segments: RefSegment[];
  text: string;
}

interface Reference {
  clips: Record<string, RefClip>;
}

// ------------------------------------------------------------------ output

const lines: string[] = [];
const differences: Array<{ clip: string; stage: string; what: string; ours: unknown; reference: unknown }> = [];

function say(line = ''): void {
  lines.push(line);
  console.log(line);
}

function differ(clip: string, stage: string, what: string, ours: unknown, reference: unknown): void {
  differences.push({ clip, stage, what, ours, reference });
  say(`  ✗ ${what}: ours ${fmt(ours)} | reference ${fmt(reference)}`);
}

function same(what: string, value: unknown): void {
  say(`  ✓ ${what}: ${fmt(value)}`);
}

function fmt(v: unknown): string {
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : v.toPrecision(6);
  if (typeof v === 'string') return JSON.stringify(v.length > 70 ? `${v.slice(0, 67)}...` : v);
  if (Array.isArray(v)) return v.length > 12 ? `[${v.slice(0, 6).map(fmt).join(', ')}, … ${v.length - 9} more …, ${v.slice(-3).map(fmt).join(', ')}]` : `[${v.map(fmt).join(', ')}]`;
  if (v === undefined) return '—';
  return JSON.stringify(v);
}

function close(a: number, b: number, tolerance: number): boolean {
  return Math.abs(a - b) <= tolerance;
}

// ------------------------------------------------------------------ reference features

/**
 * transformers' WhisperFeatureExtractor (torch path) over a whole file:
 * centred STFT with reflect padding, periodic Hann, |X|², Slaney mel filters
 * (librosa's), log10 of max(·, 1e-10), the last frame dropped, floor at the
 * file's maximum − 8, (x + 4) / 4. Computed in double precision here (torch
 * computes in float32: expect differences around 1e-6).
 */
function referenceFeatures(samples: Float32Array): { data: Float32Array; frames: number; log10Max: number } {
  const n = samples.length;
  const frames = Math.floor(n / HOP);
  const bins = N_FFT / 2 + 1;
  const hann = Float64Array.from({ length: N_FFT }, (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / N_FFT));
  const cos = new Float64Array(bins * N_FFT);
  const sin = new Float64Array(bins * N_FFT);
  for (let k = 0; k < bins; k++) {
    for (let i = 0; i < N_FFT; i++) {
      const angle = (2 * Math.PI * ((k * i) % N_FFT)) / N_FFT;
      cos[k * N_FFT + i] = Math.cos(angle);
      sin[k * N_FFT + i] = Math.sin(angle);
    }
  }
  const filters = slaneyMelFilters(bins);
  const at = (j: number): number => {
    // torch.stft(center=True, pad_mode='reflect'): n_fft / 2 reflected samples at each end.
    if (j < 0) j = -j;
    if (j >= n) j = 2 * (n - 1) - j;
    return samples[j]!;
  };
  const logMel = new Float64Array(N_MELS * frames);
  const frame = new Float64Array(N_FFT);
  const power = new Float64Array(bins);
  let max = -Infinity;
  for (let t = 0; t < frames; t++) {
    const start = t * HOP - N_FFT / 2;
    for (let i = 0; i < N_FFT; i++) frame[i] = at(start + i) * hann[i]!;
    for (let k = 0; k < bins; k++) {
      let re = 0;
      let im = 0;
      const row = k * N_FFT;
      for (let i = 0; i < N_FFT; i++) {
        re += frame[i]! * cos[row + i]!;
        im -= frame[i]! * sin[row + i]!;
      }
      power[k] = re * re + im * im;
    }
    for (let m = 0; m < N_MELS; m++) {
      let sum = 0;
      const row = m * bins;
      for (let k = 0; k < bins; k++) sum += filters[row + k]! * power[k]!;
      const value = Math.log10(Math.max(sum, 1e-10));
      logMel[m * frames + t] = value;
      if (value > max) max = value;
    }
  }
  const data = new Float32Array(N_MELS * frames);
  for (let i = 0; i < data.length; i++) data[i] = (Math.max(logMel[i]!, max - 8) + 4) / 4;
  return { data, frames, log10Max: max };
}

/** librosa.filters.mel(sr=16000, n_fft=400, n_mels=80, norm='slaney', htk=False), [mel][bin]. */
function slaneyMelFilters(bins: number): Float64Array {
  const fSp = 200 / 3;
  const minLogHz = 1000;
  const minLogMel = minLogHz / fSp;
  const logStep = Math.log(6.4) / 27;
  const hzToMel = (hz: number) => (hz >= minLogHz ? minLogMel + Math.log(hz / minLogHz) / logStep : hz / fSp);
  const melToHz = (mel: number) => (mel >= minLogMel ? minLogHz * Math.exp(logStep * (mel - minLogMel)) : mel * fSp);
  const low = hzToMel(0);
  const high = hzToMel(SR / 2);
  const points = Array.from({ length: N_MELS + 2 }, (_, i) => melToHz(low + ((high - low) * i) / (N_MELS + 1)));
  const out = new Float64Array(N_MELS * bins);
  for (let m = 0; m < N_MELS; m++) {
    const [left, centre, right] = [points[m]!, points[m + 1]!, points[m + 2]!];
    const norm = 2 / (right - left);
    for (let k = 0; k < bins; k++) {
      const f = (k * SR) / N_FFT;
      out[m * bins + k] = Math.max(0, Math.min((f - left) / (centre - left), (right - f) / (right - centre))) * norm;
    }
  }
  return out;
}

/** A reference window: frames [seek, seek + 3000) of the whole-file features, zeros past the end. */
function referenceWindow(whole: { data: Float32Array; frames: number }, seek: number): Float32Array {
  const out = new Float32Array(N_MELS * WINDOW_FRAMES);
  const take = Math.max(0, Math.min(WINDOW_FRAMES, whole.frames - seek));
  for (let m = 0; m < N_MELS; m++) out.set(whole.data.subarray(m * whole.frames + seek, m * whole.frames + seek + take), m * WINDOW_FRAMES);
  return out;
}

function column(data: Float32Array, frames: number, t: number): number[] {
  return Array.from({ length: N_MELS }, (_, m) => data[m * frames + t]!);
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

/** Compares stored exact columns of a [80, frames] array. */
function summaryDiff(data: Float32Array, frames: number, summary: FeatureSummary): number {
  let worst = 0;
  for (const [c, values] of Object.entries(summary.columns)) worst = Math.max(worst, maxAbsDiff(column(data, frames, Number(c)), values));
  worst = Math.max(worst, maxAbsDiff(data.subarray(0, 100), summary.row0_first100));
  return worst;
}

// ------------------------------------------------------------------ stages

async function stageFeatures(name: string, clip: RefClip, samples: Float32Array, runtime: WhisperRuntime): Promise<{ data: Float32Array; frames: number }> {
  say(' A. features');
  const whole = referenceFeatures(samples);
  const portDiff = summaryDiff(whole.data, whole.frames, clip.features);
  if (whole.frames !== clip.features.shape[1]) differ(name, 'A', 'reference port: frames', whole.frames, clip.features.shape[1]);
  say(`  · port of WhisperFeatureExtractor vs the stored reference values: max |Δ| ${portDiff.toExponential(2)} (log10 max ${whole.log10Max.toFixed(6)} vs ${clip.features.log10_max?.toFixed(6)})`);
  for (const w of clip.windows) {
    const ref = referenceWindow(whole, w.seek);
    const refCheck = summaryDiff(ref, WINDOW_FRAMES, w.features);
    const ours = await runtime.mel.compute(samples, w.seek * HOP, w.frames * HOP, 'file');
    // Compare the audio frames and the padding separately; the normalisation shows in both.
    const content = w.frames;
    let contentDiff = 0;
    let padOurs = { min: Infinity, max: -Infinity };
    for (let m = 0; m < N_MELS; m++) {
      for (let t = 0; t < WINDOW_FRAMES; t++) {
        const i = m * WINDOW_FRAMES + t;
        if (t < content) contentDiff = Math.max(contentDiff, Math.abs(ours[i]! - ref[i]!));
        else padOurs = { min: Math.min(padOurs.min, ours[i]!), max: Math.max(padOurs.max, ours[i]!) };
      }
    }
    let ourMax = -Infinity;
    for (const v of ours) ourMax = Math.max(ourMax, v);
    const label = `window @${w.seek} (${content} audio frames)`;
    say(`  · ${label}: port vs stored window values max |Δ| ${refCheck.toExponential(2)}`);
    if (contentDiff > 1e-4) differ(name, 'A', `${label}: log-mel of the audio frames, max |Δ|`, contentDiff.toPrecision(4), 0);
    else same(`${label}: audio frames agree (max |Δ| ${contentDiff.toExponential(2)})`, true);
    if (content < WINDOW_FRAMES) {
      if (padOurs.min !== 0 || padOurs.max !== 0) differ(name, 'A', `${label}: padding frames ${content}…2999 (value range)`, [padOurs.min, padOurs.max], [0, 0]);
      else same(`${label}: padding frames are 0`, true);
    }
    const refMax = w.features.max;
    if (!close(ourMax, refMax, 1e-4)) differ(name, 'A', `${label}: maximum feature value (normalisation: per window vs whole file)`, ourMax, refMax);
  }
  return whole;
}

async function stageWindows(name: string, clip: RefClip, whole: { data: Float32Array; frames: number }, runtime: WhisperRuntime): Promise<void> {
  say(' B. each window decoded by the pipeline from the reference features and prompt');
  const { vocabulary } = runtime;
  const signal = new AbortController().signal;
  let language = vocabulary.languages.get(clip.language.code) ?? -1;
  for (const [wi, w] of clip.windows.entries()) {
    const features = referenceWindow(whole, w.seek);
    const window = await runtime.encode(features);
    try {
      if (wi === 0) {
        const detected = await detectLanguage(runtime, window);
        language = detected.token;
        if (detected.code !== clip.language.code) differ(name, 'B', 'language', detected.code, clip.language.code);
        else if (!close(detected.probability, clip.language.probability, 1e-3)) differ(name, 'B', `language ${detected.code} probability`, detected.probability, clip.language.probability);
        else same('language', `${detected.code} p=${detected.probability.toFixed(4)} (reference ${clip.language.probability.toFixed(4)})`);
      }
      // The reference prompt: [<|startofprev|> …previous tokens] <|startoftranscript|> <|lang|> <|transcribe|>.
      const prompt = w.prompt[0] === vocabulary.sotPrev ? w.prompt.slice(1, -3) : [];
      say(`  window @${w.seek} (${w.mode}; reference prompt ${prompt.length} tokens, temperature used ${w.temperature}${w.skipped ? ', skipped' : ''})`);
      const tried = new Set<number>();
      for (const attempt of w.attempts) {
        if (tried.has(attempt.temperature)) continue;
        tried.add(attempt.temperature);
        // Sampling with other random numbers than torch's: only a certain choice (the 'repeat' window) can agree.
        let r = 0x2545f491;
        const random = () => ((r = (r * 1103515245 + 12345) >>> 0) / 2 ** 32);
        let result: DecodeResult;
        try {
          result = await decodeWindow(runtime, window, { language, task: 'transcribe', timestamps: true, temperature: attempt.temperature, prompt, random, signal });
        } catch (error) {
          differ(name, 'B', `@${w.seek} T=${attempt.temperature}: decodeWindow`, `threw ${(error as Error).message}`, 'decodes');
          continue;
        }
        const refTokens = attempt.ended_with_eot ? attempt.tokens.slice(0, -1) : attempt.tokens;
        const tag = `@${w.seek} T=${attempt.temperature}`;
        const tokensSame = result.tokens.length === refTokens.length && result.tokens.every((t, i) => t === refTokens[i]);
        if (!tokensSame) {
          const at = result.tokens.findIndex((t, i) => t !== refTokens[i]);
          differ(name, 'B', `${tag} tokens (first difference at ${at < 0 ? Math.min(result.tokens.length, refTokens.length) : at}; ${result.tokens.length} vs ${refTokens.length} tokens)`, result.tokens, refTokens);
        } else same(`${tag} tokens (${refTokens.length}${attempt.ended_with_eot ? ' + <|endoftext|>' : ', no <|endoftext|>: stopped at the length limit'})`, true);
        if (!close(result.avgLogprob, attempt.avg_logprob, 1e-4)) differ(name, 'B', `${tag} avg_logprob`, result.avgLogprob, attempt.avg_logprob);
        else same(`${tag} avg_logprob`, result.avgLogprob);
        if (!close(result.noSpeechProb, attempt.no_speech_prob, 1e-3)) differ(name, 'B', `${tag} no_speech_prob`, result.noSpeechProb, attempt.no_speech_prob);
        else same(`${tag} no_speech_prob`, result.noSpeechProb);
        const textTokens = result.tokens.filter((t) => t < vocabulary.timestampBegin);
        const ours = compressionRatio(textTokens.length > 0 ? runtime.decodeText(textTokens).trim() : '');
        if (!close(ours, attempt.compression_ratio, 1e-6)) {
          differ(name, 'B', `${tag} compression ratio`, ours, attempt.compression_ratio);
        } else same(`${tag} compression ratio`, ours);
        const oursFails = ours > 2.4 || result.avgLogprob < -1;
        const oursSilence = result.noSpeechProb > 0.6 && result.avgLogprob < -1;
        const decision = oursSilence ? 'skip' : oursFails ? 'fall back' : 'accept';
        const refDecision = attempt.should_skip ? 'skip' : attempt.needs_fallback ? 'fall back' : 'accept';
        if (decision !== refDecision) differ(name, 'B', `${tag} decision`, decision, refDecision);
        else same(`${tag} decision`, decision);
      }
    } finally {
      await window.release();
    }
  }
}

interface Trace {
  /** Per window the pipeline decoded: its seek and the prompts it decoded from (one per temperature tried). */
  windows: Array<{ seek: number; prompts: number[][] }>;
}

/**
 * The runtime with its log-mel swapped for the reference's (each window's features are the reference
 * window at that offset), recording the windows and decoder prompts. With `emptyText`, decodeText([])
 * returns '' instead of throwing - to see what the loop does past that point.
 */
function withReferenceFeatures(runtime: WhisperRuntime, whole: { data: Float32Array; frames: number }, emptyText = false): { runtime: WhisperRuntime; trace: Trace } {
  const trace: Trace = { windows: [] };
  const swapped = Object.create(runtime) as WhisperRuntime;
  const mel = {
    options: runtime.mel.options,
    frames: runtime.mel.frames,
    compute: async (_samples: Float32Array, offset = 0) => {
      trace.windows.push({ seek: Math.round(offset / HOP), prompts: [] });
      return referenceWindow(whole, Math.round(offset / HOP));
    },
  };
  Object.defineProperty(swapped, 'mel', { value: mel });
  Object.defineProperty(swapped, 'decoder', {
    value: (window: Parameters<WhisperRuntime['decoder']>[0], options?: Parameters<WhisperRuntime['decoder']>[1]) => {
      const decoder = runtime.decoder(window, options);
      const start = decoder.start.bind(decoder);
      decoder.start = (tokens, rows) => {
        if (tokens.length > 1) trace.windows.at(-1)?.prompts.push([...tokens]);
        return start(tokens, rows);
      };
      return decoder;
    },
  });
  if (emptyText) Object.defineProperty(swapped, 'decodeText', { value: (tokens: readonly number[]) => (tokens.length > 0 ? runtime.decodeText(tokens) : '') });
  return { runtime: swapped, trace };
}

/** The windows and prompts of the pipeline's loop against the reference's. */
function compareTrace(name: string, clip: RefClip, trace: Trace): void {
  const ours = trace.windows.map((w) => w.seek);
  const ref = clip.windows.map((w) => w.seek);
  if (ours.join() !== ref.join()) differ(name, 'C', 'windows (seek, frames)', ours, ref);
  else same('windows (seek, frames)', ours);
  for (const [i, w] of trace.windows.entries()) {
    const r = clip.windows.find((x) => x.seek === w.seek);
    if (!r || w.prompts.length === 0) continue;
    const mine = w.prompts[0]!;
    if (mine.join() === r.prompt.join()) {
      same(`window @${w.seek} prompt (${mine.length} tokens)`, true);
      continue;
    }
    const timestamps = (t: number[]) => t.filter((x) => x >= TS0).length;
    differ(
      name,
      'C',
      `window ${i} @${w.seek} prompt: ${mine.length} tokens (${timestamps(mine)} timestamps) vs ${r.prompt.length} (${timestamps(r.prompt)} timestamps)`,
      mine,
      r.prompt,
    );
  }
}

function stageEndToEnd(name: string, clip: RefClip, result: Transcription | Error, stage: 'C' | 'D'): void {
  if (result instanceof Error) {
    differ(name, stage, 'transcription', `threw ${result.name}: ${result.message}`, `${clip.segments.length} segments`);
    return;
  }
  if (result.language !== clip.language.code) differ(name, stage, 'language', result.language, clip.language.code);
  const ours = result.segments;
  const ref = clip.segments;
  const inverted = ours.filter((s) => s.end < s.start);
  if (inverted.length > 0) differ(name, stage, `segments ending before they start (${inverted.length}, e.g. ${inverted[0]!.start}-${inverted[0]!.end})`, inverted.length, 0);
  say(`  segments: ours ${ours.length}, reference ${ref.length}`);
  say('    #   ours start-end      T    avg_lp    cr      ns     | ref start-end       T    avg_lp    cr      ns     | text (ours | reference)');
  const n = Math.max(ours.length, ref.length);
  let shown = 0;
  for (let i = 0; i < n; i++) {
    const o = ours[i];
    const r = ref[i];
    const cols = (s: { start: number; end: number; temperature: number; avg_logprob: number; compression_ratio: number; no_speech_prob: number } | undefined) =>
      s ? `${s.start.toFixed(2).padStart(6)}-${s.end.toFixed(2).padEnd(6)} ${s.temperature.toFixed(1)} ${s.avg_logprob.toFixed(4).padStart(8)} ${s.compression_ratio.toFixed(3).padStart(6)} ${s.no_speech_prob.toFixed(3).padStart(6)}` : ' '.repeat(44);
    const mark =
      o && r && close(o.start, r.start, 1e-6) && close(o.end, r.end, 1e-6) && o.text === r.text && close(o.avg_logprob, r.avg_logprob, 1e-4) && close(o.compression_ratio, r.compression_ratio, 1e-6) && o.temperature === r.temperature ? '✓' : '✗';
    if (mark === '✓' && shown > 40) continue;
    shown++;
    say(`  ${mark} ${String(i).padStart(2)} ${cols(o)} | ${cols(r)} | ${fmt(o?.text ?? '')} | ${fmt(r?.text ?? '')}`);
    if (o && r) {
      if (!close(o.start, r.start, 1e-6)) differ(name, stage, `segment ${i} start`, o.start, r.start);
      if (!close(o.end, r.end, 1e-6)) differ(name, stage, `segment ${i} end`, o.end, r.end);
      if (o.text !== r.text) differ(name, stage, `segment ${i} text`, o.text, r.text);
      const refTextTokens = r.tokens.filter((t) => t < EOT);
      if (o.tokens.join() !== r.tokens.join()) {
        if (o.tokens.join() === refTextTokens.join()) differ(name, stage, `segment ${i} tokens (same text tokens; the reference keeps the timestamps)`, o.tokens, r.tokens);
        else differ(name, stage, `segment ${i} tokens`, o.tokens, r.tokens);
      }
      if (o.temperature !== r.temperature) differ(name, stage, `segment ${i} temperature`, o.temperature, r.temperature);
      if (!close(o.avg_logprob, r.avg_logprob, 1e-4)) differ(name, stage, `segment ${i} avg_logprob`, o.avg_logprob, r.avg_logprob);
      if (!close(o.compression_ratio, r.compression_ratio, 1e-6)) differ(name, stage, `segment ${i} compression_ratio`, o.compression_ratio, r.compression_ratio);
      if (!close(o.no_speech_prob, r.no_speech_prob, 1e-3)) differ(name, stage, `segment ${i} no_speech_prob`, o.no_speech_prob, r.no_speech_prob);
      if (o.seek !== r.seek) differ(name, stage, `segment ${i} window seek`, o.seek, r.seek);
    } else if (o) differ(name, stage, `segment ${i}`, `${o.start}-${o.end} ${JSON.stringify(o.text)}`, 'none');
    else if (r) differ(name, stage, `segment ${i}`, 'none', `${r.start}-${r.end} ${JSON.stringify(r.text)} tokens ${JSON.stringify(r.tokens)}`);
  }
  if (result.text !== clip.text) differ(name, stage, 'text', result.text, clip.text);
}

// ------------------------------------------------------------------ main

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const only = args.includes('--clip') ? args[args.indexOf('--clip') + 1] : undefined;
  const jsonOut = args.includes('--json') ? args[args.indexOf('--json') + 1] : undefined;
  const reference = JSON.parse(await readFile(path.join(GOLDEN, 'reference.json'), 'utf8')) as Reference;
  const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-golden-'));
  const engine = new Engine({ home, log: () => {}, threads: 1 });
  try {
    await engine.store.registerDirectory(GOLDEN, { kind: 'asr', id: 'whisper-golden' });
    const names = Object.keys(reference.clips).filter((n) => !only || n === only);
    await engine.withModel<WhisperRuntime & Transcriber, void>('whisper-golden', ['asr'], async (runtime) => {
      for (const name of names) {
        const clip = reference.clips[name]!;
        const bytes = await readFile(path.join(GOLDEN, clip.file));
        const audio = await decodeAudio(bytes, { sampleRate: SR, maxDurationSec: 3600 });
        const samples = audio.samples;
        say();
        say(`━━ ${name} (${clip.duration.toFixed(3)} s, ${clip.windows.length} reference window${clip.windows.length === 1 ? '' : 's'}: ${clip.windows.map((w) => `@${w.seek} ${w.mode}`).join(', ')})`);
        const pcm = Buffer.from(Int16Array.from(samples, (s) => Math.round(s * 32768)).buffer);
        if (samples.length !== clip.samples || createHash('sha256').update(pcm).digest('hex') !== clip.pcm_sha256) differ(name, '-', 'decoded samples', samples.length, clip.samples);
        const whole = await stageFeatures(name, clip, samples, runtime);
        await stageWindows(name, clip, whole, runtime);
        const signal = new AbortController().signal;
        say(' C. the long-form loop on the reference features (transcribeSamples, no VAD)');
        let swapped = withReferenceFeatures(runtime, whole);
        let c = await transcribeSamples(swapped.runtime, samples, {}, signal).catch((error: unknown) => error as Error);
        if (c instanceof Error) {
          stageEndToEnd(name, clip, c, 'C');
          say(`  … again with decodeText([]) returning '' instead of throwing (diagnostic only):`);
          swapped = withReferenceFeatures(runtime, whole, true);
          c = await transcribeSamples(swapped.runtime, samples, {}, signal).catch((error: unknown) => error as Error);
        }
        compareTrace(name, clip, swapped.trace);
        stageEndToEnd(name, clip, c, 'C');
        say(" D. end to end, no VAD (Transcriber.transcribe: the pipeline's features and loop)");
        const d = await runtime.transcribe(samples, {}, signal).catch((error: unknown) => error as Error);
        stageEndToEnd(name, clip, d, 'D');
      }
    });
    say();
    say(' E. the transcription task as the server runs it (Silero VAD regions, then the long-form loop) - for information');
    for (const name of names) {
      const clip = reference.clips[name]!;
      const bytes = await readFile(path.join(GOLDEN, clip.file));
      const d = await transcribeTask(engine, { model: 'whisper-golden', audio: bytes }, new AbortController().signal).catch((error: unknown) => error as Error);
      if (d instanceof Error) say(`  ${name}: threw ${d.name}: ${d.message}`);
      else say(`  ${name}: ${d.segments.length} segments ${d.segments.map((s) => `${s.start.toFixed(2)}-${s.end.toFixed(2)} T=${s.temperature}`).join(', ')} (reference ${clip.segments.length})`);
    }
  } finally {
    await engine.close();
    await rm(home, { recursive: true, force: true });
  }
  say();
  say(`${differences.length} differences`);
  const byWhat = new Map<string, number>();
  for (const d of differences) {
    const key = `${d.stage} ${d.what
      .replace(/@\d+ T=[\d.]+ /, '')
      .replace(/segment \d+\b/, 'segment')
      .replace(/window @\d+ \(\d+ audio frames\): /, 'window: ')
      .replace(/window \d+ @\d+ prompt.*/, 'window prompt')
      .replace(/padding frames \d+…2999/, 'padding frames')
      .replace(/ \(pipeline: gzip.*/, ' (gzip of the untrimmed text vs zlib of the trimmed text)')
      .replace(/ \(first difference.*/, '')}`;
    byWhat.set(key, (byWhat.get(key) ?? 0) + 1);
  }
  for (const [what, count] of [...byWhat].sort()) say(`  ${String(count).padStart(3)} × ${what}`);
  if (jsonOut) await writeFile(jsonOut, JSON.stringify({ differences }, null, 1));
}

await main();
