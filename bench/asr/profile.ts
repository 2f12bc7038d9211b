import path from 'node:path';
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { InferenceSession, Tensor as OrtTensor } from 'onnxruntime-node';
import { SileroVad, sileroVadPath } from '../../src/families/silero-vad/silero-vad.js';
import { createWhisperLoader, type OnnxWhisper } from '../../src/families/whisper/model.js';
import type { InstalledModel } from '../../src/core/store.js';
import { applyTimestampRules, decodeWindow, type WhisperDecoder, type WhisperRuntime } from '../../src/families/whisper/decode.js';
import { seededRandom } from '../../test/fixtures/gguf/format.js';
import { DataType, model as encodeModel, node, valueInfo } from '../../test/fixtures/onnx/build.js';
import { WHISPER_FILES, WHISPER_VOCAB_SIZE } from '../../test/fixtures/onnx/whisper.js';
import { fmt, median, repeatedSpeech, type Report } from './common.js';
import { benchWhisperOnnx, benchWhisperOnnxInt8Decoder } from './models.js';

/**
 * Where a Whisper decoder step's milliseconds go (whisper-base-sized model):
 *
 * 1. the step as decodeWindow waits for it: OnnxWhisperDecoder.next(), one
 *    postMessage round trip to the decoder's worker, ORT there, one row of
 *    logits transferred back;
 * 2. the same ORT run in this thread with the same session options (graph
 *    optimisation all, sequential, intra-op threads, spinning off) and the
 *    same cache handling (present.* fed back as past.*), then with other
 *    thread / spinning settings;
 * 3. a bare postMessage round trip to a worker with a message shaped like a
 *    step's (24 kept-tensor names, one token) and a 51 865-float reply,
 *    transferred (as lserve does) and copied;
 * 4. the JS per token in decodeWindow (suppression, timestamp rules,
 *    sampling at a temperature, log-softmax of the sampled token) on real
 *    logit rows of the synthetic model, split up;
 * 5. the logits projection alone (1×512 · 512×51 865, 106 MB of fp32
 *    weights read per token) in fp32 and int8;
 * 6. Silero VAD over an upload: lserve's SileroVad (the recurrent loop in the
 *    VAD's own worker, 10 s of windows per message) against the same ORT
 *    runs in this thread.
 */

const ortPath = createRequire(import.meta.url).resolve('onnxruntime-node');
type Ort = typeof import('onnxruntime-node');

export interface ProfileOptions {
  threads: number;
  /** Decoder steps per measurement. */
  steps: number;
}

function sessionOptions(threads: number, spinning: boolean): InferenceSession.SessionOptions {
  // As src/runtimes/onnx/session.ts creates every session (spinning there: off).
  return {
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    interOpNumThreads: 1,
    intraOpNumThreads: threads,
    logSeverityLevel: 3,
    extra: { session: { intra_op: { allow_spinning: spinning ? '1' : '0' } } },
  } as InferenceSession.SessionOptions;
}

