import { describe, expect, it } from 'vitest';
import type { LlamaModel } from 'node-llama-cpp';
import { chatKvTypes, describePlan, estimateContextBytes, kvCacheContextOptions, planContext, requestedContext, type PlanInput } from '../../src/runtimes/llama/context-plan.js';
import { parseContextSizes, parseKvCacheType } from '../../src/cli/context.js';
import { CliError, EXIT_USAGE } from '../../src/cli/errors.js';
import { InsufficientMemoryError } from '../../src/core/errors.js';
import type { InstalledModel } from '../../src/core/store.js';

const MiB = 1024 ** 2;

function installed(defaults: Record<string, unknown> = {}, ownedBy = 'user'): InstalledModel {
  return {
    id: 'qe',
    sizeBytes: 1,
    source: 'local',
    files: {},
    entry: { id: 'qe', kind: 'embedding', backend: 'llama', description: 'x', aliases: ['qe-alias'], owned_by: ownedBy, license: 'x', files: {}, defaults },
  };
}

/** A model whose context costs 1 MiB per 1024 tokens (KV) plus 1 MiB per 512 batch tokens (compute). */
function input(overrides: Partial<PlanInput>): PlanInput {
  return {
    id: 'qe',
    request: { tokens: 8192, explicit: false, source: 'default 8192' },
    trainContextSize: 40960,
    maxContexts: 4,
    sequences: 1,
    batchFor: (size) => Math.min(512, size),
    estimate: async ({ contextSize, batchSize, sequences }) => ((contextSize * sequences) / 1024) * MiB + (batchSize / 512) * MiB,
    budgetBytes: 1024 * MiB,
    weightBytes: 600 * MiB,
    ...overrides,
  };
}

describe('requestedContext', () => {
  const options = (contextSizes?: { all?: number; models: Record<string, number> }) => ({ threads: 0, contextSizes });

  it('takes the kind default when nothing is asked, never marked explicit', () => {
    expect(requestedContext(installed(), options(), 'embedding')).toEqual({ tokens: 8192, explicit: false, source: 'default 8192' });
    expect(requestedContext(installed(), options(), 'chat').tokens).toBe(65_536);
  });

  it('a size set at pull on a user file is explicit; a catalog default is not', () => {
    expect(requestedContext(installed({ context_size: 2048 }), options(), 'embedding')).toMatchObject({ tokens: 2048, explicit: true });
    expect(requestedContext(installed({ context_size: 2048 }, 'Qwen'), options(), 'embedding')).toMatchObject({ tokens: 2048, explicit: false });
  });

  it('--ctx-size for one model (by id or alias) beats --ctx-size for all, which beats the model defaults', () => {
    const m = installed({ context_size: 2048 });
    expect(requestedContext(m, options({ all: 1024, models: {} }), 'embedding')).toMatchObject({ tokens: 1024, explicit: true });
    expect(requestedContext(m, options({ all: 1024, models: { 'qe-alias': 512 } }), 'embedding')).toMatchObject({ tokens: 512, explicit: true, source: '--ctx-size qe=512' });
    expect(requestedContext(m, options({ models: { other: 512 } }), 'embedding').tokens).toBe(2048);
  });

  it('parses the --ctx-size flag values and refuses malformed ones', () => {
    expect(parseContextSizes(['8192', 'bge=512', 'qwen3-0.6b=2048'])).toEqual({ all: 8192, models: { bge: 512, 'qwen3-0.6b': 2048 } });
    for (const bad of ['', 'x', '=12', 'a=b', '8', '1.5', 'a=-1']) expect(() => parseContextSizes([bad]), bad).toThrow(/--ctx-size/);
  });
});

