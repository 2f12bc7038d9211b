import type { LlamaContext, LlamaModel } from 'node-llama-cpp';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getRuntime } from '../../src/runtimes/llama/runtime.js';
import { sampleAfterReorder } from '../../src/runtimes/llama/output-reorder.js';
import { tinyQwen3File } from '../helpers/chat-model.js';

/**
 * Two sequences sampled at once after a batch whose outputs llama.cpp
 * reordered (one sequence's prompt beside the other's single token, split
 * into micro-batches per sequence): on the real binary, through the same
 * native calls node-llama-cpp's batch dispatch makes. Unguarded, about a
 * third of such rounds sample each sequence from the other's logits
 * (measured: 103 of 300); guarded, none may.
 */

interface NativeContext {
  removeTokenCellsFromSequence(sequence: number, start: number, end: number): boolean;
  initBatch(size: number): void;
  addToBatch(sequence: number, firstPosition: number, tokens: Uint32Array, logitIndexes: Uint32Array): Uint32Array;
  decodeBatch(): Promise<void>;
  sampleToken(batchLogitIndex: number, sampler: unknown): Promise<number>;
}

const ROUNDS = 100;
let model: LlamaModel;

beforeAll(async () => {
  model = await (await getRuntime()).loadModel({ modelPath: tinyQwen3File() });
}, 60_000);

afterAll(async () => {
  await model?.dispose();
});

/** Greedy samplers, one per sequence, as node-llama-cpp makes them. */
function greedySamplers(count: number): unknown[] {
  const Sampler = (model.llama as unknown as { _bindings: { AddonSampler: new (model: unknown) => { applyConfig(config: object): void } } })._bindings.AddonSampler;
  return Array.from({ length: count }, () => {
    const sampler = new Sampler((model as unknown as { _model: unknown })._model);
    sampler.applyConfig({ temperature: 0 });
    return sampler;
  });
}

/** Rounds (of ROUNDS) in which sampling both sequences at once gave other tokens than sampling them one after the other. */
async function crossedRounds(context: LlamaContext): Promise<number> {
  const native = (context as unknown as { _ctx: NativeContext })._ctx;
  const samplers = greedySamplers(2);
  const prompts = [model.tokenize('The quick brown fox jumps over the lazy dog and'), model.tokenize('Hello')];
  const round = async (together: boolean): Promise<string> => {
    native.initBatch(prompts[0]!.length + prompts[1]!.length);
    const rows = prompts.map((tokens, sequence) => {
      native.removeTokenCellsFromSequence(sequence, 0, 1_000);
      return native.addToBatch(sequence, 0, Uint32Array.from(tokens), Uint32Array.from([tokens.length - 1]))[0]!;
    });
    await native.decodeBatch();
    const sample = (sequence: number) => native.sampleToken(rows[sequence]!, samplers[sequence]);
    return String(together ? await Promise.all([sample(0), sample(1)]) : [await sample(0), await sample(1)]);
  };
  const alone = await round(false);
  let crossed = 0;
  for (let i = 0; i < ROUNDS; i++) if ((await round(true)) !== alone) crossed++;
  return crossed;
}

describe("sampling after llama.cpp's output reorder", () => {
  it('never crosses two sequences sampled at the same moment once guarded', async () => {
    const context = await model.createContext({ sequences: 2, contextSize: 256, batchSize: 64, threads: 2 });
    try {
      sampleAfterReorder(context);
      expect(await crossedRounds(context)).toBe(0);
    } finally {
      await context.dispose();
    }
  }, 60_000);

  // The control, showing the rounds above can cross: should it ever find none, the binary no longer races and the guard can go.
  it('crosses them unguarded on this binary', async () => {
    const context = await model.createContext({ sequences: 2, contextSize: 256, batchSize: 64, threads: 2 });
    try {
      expect(await crossedRounds(context)).toBeGreaterThan(0);
    } finally {
      await context.dispose();
    }
  }, 60_000);
});