/** Raw ORT decode in this thread: prompt of 3 tokens, then `steps` single-token steps; ms per step, and the logit rows. */
async function rawDecoder(ort: Ort, file: string, threads: number, spinning: boolean, steps: number, keepRows = false): Promise<{ stepMs: number[]; rows: Float32Array[] }> {
  const session = await ort.InferenceSession.create(file, sessionOptions(threads, spinning));
  try {
    const layers = session.inputNames.filter((n) => /^past_key_values\.\d+\.decoder\.key$/.test(n)).length;
    const random = seededRandom(3);
    const encoder = new ort.Tensor('float32', Float32Array.from({ length: 1500 * 512 }, () => random() * 2 - 1), [1, 1500, 512]);
    const empty = () => new ort.Tensor('float32', new Float32Array(0), [1, 8, 0, 64]);
    const feeds: Record<string, OrtTensor> = {
      input_ids: new ort.Tensor('int64', BigInt64Array.of(50258n, 50259n, 50359n), [1, 3]),
      encoder_hidden_states: encoder,
      use_cache_branch: new ort.Tensor('bool', Uint8Array.of(0), [1]),
    };
    for (let i = 0; i < layers; i++) for (const p of ['decoder.key', 'decoder.value', 'encoder.key', 'encoder.value']) feeds[`past_key_values.${i}.${p}`] = empty();
    let out = await session.run(feeds);
    const cross: Record<string, OrtTensor> = {};
    for (let i = 0; i < layers; i++) for (const p of ['encoder.key', 'encoder.value']) cross[`past_key_values.${i}.${p}`] = out[`present.${i}.${p}`]!;
    const stepMs: number[] = [];
    const rows: Float32Array[] = [];
    let token = 50364n;
    for (let s = 0; s < steps; s++) {
      const f: Record<string, OrtTensor> = { input_ids: new ort.Tensor('int64', BigInt64Array.of(token), [1, 1]), encoder_hidden_states: encoder, use_cache_branch: new ort.Tensor('bool', Uint8Array.of(1), [1]), ...cross };
      for (let i = 0; i < layers; i++) for (const p of ['decoder.key', 'decoder.value']) f[`past_key_values.${i}.${p}`] = out[`present.${i}.${p}`]!;
      const start = performance.now();
      out = await session.run(f);
      stepMs.push(performance.now() - start);
      const logits = out.logits!.data as Float32Array;
      if (keepRows) rows.push(logits.slice(0, WHISPER_VOCAB_SIZE));
      // A plausible next token: the best text token (keeps the cache growing like a real decode).
      let best = 0;
      for (let i = 1; i < 50257; i++) if (logits[i]! > logits[best]!) best = i;
      token = BigInt(best);
    }
    return { stepMs, rows };
  } finally {
    await session.release();
  }
}

const ECHO_WORKER = `
const { parentPort } = require('node:worker_threads');
parentPort.on('message', (msg) => {
  const data = new Float32Array(${WHISPER_VOCAB_SIZE});
  if (msg.mode === 'empty') parentPort.postMessage({ id: msg.id, ok: true });
  else if (msg.mode === 'copy') parentPort.postMessage({ id: msg.id, ok: true, outputs: { logits: { type: 'float32', buffer: data.buffer, byteOffset: 0, length: data.length, dims: [1, 1, data.length] } } });
  else parentPort.postMessage({ id: msg.id, ok: true, outputs: { logits: { type: 'float32', buffer: data.buffer, byteOffset: 0, length: data.length, dims: [1, 1, data.length] } } }, [data.buffer]);
});
`;

/** Median round trip of a step-shaped message to a worker and back (the reply allocated there, as ORT's output row is). */
async function roundTrips(mode: 'empty' | 'copy' | 'transfer', count: number): Promise<number> {
  const worker = new Worker(ECHO_WORKER, { eval: true });
  try {
    const feeds: Record<string, unknown> = {};
    for (let i = 0; i < 6; i++) for (const p of ['decoder.key', 'decoder.value', 'encoder.key', 'encoder.value']) feeds[`past_key_values.${i}.${p}`] = { kept: `d1:${i}.${p}` };
    const times: number[] = [];
    for (let i = 0; i < count; i++) {
      const ids = BigInt64Array.of(BigInt(i));
      const message = {
        type: 'run',
        id: i,
        mode,
        feeds: { ...feeds, input_ids: { type: 'int64', buffer: ids.buffer, byteOffset: 0, length: 1, dims: [1, 1] }, encoder_hidden_states: { kept: 'w1' }, use_cache_branch: { type: 'bool', buffer: new ArrayBuffer(1), byteOffset: 0, length: 1, dims: [1] } },
        fetch: ['logits'],
        keep: Object.fromEntries(Array.from({ length: 12 }, (_, k) => [`present.${k >> 1}.decoder.${k & 1 ? 'value' : 'key'}`, `d1:${k}`])),
        keepInputs: {},
        rows: { logits: [0] },
      };
      const start = performance.now();
      await new Promise<void>((resolve) => {
        worker.once('message', () => resolve());
        worker.postMessage(message, [ids.buffer]);
      });
      times.push(performance.now() - start);
    }
    return median(times.slice(Math.min(50, count >> 2)));
  } finally {
    await worker.terminate();
  }
}