describe('planContext', () => {
  it('keeps the asked size and the whole pool when they fit, and reports the bytes', async () => {
    const plan = await planContext(input({}));
    expect(plan).toMatchObject({ contexts: 4, contextSize: 8192, batchSize: 512, bytes: 4 * 9 * MiB, adjusted: undefined });
  });

  it('never asks for more than the training context', async () => {
    expect((await planContext(input({ trainContextSize: 512 }))).contextSize).toBe(512);
  });

  it('a default gives up pooled contexts, then halves, until it fits the budget', async () => {
    // 8192 tokens cost 9 MiB a context: 3 fit in 30 MiB.
    expect(await planContext(input({ budgetBytes: 30 * MiB }))).toMatchObject({ contexts: 3, contextSize: 8192 });
    // Not even one 8192 context (9 MiB) fits 6 MiB; 4096 tokens cost 5 MiB.
    const plan = await planContext(input({ budgetBytes: 6 * MiB }));
    expect(plan).toMatchObject({ contexts: 1, contextSize: 4096 });
    expect(plan.bytes).toBeLessThanOrEqual(6 * MiB);
    expect(plan.adjusted).toMatch(/context 4096 instead of 8192, 1 context instead of 4 to fit the 6\.3 MB budget/);
  });

  it('a chat context takes an 8-bit KV cache before it takes fewer tokens, explicit or not', async () => {
    // The KV cache: 1 MiB per 1024 tokens at f16, half that at q8_0; the compute buffer as before.
    const estimate: PlanInput['estimate'] = async ({ contextSize, batchSize, kvType }) => ((contextSize / 1024) * MiB) / (kvType === 'q8_0' ? 2 : 1) + (batchSize / 512) * MiB;
    const chat = (budgetBytes: number, request = { tokens: 40960, explicit: false, source: 'default 65536' }) =>
      planContext(input({ request, maxContexts: 1, kvTypes: ['f16', 'q8_0'], estimate, budgetBytes }));
    expect(await chat(64 * MiB)).toMatchObject({ contextSize: 40960, kvType: 'f16' });
    const eight = await chat(30 * MiB);
    expect(eight).toMatchObject({ contextSize: 40960, kvType: 'q8_0' });
    expect(eight.adjusted).toMatch(/a q8_0 KV cache to fit/);
    expect(await chat(15 * MiB)).toMatchObject({ contextSize: 20480, kvType: 'q8_0' });
    expect(await chat(30 * MiB, { tokens: 40960, explicit: true, source: '--ctx-size 40960' })).toMatchObject({ contextSize: 40960, kvType: 'q8_0' });
  });

  it('an explicit size is never shrunk: fewer contexts, or an error with the numbers', async () => {
    const request = { tokens: 40960, explicit: true, source: '--ctx-size 40960' };
    // 40960 tokens cost 41 MiB a context.
    expect(await planContext(input({ request, budgetBytes: 100 * MiB }))).toMatchObject({ contexts: 2, contextSize: 40960 });
    const refused = planContext(input({ request, budgetBytes: 40 * MiB }));
    await expect(refused).rejects.toBeInstanceOf(InsufficientMemoryError);
    await expect(refused).rejects.toMatchObject({
      status: 507,
      code: 'insufficient_memory',
      message: "Model 'qe' needs ≈43.0 MB of context memory (40960 tokens, batch 512; --ctx-size 40960) but only 41.9 MB of the memory budget is left after its 629 MB of weights. Set a smaller context with --ctx-size, or raise --max-memory.",
    });
  });

  it('a default that fits nowhere, even at the floor, is refused too', async () => {
    await expect(planContext(input({ budgetBytes: 1 * MiB }))).rejects.toThrow(/needs ≈1\.6 MB of context memory \(512 tokens, batch 512; default 8192\)/);
  });

  it('chat sequences multiply the cost of one context and are named in the advice', async () => {
    const chat = input({ maxContexts: 1, sequences: 4, request: { tokens: 4096, explicit: true, source: '--ctx-size 4096' }, budgetBytes: 10 * MiB });
    await expect(planContext(chat)).rejects.toThrow(/4 sequences × 4096 tokens.*or fewer --parallel sequences/);
  });

  it('accepts a plan whose cost cannot be estimated', async () => {
    expect(await planContext(input({ estimate: async () => undefined, budgetBytes: 0 }))).toMatchObject({ contexts: 4, contextSize: 8192, bytes: 0 });
  });
});

