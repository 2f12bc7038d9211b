import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { getRuntime } from '../../src/runtimes/llama/runtime.js';
import type { WorkerResult } from './embed-worker.js';

/**
 * The Qwen3-Embedding-0.6B benchmark's driver: distinct ~100-token texts
 * (counted with the model's own tokenizer), then lserve and node-llama-cpp
 * direct, each in its own child process (bench/text/embed-worker.ts) so that
 * resident memory is attributable, one at a time, alternated run by run.
 * The direct side gets the shape lserve's plan line reported.
 */

const WORKER = fileURLToPath(new URL('./embed-worker.ts', import.meta.url));
const run = promisify(execFile);

const WORDS = (
  'river mountain village bread oven winter summer market harbour lantern garden orchard library museum bridge tower ' +
  'engine signal copper silver forest meadow valley island desert canyon glacier volcano thunder rainbow comet planet ' +
  'teacher doctor farmer sailor painter baker weaver miner pilot singer student captain merchant scholar gardener ' +
  'carries builds repairs studies paints counts measures follows watches gathers explains questions remembers ' +
  'quietly slowly carefully bravely gently eagerly patiently loudly rarely often always never sometimes ' +
  'ancient bright narrow heavy golden frozen hidden distant crowded silent gentle rusty wooden northern eastern ' +
  'the a of and with under over between after before during across through beside behind near'
).split(' ');

function seeded(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}

/**
 * `count` distinct texts of `target` evaluated tokens each (the text's tokens
 * plus the `<|endoftext|>` the model appends), within ±5 %, checked with the
 * model's tokenizer (loaded vocabulary-only).
 */
export async function makeTexts(modelFile: string, count: number, target = 100): Promise<{ texts: string[]; tokens: number[] }> {
  const vocab = await (await getRuntime()).loadModel({ modelPath: modelFile, vocabOnly: true });
  try {
    // The embedding context appends the EOS token (add_eos_token) and no BOS (add_bos_token false).
    const evaluated = (text: string) => vocab.tokenize(text).length + 1;
    const texts: string[] = [];
    const tokens: number[] = [];
    for (let i = 0; i < count; i++) {
      const random = seeded(1000 + i);
      let text = `Note ${i + 1}:`;
      while (evaluated(text) < target) text += ` ${WORDS[Math.floor(random() * WORDS.length)]}${random() < 0.12 ? '.' : ''}`;
      const n = evaluated(text);
      if (n < target * 0.95 || n > target * 1.05) throw new Error(`text ${i} is ${n} tokens, not ≈${target}`);
      texts.push(text);
      tokens.push(n);
    }
    if (new Set(texts).size !== texts.length) throw new Error('texts are not distinct');
    return { texts, tokens };
  } finally {
    await vocab.dispose();
  }
}

export interface SideOptions {
  model: string;
  textsFile: string;
  threads: number;
  sizes: number[];
  reps: number;
}

/** Runs one side in a child process and returns its result line. */
export async function runWorker(side: 'lserve' | 'direct', options: SideOptions, extra: string[] = []): Promise<WorkerResult> {
  const argv = ['--import', 'tsx', WORKER, '--side', side, '--model', options.model, '--texts', options.textsFile, '--threads', String(options.threads), '--sizes', options.sizes.join(','), '--reps', String(options.reps), ...extra];
  const { stdout } = await run(process.execPath, argv, { maxBuffer: 16 << 20, env: process.env });
  const line = stdout.trim().split('\n').at(-1) ?? '';
  return JSON.parse(line) as WorkerResult;
}

/** The direct worker's arguments for a shape (lserve's, from its plan line). */
export function shapeArgs(shape: WorkerResult['shape']): string[] {
  return ['--contexts', String(shape.contexts), '--context-size', String(shape.contextSize), '--batch', String(shape.batchSize), '--context-threads', String(shape.threadsPerContext)];
}

export interface Qwen3EmbedResults {
  lserve: WorkerResult[];
  direct: WorkerResult[];
  tokens: number[];
}

/** `runs` rounds of lserve then direct (each a fresh process), with lserve's shape handed to direct. */
export async function qwen3EmbedRounds(model: string, options: { threads: number; runs: number; sizes: number[]; reps: number; textCount: number }): Promise<Qwen3EmbedResults> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-texts-'));
  try {
    const { texts, tokens } = await makeTexts(model, options.textCount);
    const textsFile = path.join(dir, 'texts.json');
    await writeFile(textsFile, JSON.stringify(texts));
    const side: SideOptions = { model, textsFile, threads: options.threads, sizes: options.sizes, reps: options.reps };
    const lserve: WorkerResult[] = [];
    const direct: WorkerResult[] = [];
    for (let i = 0; i < options.runs; i++) {
      const ours = await runWorker('lserve', side);
      lserve.push(ours);
      direct.push(await runWorker('direct', side, shapeArgs(ours.shape)));
    }
    return { lserve, direct, tokens };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