/** Replicas of decodeWindow's private helpers (src/families/whisper/decode.ts), to time them apart. */
/** The per-token sampling as it was before `pick()` fused it (src/families/whisper/decode.ts), kept to show the difference. */
function sampleReplica(logits: Float32Array, temperature: number, random: () => number): number {
  let max = -Infinity;
  for (const v of logits) if (v > max) max = v;
  const weights = new Float64Array(logits.length);
  let sum = 0;
  for (let i = 0; i < logits.length; i++) {
    const w = logits[i] === -Infinity ? 0 : Math.exp((logits[i]! - max) / temperature);
    weights[i] = w;
    sum += w;
  }
  let r = random() * sum;
  for (let i = 0; i < weights.length; i++) {
    r -= weights[i]!;
    if (r <= 0 && weights[i]! > 0) return i;
  }
  return 0;
}

function logSoftmaxReplica(logits: Float32Array, index: number): number {
  let max = -Infinity;
  for (const v of logits) if (v > max) max = v;
  let sum = 0;
  for (const v of logits) sum += Math.exp(v - max);
  return logits[index]! - max - Math.log(sum);
}

/** The JS of decodeWindow per token, on real logit rows served by a stub decoder that costs nothing but a copy. */
async function jsPerToken(runtime: OnnxWhisper, rows: Float32Array[]): Promise<{ loopMs: number; copyMs: number; rulesMs: number; sampleMs: number; logSoftmaxMs: number; steps: number }> {
  let served = 0;
  const next = () => rows[served++ % rows.length]!.slice();
  const stub: WhisperDecoder = { start: async (_tokens, r) => r.map(() => next()), next: async () => next(), close: async () => {} };
  const fake = { vocabulary: runtime.vocabulary, textContext: runtime.textContext, decoder: () => stub } as unknown as WhisperRuntime;
  const options = { language: 50259, task: 'transcribe', timestamps: true, temperature: 0.5, prompt: [], random: seededRandom(9), signal: new AbortController().signal } as const;
  await decodeWindow(fake, {} as never, options); // warm-up (JIT)
  served = 0;
  let start = performance.now();
  let steps = 0;
  for (let i = 0; i < 3; i++) {
    const before = served;
    await decodeWindow(fake, {} as never, options);
    steps += served - before;
  }
  const loopMs = (performance.now() - start) / steps;
  // Apart, on the same rows.
  start = performance.now();
  for (let i = 0; i < steps; i++) next();
  const copyMs = (performance.now() - start) / steps;
  const copies = Array.from({ length: Math.min(steps, 200) }, () => next());
  const sampled: number[] = [];
  const random = seededRandom(4);
  const perCall = (run: (row: Float32Array) => unknown) => {
    const times: number[] = [];
    for (let pass = 0; pass < 4; pass++) {
      const t = performance.now();
      for (const row of copies) run(row);
      if (pass > 0) times.push((performance.now() - t) / copies.length); // pass 0 warms the JIT up
    }
    return median(times);
  };
  const rulesMs = perCall((row) => applyTimestampRules(row, sampled, runtime.vocabulary, false));
  const sampleMs = perCall((row) => sampleReplica(row, 0.5, random));
  const logSoftmaxMs = perCall((row) => logSoftmaxReplica(row, 7));
  return { loopMs, copyMs, rulesMs, sampleMs, logSoftmaxMs, steps };
}

/** 1×512 · 512×51 865 alone, fp32 MatMul vs int8 (DynamicQuantizeLinear + MatMulInteger), ms per run. */
async function projection(ort: Ort, threads: number): Promise<{ fp32: number; int8: number }> {
  const random = seededRandom(8);
  const d = 512;
  const v = WHISPER_VOCAB_SIZE;
  const fp32 = encodeModel({
    name: 'projection_fp32',
    input: [valueInfo('x', [1, d])],
    output: [valueInfo('y', [1, v])],
    initializer: [{ name: 'w', dims: [d, v], dataType: DataType.FLOAT, rawData: new Uint8Array(Float32Array.from({ length: d * v }, () => random() - 0.5).buffer) }],
    node: [node('MatMul', ['x', 'w'], ['y'])],
  });
  const int8 = encodeModel({
    name: 'projection_int8',
    input: [valueInfo('x', [1, d])],
    output: [valueInfo('y', [1, v], DataType.INT32)],
    initializer: [{ name: 'w', dims: [d, v], dataType: DataType.INT8, rawData: new Uint8Array(Int8Array.from({ length: d * v }, () => Math.round((random() - 0.5) * 254)).buffer) }],
    node: [node('DynamicQuantizeLinear', ['x'], ['q', 's', 'z']), node('MatMulInteger', ['q', 'w', 'z'], ['y'])],
  });
  const time = async (bytes: Uint8Array) => {
    const session = await ort.InferenceSession.create(bytes, sessionOptions(threads, false));
    const x = new ort.Tensor('float32', Float32Array.from({ length: d }, () => random() - 0.5), [1, d]);
    const times: number[] = [];
    for (let i = 0; i < 60; i++) {
      const start = performance.now();
      await session.run({ x });
      times.push(performance.now() - start);
    }
    await session.release();
    return median(times.slice(10));
  };
  return { fp32: await time(fp32), int8: await time(int8) };
}

