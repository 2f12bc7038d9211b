import { writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Engine } from '../../src/compose.js';
import { transcribe } from '../../src/core/tasks/transcribe.js';
import { startServer } from '../../src/http/server.js';
import { CACHE, fmt, median, repeatedSpeech, sum, wavBytes, type Report } from './common.js';
import { instrumentWhisper, type WhisperCounters } from './instrument.js';
import type { GgmlType } from './ggml.js';
import { benchWhisperGgml, benchWhisperOnnx, benchWhisperOnnxInt8Decoder, benchWhisperOnnxQ8 } from './models.js';
import { runWhisperCli, whisperCli, type WhisperCppRun } from './whispercpp.js';

/**
 * One-shot transcription of `seconds` of speech.wav repeated, on the
 * whisper-base-sized synthetic model: lserve's task function, the same through
 * POST /v1/audio/transcriptions on a real server, and whisper.cpp's CLI on a
 * GGML file of the same size, in rounds (direct, HTTP, whisper.cpp).
 *
 * A random model never says end-of-text: both sides decode up to the token
 * limit in every window. Both sample at one temperature (0.5: no fallback
 * ladder, and lserve drops the previous window's text from the prompt at
 * ≥ 0.5; whisper.cpp gets --max-context 0 for the same) with one decoder
 * (whisper.cpp's default best-of 5 would decode 5 sequences). Where the
 * windows start still depends on the random timestamps each side samples,
 * so the window and token counts are printed, and the per-window and
 * per-token costs give the RTF at a realistic ~100 tokens per 30 s window.
 *
 * With `withInt8`, lserve also runs the same model with its decoder's
 * MatMuls quantized to int8 (bench/asr/quantize.ts: what the hub's
 * `decoder_model_merged_int8.onnx` is), and with its encoder's and decoder's
 * MatMuls in int8 (what the catalog's `-q8` entries load: the exports'
 * `*_quantized.onnx`; their convolutions stay fp32 here).
 */

export interface OneShotOptions {
  threads: number;
  runs: number;
  seconds: number;
  whisperBin: string;
  withWhisperCpp: boolean;
  /** GGML weight types to run whisper.cpp on (f16: what ggml-base.bin is; q8_0: its 8-bit quantization). The first sets the goal. */
  ggmlTypes: GgmlType[];
  /** Also time lserve with an int8 decoder, and with an int8 encoder + decoder (-q8) (model folders beside the fp32 one). */
  withInt8: boolean;
  /** Tokens per 30 s window for the normalised RTF (English speech: ≈ 2.5–3.5 words/s ≈ 100–130 tokens). */
  realisticTokens: number;
}

interface LserveRun {
  wallMs: number;
  counters: WhisperCounters;
}

/** Per-window and per-token costs of a set of lserve runs. */
interface UnitCosts {
  mel: number;
  enc: number;
  prompt: number;
  step: number;
  vad: number;
  restPerStep: number;
  rest: number;
}

const TEMPERATURE = 0.5;

function unitCosts(runs: LserveRun[]): UnitCosts {
  const pool = (pick: (c: WhisperCounters) => number[]) => runs.flatMap((r) => pick(r.counters));
  // What the counters do not cover: audio decoding, the JS logit filters and sampling per token, segment building, HTTP.
  const rests = runs.map((r) => {
    const c = r.counters;
    const outside = r.wallMs - sum(c.melMs) - sum(c.encodeMs) - sum(c.startMs) - sum(c.stepMs) - sum(c.vadMs);
    return { outside, perStep: outside / (c.stepMs.length + c.startMs.length) };
  });
  return {
    mel: median(pool((c) => c.melMs)),
    enc: median(pool((c) => c.encodeMs)),
    prompt: median(pool((c) => c.startMs)),
    step: median(pool((c) => c.stepMs)),
    vad: median(pool((c) => c.vadMs)),
    rest: median(rests.map((r) => r.outside)),
    restPerStep: median(rests.map((r) => r.perStep)),
  };
}

/** Wall time of one 30 s window at `tokens` tokens, from unit costs (VAD pro rata). */
function window30(tokens: number, c: { mel: number; enc: number; prompt: number; step: number; extra: number }): number {
  return c.mel + c.enc + c.prompt + tokens * c.step + c.extra;
}

