/**
 * Speech benchmark (not a test): lserve's one-shot Whisper transcription
 * (task function and HTTP) against whisper.cpp on the same machine and model
 * size, a profile of the Whisper decoder step, live streaming recognition
 * (chunk latency, concurrent real-time streams) and audio decoding, on
 * synthetic models of the real sizes (random weights: the text is nonsense,
 * the compute is real). Everything compared is measured side by side in one
 * run; read the ratios, not the absolute numbers (shared machines are noisy).
 *
 *   npx tsx bench/asr.ts [--runs 3] [--threads 2] [--seconds 60]
 *                        [--whisper-bin /tmp/whisper-build/bin] [--ggml f16,q8_0] [--tokens 100]
 *                        [--stream-seconds 8] [--capacity 8,16,24,32,48]
 *                        [--skip oneshot,int8,whispercpp,profile,stream,decode]
 *
 * whisper.cpp is the reference when its CLI is built (see bench/asr.md,
 * "whisper.cpp reference"); without it the one-shot section runs lserve alone.
 */
import os from 'node:os';
import { parseArgs } from 'node:util';
import { fmt, Report } from './asr/common.js';
import { decodeSection } from './asr/decode.js';
import type { GgmlType } from './asr/ggml.js';
import { oneShotSection } from './asr/oneshot.js';
import { profileSection } from './asr/profile.js';
import { streamingSection } from './asr/streaming.js';

const { values: args } = parseArgs({
  options: {
    threads: { type: 'string', default: String(Math.min(os.availableParallelism(), 2)) },
    runs: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '60' },
    tokens: { type: 'string', default: '100' },
    'whisper-bin': { type: 'string', default: '/tmp/whisper-build/bin' },
    ggml: { type: 'string', default: 'f16,q8_0' },
    'stream-seconds': { type: 'string', default: '8' },
    capacity: { type: 'string', default: '8,16,24,32,48' },
    skip: { type: 'string', default: '' },
  },
});
const threads = Number(args.threads);
const runs = Number(args.runs);
const seconds = Number(args.seconds);
const skip = new Set(args.skip.split(',').filter(Boolean));

async function main(): Promise<void> {
  const cpu = os.cpus()[0]?.model ?? 'cpu';
  console.log(`lserve speech benchmark: ${threads} threads, ${runs} runs, ${seconds} s of audio, node ${process.version}, ${cpu} ×${os.availableParallelism()}`);
  const started = performance.now();
  const report = new Report();
  const goals: string[] = [];
  if (!skip.has('oneshot')) {
    const r = await oneShotSection(report, { threads, runs, seconds, whisperBin: args['whisper-bin'], withWhisperCpp: !skip.has('whispercpp'), withInt8: !skip.has('int8'), ggmlTypes: args.ggml.split(',').filter((t): t is GgmlType => ['f16', 'q8_0', 'f32'].includes(t)), realisticTokens: Number(args.tokens) });
    if (Number.isFinite(r.cppNormalisedRtf)) {
      const verdict = (rtf: number) => `${rtf <= r.cppNormalisedRtf ? 'met' : 'NOT met'} (${fmt(rtf / r.cppNormalisedRtf, 2)}×)`;
      goals.push(`one-shot RTF ≤ 1.0× whisper.cpp's: fp32 ${verdict(r.lserveNormalisedRtf)}${Number.isFinite(r.q8NormalisedRtf) ? `; -q8 ${verdict(r.q8NormalisedRtf)}` : ''}`);
    }
  }
  if (!skip.has('profile')) await profileSection(report, { threads, steps: 160 });
  if (!skip.has('stream')) {
    const r = await streamingSection(report, { threads, seconds: Number(args['stream-seconds']), capacity: args.capacity.split(',').map(Number), runs: 1 });
    if (Number.isFinite(r.p95At4)) goals.push(`streaming p95 < 300 ms per chunk with 4 streams: ${r.p95At4 < 300 ? 'met' : 'NOT met'} (${fmt(r.p95At4, 0)} ms)`);
  }
  if (!skip.has('decode')) await decodeSection(report, { runs, seconds });
  if (goals.length) {
    console.log('\nGoals:');
    for (const g of goals) console.log(`  ${g}`);
  }
  console.log(`\n(${fmt((performance.now() - started) / 1000, 0)} s in all)`);
}

await main();