/** ms per 32 ms window: lserve's SileroVad.probabilities over `seconds` of speech, and bare ORT runs of the same model in this thread. */
async function vadPerWindow(ort: Ort, seconds: number): Promise<{ lserve: number; ort: number; windows: number }> {
  const audio = repeatedSpeech(seconds);
  const windows = Math.ceil(audio.length / 512);
  const vad = await SileroVad.load(1);
  await vad.probabilities(audio.subarray(0, 16_000));
  let start = performance.now();
  await vad.probabilities(audio);
  const lserve = (performance.now() - start) / windows;
  await vad.release();
  const session = await ort.InferenceSession.create(sileroVadPath(), sessionOptions(1, false));
  let state = new ort.Tensor('float32', new Float32Array(256), [2, 1, 128]);
  const sr = new ort.Tensor('int64', BigInt64Array.of(16000n), []);
  start = performance.now();
  for (let w = 0; w < windows; w++) {
    const input = new Float32Array(576);
    input.set(audio.subarray(Math.max(0, w * 512 - 64), w * 512 + 512).subarray(0, 576));
    const out = await session.run({ input: new ort.Tensor('float32', input, [1, 576]), state, sr });
    state = out.stateN as typeof state;
  }
  const bare = (performance.now() - start) / windows;
  await session.release();
  return { lserve, ort: bare, windows };
}