describe('a KV cache type the user chose (--kv-cache-type)', () => {
  /** The KV cache: 1 MiB per 1024 tokens at f16, twice that at f32, half at q8_0; the compute buffer as before. */
  const PER_KIB_TOKENS = { f32: 2, f16: 1, q8_0: 0.5 } as const;
  const estimate: PlanInput['estimate'] = async ({ contextSize, batchSize, kvType = 'f16' }) => (contextSize / 1024) * PER_KIB_TOKENS[kvType] * MiB + (batchSize / 512) * MiB;
  const chat = (kvCacheType: 'f32' | 'f16' | 'q8_0' | undefined, budgetBytes: number, request = { tokens: 40960, explicit: false, source: 'default 65536' }) =>
    planContext(
      input({ request, maxContexts: 1, kvTypes: chatKvTypes({ kvCacheType }), kvTypeSource: kvCacheType && `--kv-cache-type ${kvCacheType}`, estimate, budgetBytes }),
    );

  it('is the only type a chat context takes; unset, f16 then q8_0', () => {
    expect(chatKvTypes({})).toEqual(['f16', 'q8_0']);
    for (const type of ['f32', 'f16', 'q8_0'] as const) expect(chatKvTypes({ kvCacheType: type })).toEqual([type]);
  });

  it('f32 is chosen when asked, where f16 would have fitted, and the plan line names it', async () => {
    const plan = await chat('f32', 1024 * MiB);
    expect(plan).toMatchObject({ contextSize: 40960, kvType: 'f32', bytes: 81 * MiB, adjusted: undefined });
    expect(describePlan('qwen', plan, { tokens: 40960, explicit: false, source: 'default 65536' })).toContain('40960 tokens, f32 KV cache, batch 512');
  });

  it('a default size shrinks rather than take another type: f32 stays f32, f16 never falls back to q8_0', async () => {
    // 40960 tokens fit at f16 (41 MiB) but not at f32 (81 MiB): f32 halves to 20480 (41 MiB).
    expect(await chat(undefined, 50 * MiB)).toMatchObject({ contextSize: 40960, kvType: 'f16' });
    const f32 = await chat('f32', 50 * MiB);
    expect(f32).toMatchObject({ contextSize: 20480, kvType: 'f32' });
    expect(f32.adjusted).toMatch(/^context 20480 instead of 40960 to fit/);
    // Automatic: q8_0 at 40960 (21 MiB) fits 30 MiB; asked for f16: half the context instead.
    expect(await chat(undefined, 30 * MiB)).toMatchObject({ contextSize: 40960, kvType: 'q8_0' });
    expect(await chat('f16', 30 * MiB)).toMatchObject({ contextSize: 20480, kvType: 'f16' });
    expect(await chat('q8_0', 1024 * MiB)).toMatchObject({ contextSize: 40960, kvType: 'q8_0', adjusted: undefined });
  });

  it('an explicit size that does not fit at that type is refused, naming the type and the flag', async () => {
    const refused = chat('f32', 50 * MiB, { tokens: 40960, explicit: true, source: '--ctx-size 40960' });
    await expect(refused).rejects.toBeInstanceOf(InsufficientMemoryError);
    await expect(refused).rejects.toThrow(
      /needs ≈84\.9 MB of context memory \(40960 tokens, f32 KV cache, batch 512; --ctx-size 40960; --kv-cache-type f32\) .* Set a smaller context with --ctx-size or a smaller --kv-cache-type, or raise --max-memory\./,
    );
  });

  it('the --kv-cache-type value is one of f32, f16, q8_0, exactly', () => {
    for (const type of ['f32', 'f16', 'q8_0']) expect(parseKvCacheType(type)).toBe(type);
    for (const bad of ['', 'F32', 'fp32', 'bf16', 'q4_0', 'q8']) {
      expect(() => parseKvCacheType(bad), bad).toThrow(CliError);
      expect(() => parseKvCacheType(bad), bad).toThrow(`--kv-cache-type must be one of f32, f16, q8_0, got '${bad}'`);
    }
    let error: unknown;
    try {
      parseKvCacheType('f8');
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({ exitCode: EXIT_USAGE });
  });
});

describe('what each KV cache type asks of llama.cpp', () => {
  it('f32 and q8_0 name their ggml type; f32 takes flash attention off, q8_0 on; f16 keeps the defaults', () => {
    expect(kvCacheContextOptions('f32')).toEqual({ experimentalKvCacheKeyType: 'F32', experimentalKvCacheValueType: 'F32', flashAttention: false });
    expect(kvCacheContextOptions('q8_0')).toEqual({ experimentalKvCacheKeyType: 'Q8_0', experimentalKvCacheValueType: 'Q8_0', flashAttention: true });
    expect(kvCacheContextOptions('f16')).toEqual({});
    expect(kvCacheContextOptions(undefined)).toEqual({});
  });

  it('the memory estimate is asked for the same cache and attention (ggml F32 = 0, Q8_0 = 8)', async () => {
    const asked: Array<Record<string, unknown>> = [];
    const model = {
      gpuLayers: 0,
      fileInsights: {
        estimateContextResourceRequirementsV2: async (options: Record<string, unknown>) => {
          asked.push(options);
          return { cpuRam: 3, gpuVram: 4 };
        },
      },
    } as unknown as LlamaModel;
    const shape = { contextSize: 1024, batchSize: 512, sequences: 1 };
    for (const kvType of ['f32', 'f16', 'q8_0', undefined] as const) expect(await estimateContextBytes(model, { ...shape, kvType })).toBe(7);
    expect(asked.map(({ kvCacheKeyType, kvCacheValueType, flashAttention }) => ({ kvCacheKeyType, kvCacheValueType, flashAttention }))).toEqual([
      { kvCacheKeyType: 0, kvCacheValueType: 0, flashAttention: false },
      { kvCacheKeyType: undefined, kvCacheValueType: undefined, flashAttention: undefined },
      { kvCacheKeyType: 8, kvCacheValueType: 8, flashAttention: true },
      { kvCacheKeyType: undefined, kvCacheValueType: undefined, flashAttention: undefined },
    ]);
    expect(asked.every((options) => options.contextSize === 1024 && options.modelGpuLayers === 0 && options.isEmbeddingContext === false)).toBe(true);
  });
});
