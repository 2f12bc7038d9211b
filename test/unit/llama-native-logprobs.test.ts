import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Llama, LlamaContext, LlamaContextSequence, LlamaModel, Token } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evaluateWithLogprobs, nativeLogprobs, type PositionLogprobs } from '../../src/runtimes/llama/native-logprobs.js';
import { sampleAfterReorder } from '../../src/runtimes/llama/output-reorder.js';
import { getRuntime, runtimeBuild, setLlamaAddonHome } from '../../src/runtimes/llama/runtime.js';

/**
 * The native read of log-probabilities (scripts/llama/lserveLogprobs.cpp in
 * the threadpool addon lserve ships for linux-x64) against what
 * node-llama-cpp's own sampler reports for the same evaluation (the whole
 * vocabulary's softmax, turned into a Map), on the Qwen3 golden model's
 * real 151,936-token vocabulary; and two sequences scored in one batch
 * read each their own rows.
 */

const golden = fileURLToPath(new URL('../golden/qwen3-logprobs/', import.meta.url));
const reference = JSON.parse(readFileSync(path.join(golden, 'reference.json'), 'utf8')) as { prompts: Array<{ ids: number[] }> };
const prompts = reference.prompts.map((p) => p.ids as Token[]);

describe.runIf(process.platform === 'linux' && process.arch === 'x64')('log-probabilities read natively from the logits', () => {
  let home: string;
  let runtime: Llama;
  let model: LlamaModel;
  let context: LlamaContext;
  const saved = process.env.LSERVE_LLAMA_BUILD;

  beforeAll(async () => {
    home = await mkdtemp(path.join(os.tmpdir(), 'lserve-logprobs-'));
    delete process.env.LSERVE_LLAMA_BUILD; // vitest.config.ts pins the prebuilt binary: this suite is about the addon
    setLlamaAddonHome(home);
    runtime = await getRuntime();
    expect(runtimeBuild()).toBe('threadpool');
    model = await runtime.loadModel({ modelPath: path.join(golden, 'model.gguf') });
    context = await model.createContext({ contextSize: 512, sequences: 5, threads: 1 });
    sampleAfterReorder(context);
  }, 120_000);

  afterAll(async () => {
    await context?.dispose();
    await model?.dispose();
    process.env.LSERVE_LLAMA_BUILD = saved;
    await rm(home, { recursive: true, force: true });
  });

  const read = () => {
    const fn = nativeLogprobs(model);
    if (!fn) throw new Error('the shipped addon has no lserveTokenLogprobs');
    return fn;
  };

  async function scored(sequence: LlamaContextSequence, tokens: Token[], top: number, from = 0): Promise<PositionLogprobs[]> {
    if (sequence.nextTokenIndex > 0) await sequence.eraseContextTokenRanges([{ start: 0, end: sequence.nextTokenIndex }]);
    return evaluateWithLogprobs(read(), sequence, tokens.slice(0, -1), tokens.slice(1), top, from);
  }

  // node-llama-cpp sums the softmax in float32 over the whole vocabulary (the native read, in double): on
  // 151,936 tokens the two differ by up to 4e-4 nats (the golden test holds the native read to transformers' float64).
  const SAMPLER_TOLERANCE = 1e-3;

  it('gives each position the log-softmax node-llama-cpp\'s sampler gives, and its likeliest tokens in order', async () => {
    const sequence = context.getSequence();
    try {
      // Plain text, digits and non-ASCII text (the sampler's whole-vocabulary Map takes ~50 ms a position).
      for (const tokens of [prompts[0]!, prompts[3]!, prompts[4]!]) {
        const native = await scored(sequence, tokens, 20);
        await sequence.eraseContextTokenRanges([{ start: 0, end: sequence.nextTokenIndex }]);
        const results = await sequence.controlledEvaluate(tokens.slice(0, -1).map((t) => [t, { generateNext: { probabilities: true } }]));
        expect(native).toHaveLength(tokens.length - 1);
        native.forEach((position, i) => {
          const distribution = [...results[i]!.next!.probabilities!];
          const expected = Math.log(new Map(distribution).get(tokens[i + 1]!)!);
          expect(Math.abs(position.logprob! - expected), `position ${i}`).toBeLessThan(SAMPLER_TOLERANCE);
          expect(position.top).toHaveLength(20);
          position.top.forEach(({ id, logprob }, k) => {
            expect(Math.abs(logprob - Math.log(distribution[k]![1]))).toBeLessThan(SAMPLER_TOLERANCE);
            // Ids in the same order wherever neighbours are told apart.
            const gap = Math.abs(distribution[k]![1] - (distribution[k + 1]?.[1] ?? 0));
            if (gap > 1e-6 && (k === 0 || Math.abs(distribution[k - 1]![1] - distribution[k]![1]) > 1e-6)) expect(id).toBe(distribution[k]![0]);
          });
        });
      }
    } finally {
      sequence.dispose();
    }
  });

  it('keeps no logits before `from`, and gives the same numbers from there', async () => {
    const sequence = context.getSequence();
    try {
      const tokens = prompts[1]!;
      const whole = await scored(sequence, tokens, 5);
      const tail = await scored(sequence, tokens, 5, 20);
      expect(tail.slice(0, 20).every((p) => p.logprob === null && p.top.length === 0)).toBe(true);
      tail.slice(20).forEach((p, i) => expect(p.logprob).toBeCloseTo(whole[20 + i]!.logprob!, 4));
      // No target: no log-probability, the likeliest tokens still read.
      const untargeted = await evaluateWithLogprobs(read(), sequence, [tokens.at(-1)!], [-1], 3);
      expect(untargeted[0]!.logprob).toBeNull();
      expect(untargeted[0]!.top).toHaveLength(3);
    } finally {
      sequence.dispose();
    }
  });

  it('reads each sequence its own rows when several are scored in one batch', async () => {
    const sequences = [context.getSequence(), context.getSequence(), context.getSequence()];
    try {
      const picked = [prompts[0]!, prompts[1]!, prompts[4]!];
      const alone: PositionLogprobs[][] = [];
      for (let s = 0; s < 3; s++) alone.push(await scored(sequences[s]!, picked[s]!, 2));
      for (let round = 0; round < 5; round++) {
        const together = await Promise.all(sequences.map((sequence, s) => scored(sequence, picked[s]!, 2)));
        together.forEach((positions, s) => positions.forEach((p, i) => {
          expect(p.top.map((t) => t.id)).toEqual(alone[s]![i]!.top.map((t) => t.id));
          expect(Math.abs(p.logprob! - alone[s]![i]!.logprob!)).toBeLessThan(1e-3);
        }));
      }
    } finally {
      for (const sequence of sequences) sequence.dispose();
    }
  });
});