export async function profileSection(report: Report, o: ProfileOptions): Promise<void> {
  const dir = await benchWhisperOnnx();
  const ort = (await import(ortPath)) as Ort;
  const files = Object.fromEntries(Object.entries(WHISPER_FILES).map(([role, f]) => [role, path.join(dir, f)]));
  const installed = { id: 'whisper-base-synth', files, entry: {}, source: 'local', sizeBytes: 0 } as unknown as InstalledModel;
  const runtime = (await createWhisperLoader(() => SileroVad.load(1)).load(installed, { threads: o.threads })) as OnnxWhisper;
  const started = performance.now();
  try {
    // 1 and 2, in rounds so drift hits both: lserve's step as decodeWindow waits for it, then raw ORT
    // in this thread with lserve's settings, then with other thread / spinning settings.
    const int8 = path.join(await benchWhisperOnnxInt8Decoder(), WHISPER_FILES.decoder);
    const variants: Array<[string, number, boolean, string]> = [
      ['1 thread, spinning off', 1, false, files.decoder!],
      [`${o.threads} threads, spinning on`, o.threads, true, files.decoder!],
      ['1 thread, spinning on', 1, true, files.decoder!],
      [`int8 decoder (MatMuls quantized), ${o.threads} threads, spinning off`, o.threads, false, int8],
    ];
    const lserveSteps: number[] = [];
    const rawSteps: number[] = [];
    const variantSteps: number[][] = variants.map(() => []);
    let promptMs = 0;
    let rows: Float32Array[] = [];
    for (let round = 0; round < 2; round++) {
      const window = await runtime.encode(await runtime.mel.compute(repeatedSpeech(30)));
      const decoder = runtime.decoder(window);
      const t = performance.now();
      await decoder.start([50258, 50259, 50359], [2]);
      promptMs = performance.now() - t;
      let token = 50364;
      for (let s = 0; s < o.steps; s++) {
        const start = performance.now();
        const logits = await decoder.next(token);
        if (s >= 8) lserveSteps.push(performance.now() - start);
        token = 0;
        for (let i = 1; i < 50257; i++) if (logits[i]! > logits[token]!) token = i;
      }
      await decoder.close();
      await window.release();
      const raw = await rawDecoder(ort, files.decoder!, o.threads, false, o.steps, round === 0);
      rawSteps.push(...raw.stepMs.slice(8));
      if (round === 0) rows = raw.rows;
      for (const [i, [, threads, spinning, file]] of variants.entries()) variantSteps[i]!.push(...(await rawDecoder(ort, file, threads, spinning, Math.min(o.steps, 96))).stepMs.slice(8));
    }
    const variantMs = variantSteps.map((v) => median(v));
    // 3. Messaging.
    const transfer = await roundTrips('transfer', 400);
    const copy = await roundTrips('copy', 400);
    const empty = await roundTrips('empty', 400);
    // 4. JS per token.
    const js = await jsPerToken(runtime, rows);
    // 5. Logits projection.
    const proj = await projection(ort, o.threads);
    // 6. VAD.
    const vad = await vadPerWindow(ort, 20);

    const step = median(lserveSteps);
    const ortMs = median(rawSteps);
    report.section(`Whisper decoder step profile (whisper-base-sized, ${o.steps} steps after a 3-token prompt, ${o.threads} threads; ${fmt((performance.now() - started) / 1000, 0)} s):`);
    report.row('lserve next() as decodeWindow waits for it', `${fmt(step, 2)} ms`, `early / late steps ${fmt(median(lserveSteps.slice(0, 16)), 2)} / ${fmt(median(lserveSteps.slice(-16)), 2)} ms; prompt step ${fmt(promptMs, 0)} ms`);
    report.row(`ORT run alone, this thread, lserve's settings (${o.threads} threads, no spinning)`, `${fmt(ortMs, 2)} ms`, `${fmt((100 * ortMs) / step, 0)} % of the step`);
    variants.forEach(([label], i) => report.row(`ORT run alone, ${label}`, `${fmt(variantMs[i]!, 2)} ms`, `${fmt(variantMs[i]! / ortMs, 2)} × lserve's settings`));
    report.row('worker round trip, step-shaped message, logits row transferred', `${fmt(transfer, 3)} ms`, `copied instead: ${fmt(copy, 3)} ms; no payload: ${fmt(empty, 3)} ms`);
    report.row('step − ORT run (messaging, feeds, row copy in the worker)', `${fmt(step - ortMs, 2)} ms`, `${fmt((100 * (step - ortMs)) / step, 0)} % of the step`);
    report.row('JS per token in decodeWindow (filters + sampling + log-softmax)', `${fmt(js.loopMs - js.copyMs, 2)} ms`, `${fmt((100 * (js.loopMs - js.copyMs)) / (step + js.loopMs - js.copyMs), 0)} % of step + JS; ${js.steps} tokens`);
    report.row('  of which timestamp rules (applyTimestampRules)', `${fmt(js.rulesMs, 3)} ms`);
    report.row('  before pick() fused them: sample() at T = 0.5 (replica)', `${fmt(js.sampleMs, 3)} ms`);
    report.row('  before pick() fused them: logSoftmaxAt() (replica)', `${fmt(js.logSoftmaxMs, 3)} ms`);
    report.row('logits projection alone, fp32 (106 MB of weights per token)', `${fmt(proj.fp32, 2)} ms`, `${fmt((100 * proj.fp32) / ortMs, 0)} % of the ORT step`);
    report.row('logits projection alone, int8 (DynamicQuantizeLinear + MatMulInteger)', `${fmt(proj.int8, 2)} ms`, `saves ${fmt(proj.fp32 - proj.int8, 2)} ms per token`);
    report.row('Silero VAD per 32 ms window, lserve (loop in the VAD worker)', `${fmt(vad.lserve, 3)} ms`, `${fmt((vad.lserve * 1875) / 1000, 2)} s per audio minute`);
    report.row('Silero VAD per 32 ms window, bare ORT run in this thread', `${fmt(vad.ort, 3)} ms`, `lserve / bare ${fmt(vad.lserve / vad.ort, 2)}`);
  } finally {
    await runtime.dispose();
  }
}