export async function oneShotSection(report: Report, o: OneShotOptions): Promise<{ lserveNormalisedRtf: number; cppNormalisedRtf: number; q8NormalisedRtf: number }> {
  const modelDir = await benchWhisperOnnx();
  const int8Dir = o.withInt8 ? await benchWhisperOnnxInt8Decoder() : undefined;
  const q8Dir = o.withInt8 ? await benchWhisperOnnxQ8() : undefined;
  const cli = o.withWhisperCpp ? whisperCli(o.whisperBin) : undefined;
  const ggml = cli ? o.ggmlTypes.map((type) => ({ type, file: benchWhisperGgml(type) })) : [];
  const audioSeconds = o.seconds;
  const wav = wavBytes(repeatedSpeech(audioSeconds), 16_000);
  const wavFile = path.join(CACHE, `asr-speech-${audioSeconds}s.wav`);
  writeFileSync(wavFile, wav);
  const take = instrumentWhisper();

  const home = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-asr-'));
  const engine = new Engine({ home, threads: o.threads, keepAliveMs: -1 });
  await engine.store.registerDirectory(modelDir, { kind: 'asr', id: 'whisper-base-synth' });
  if (int8Dir) await engine.store.registerDirectory(int8Dir, { kind: 'asr', id: 'whisper-base-synth-int8' });
  if (q8Dir) await engine.store.registerDirectory(q8Dir, { kind: 'asr', id: 'whisper-base-synth-q8' });
  const server = await startServer(engine, { host: '127.0.0.1', port: 0, cors: false, maxBodyBytes: 8 << 20, maxUploadBytes: 64 << 20, logFormat: 'off', log: () => {} });
  const direct = async (model = 'whisper-base-synth'): Promise<LserveRun> => {
    take();
    const start = performance.now();
    await transcribe(engine, { model, audio: wav, language: 'en', temperature: TEMPERATURE }, new AbortController().signal);
    return { wallMs: performance.now() - start, counters: take() };
  };
  const http = async (): Promise<LserveRun> => {
    take();
    const form = new FormData();
    form.append('file', new Blob([wav]), 'speech.wav');
    form.append('model', 'whisper-base-synth');
    form.append('language', 'en');
    form.append('temperature', String(TEMPERATURE));
    const start = performance.now();
    const res = await fetch(`${server.url}/v1/audio/transcriptions`, { method: 'POST', body: form });
    if (!res.ok) throw new Error(`POST /v1/audio/transcriptions: HTTP ${res.status} ${await res.text()}`);
    await res.json();
    return { wallMs: performance.now() - start, counters: take() };
  };
  const cpp = (file: string): Promise<WhisperCppRun> => runWhisperCli(cli!, file, wavFile, { threads: o.threads, temperature: TEMPERATURE, temperatureInc: 0, bestOf: 1, maxContext: 0 });

  const viaDirect: LserveRun[] = [];
  const viaHttp: LserveRun[] = [];
  const viaInt8: LserveRun[] = [];
  const viaQ8: LserveRun[] = [];
  const viaCpp = new Map<GgmlType, WhisperCppRun[]>(ggml.map((g) => [g.type, []]));
  try {
    const started = performance.now();
    // Warm-up: model loads, first ORT allocations, page cache. (whisper.cpp starts afresh each run anyway.)
    await direct();
    await http();
    if (int8Dir) await direct('whisper-base-synth-int8');
    if (q8Dir) await direct('whisper-base-synth-q8');
    for (let i = 0; i < o.runs; i++) {
      viaDirect.push(await direct());
      viaHttp.push(await http());
      if (int8Dir) viaInt8.push(await direct('whisper-base-synth-int8'));
      if (q8Dir) viaQ8.push(await direct('whisper-base-synth-q8'));
      for (const g of ggml) viaCpp.get(g.type)!.push(await cpp(g.file));
    }
    report.section(
      `One-shot transcription: ${audioSeconds} s of speech.wav repeated, whisper-base-sized synthetic model, ${o.threads} threads, temperature ${TEMPERATURE} (no fallback); ` +
        `rounds of lserve direct / HTTP${int8Dir ? ' / direct with an int8 decoder' : ''}${q8Dir ? ' / direct q8' : ''}${ggml.map((g) => ` / whisper.cpp ${g.type}`).join('')}, median of ${o.runs} (${fmt((performance.now() - started) / 1000, 0)} s):`,
    );
  } finally {
    await server.close(); // closes the engine too
    await rm(home, { recursive: true, force: true });
  }

  const n = o.realisticTokens;
  const rtf = (ms: number) => ms / 1000 / audioSeconds;
  const lserveRow = (label: string, runs: LserveRun[]) => {
    const wall = median(runs.map((r) => r.wallMs));
    const c = runs[0]!.counters;
    report.row(`${label}: RTF (wall / audio)`, fmt(rtf(wall), 3), `${fmt(wall / 1000, 2)} s; ${c.encodeMs.length} windows, ${c.stepMs.length} decoder steps + ${c.startMs.length} prompt steps (first run)`);
    return wall;
  };
  const wDirect = lserveRow('lserve transcribe() (task function)', viaDirect);
  const wHttp = lserveRow('lserve POST /v1/audio/transcriptions', viaHttp);
  report.row('HTTP overhead ratio (HTTP wall / direct wall)', fmt(wHttp / wDirect, 3));

  // fp32 unit costs pooled over the direct and HTTP runs (same model, same path below the route).
  const u = unitCosts([...viaDirect, ...viaHttp]);
  report.row('lserve log-mel per window (JS, main thread)', `${fmt(u.mel, 0)} ms`);
  report.row('lserve encoder per window (ORT worker)', `${fmt(u.enc, 0)} ms`);
  report.row('lserve prompt step per window (cross-attn K/V + prompt)', `${fmt(u.prompt, 0)} ms`);
  report.row('lserve decoder step (next(): worker round trip)', `${fmt(u.step, 2)} ms`, `${fmt(1000 / u.step, 1)} tokens/s`);
  report.row('lserve rest per step (JS filters + sampling, decode, segments)', `${fmt(u.restPerStep, 2)} ms`, `${fmt(u.rest, 0)} ms per run outside the timed calls`);
  report.row(`lserve Silero VAD over the ${audioSeconds} s`, `${fmt(u.vad, 0)} ms`);
  const lserveRtfOf = (c: UnitCosts) => window30(n, { mel: c.mel, enc: c.enc, prompt: c.prompt, step: c.step + c.restPerStep, extra: (c.vad * 30) / audioSeconds }) / 30_000;
  const lserveNormalisedRtf = lserveRtfOf(u);
  report.row(`lserve RTF at ${n} tokens per 30 s window (from the unit costs)`, fmt(lserveNormalisedRtf, 3));
  let int8Rtf = Number.NaN;
  if (viaInt8.length) {
    lserveRow('lserve transcribe(), int8 decoder', viaInt8);
    const q = unitCosts(viaInt8);
    report.row('lserve int8 decoder: prompt step / decoder step', `${fmt(q.prompt, 0)} / ${fmt(q.step, 2)} ms`, `fp32: ${fmt(u.prompt, 0)} / ${fmt(u.step, 2)} ms`);
    int8Rtf = lserveRtfOf(q);
    report.row(`lserve int8 decoder RTF at ${n} tokens per 30 s window`, fmt(int8Rtf, 3), `${fmt(int8Rtf / lserveNormalisedRtf, 2)} × fp32`);
  }
  let q8Rtf = Number.NaN;
  if (viaQ8.length) {
    lserveRow('lserve transcribe(), q8 (int8 encoder + decoder, as -q8)', viaQ8);
    const q = unitCosts(viaQ8);
    report.row('lserve q8: encoder per window / prompt step / decoder step', `${fmt(q.enc, 0)} / ${fmt(q.prompt, 0)} / ${fmt(q.step, 2)} ms`, `fp32: ${fmt(u.enc, 0)} / ${fmt(u.prompt, 0)} / ${fmt(u.step, 2)} ms`);
    q8Rtf = lserveRtfOf(q);
    report.row(`lserve q8 RTF at ${n} tokens per 30 s window`, fmt(q8Rtf, 3), `${fmt(q8Rtf / lserveNormalisedRtf, 2)} × fp32`);
  }

  let cppNormalisedRtf = Number.NaN;
  for (const [type, runs] of viaCpp) {
    if (!runs.length) continue;
    const label = `whisper.cpp ${type}`;
    const wall = median(runs.map((r) => r.wallMs));
    const first = runs[0]!;
    report.row(`${label} (whisper-cli): RTF (wall / audio, load included)`, fmt(rtf(wall), 3), `${fmt(wall / 1000, 2)} s; ${first.encodeRuns} windows, ${first.decodeRuns} decoder steps, ${first.batchdRuns + first.promptRuns} batch/prompt calls, fallbacks ${first.fallbacks}`);
    report.row(`${label} RTF without model load`, fmt(rtf(median(runs.map((r) => r.wallMs - r.loadMs))), 3));
    const cMel = median(runs.map((r) => (r.melMs / audioSeconds) * 30));
    const cEnc = median(runs.map((r) => r.encodeMs / r.encodeRuns));
    // whisper.cpp counts a window's first (few-token) decoder call as "batchd" or "prompt", and computes the
    // cross-attention K/V inside its encode; lserve computes them in its first decoder call (the prompt step).
    const cPrompt = median(runs.map((r) => (r.promptMs + r.batchdMs) / r.encodeRuns));
    const cStep = median(runs.map((r) => r.decodeMs / r.decodeRuns));
    const cSample = median(runs.map((r) => r.sampleMs / Math.max(1, r.decodeRuns + r.batchdRuns)));
    report.row(`${label} log-mel per 30 s (C++)`, `${fmt(cMel, 0)} ms`, `lserve / whisper.cpp ${fmt(u.mel / cMel, 1)}`);
    report.row(`${label} encoder per window (cross-attn K/V included)`, `${fmt(cEnc, 0)} ms`);
    report.row(`${label} prompt per window (batchd + prompt runs)`, `${fmt(cPrompt, 0)} ms`);
    report.row(`encoder + prompt per window, lserve fp32 / ${label}`, fmt((u.enc + u.prompt) / (cEnc + cPrompt), 2), `${fmt(u.enc + u.prompt, 0)} vs ${fmt(cEnc + cPrompt, 0)} ms`);
    report.row(`${label} decoder step`, `${fmt(cStep, 2)} ms`, `lserve fp32 / whisper.cpp ${fmt(u.step / cStep, 2)}`);
    report.row(`${label} sampling per step`, `${fmt(cSample, 2)} ms`, `lserve's rest per step / this ${fmt(u.restPerStep / cSample, 1)}`);
    const normalised = window30(n, { mel: cMel, enc: cEnc, prompt: cPrompt, step: cStep + cSample, extra: 0 }) / 30_000;
    report.row(`${label} RTF at ${n} tokens per 30 s window`, fmt(normalised, 3));
    const goal = type === o.ggmlTypes[0];
    if (goal) cppNormalisedRtf = normalised;
    const ratio = lserveNormalisedRtf / normalised;
    report.row(`RTF ratio lserve (fp32, as shipped) / ${label} at ${n} tokens${goal ? ' (goal ≤ 1.0)' : ''}`, fmt(ratio, 2), goal ? (ratio <= 1 ? 'met' : 'NOT met') : '');
    if (Number.isFinite(int8Rtf)) report.row(`RTF ratio lserve int8 decoder / ${label} at ${n} tokens`, fmt(int8Rtf / normalised, 2));
    if (Number.isFinite(q8Rtf)) report.row(`RTF ratio lserve q8 / ${label} at ${n} tokens`, fmt(q8Rtf / normalised, 2));
    if (goal && first.systemInfo) report.note(`whisper.cpp system_info: ${first.systemInfo}`);
  }
  if (o.withWhisperCpp && !cli) report.note(`(whisper.cpp: no whisper-cli in ${o.whisperBin}; see bench/asr.md, "whisper.cpp reference")`);
  return { lserveNormalisedRtf, cppNormalisedRtf, q8NormalisedRtf: q8Rtf };
}
