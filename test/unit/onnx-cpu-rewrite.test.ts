import ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { runsOnCpu } from '../../src/runtimes/onnx/cpu-kernels.js';
import { rewriteForCpu, type CpuRewriteReport } from '../../src/runtimes/onnx/cpu-rewrite.js';
import { seededRandom } from '../fixtures/gguf/format.js';
import { DataType, onnx, type OnnxTypes } from '../fixtures/onnx/build.js';
import * as reference from '../helpers/contrib-ops-reference.js';
import type { Tensor } from '../helpers/contrib-ops-reference.js';

/**
 * The rewrites of fused com.microsoft operators into standard ONNX operators
 * (src/runtimes/onnx/cpu-rewrite.ts), each checked on random inputs: a
 * one-node model of the fused operator is refused by onnxruntime-node's CPU
 * provider as it is (no kernel; packed MultiHeadAttention fails when run),
 * and after the rewrite it runs and agrees with a TypeScript implementation
 * of the operator's definition (test/helpers/contrib-ops-reference.ts).
 */

const AttrType = onnx.AttributeProto.AttributeType;
const int = (name: string, i: number): OnnxTypes.IAttributeProto => ({ name, type: AttrType.INT, i });
const ints = (name: string, v: number[]): OnnxTypes.IAttributeProto => ({ name, type: AttrType.INTS, ints: v });
const float = (name: string, f: number): OnnxTypes.IAttributeProto => ({ name, type: AttrType.FLOAT, f });

const random = seededRandom(0xc0ffee);
function randomTensor(dims: number[], scale = 1, offset = 0): Tensor {
  const data = new Float32Array(dims.reduce((a, b) => a * b, 1)).map(() => offset + (random() * 2 - 1) * scale);
  return { data, dims };
}

interface Fused {
  op: string;
  inputs: Array<[string, Tensor] | null>;
  outputs: string[];
  attributes?: OnnxTypes.IAttributeProto[];
}

const valueInfo = (name: string, dims?: number[]): OnnxTypes.IValueInfoProto => ({
  name,
  type: { tensorType: { elemType: DataType.FLOAT, ...(dims ? { shape: { dim: dims.map((d) => ({ dimValue: d })) } } : {}) } },
});

/** A float32 model of one com.microsoft node whose inputs are graph inputs, decoded as a file read from disk would be. */
function oneNodeModel(fused: Fused): OnnxTypes.ModelProto {
  const bytes = onnx.ModelProto.encode({
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }, { domain: 'com.microsoft', version: 1 }],
    graph: {
      name: 'fused',
      node: [{ opType: fused.op, domain: 'com.microsoft', name: fused.op, input: fused.inputs.map((i) => i?.[0] ?? ''), output: fused.outputs, attribute: fused.attributes ?? [] }],
      input: fused.inputs.flatMap((i) => (i ? [valueInfo(i[0], i[1].dims)] : [])),
      output: fused.outputs.map((name) => valueInfo(name)),
    },
  }).finish();
  return onnx.ModelProto.decode(bytes);
}

const encode = (model: OnnxTypes.ModelProto) => onnx.ModelProto.encode(model).finish();

async function run(model: OnnxTypes.ModelProto, fused: Fused): Promise<Record<string, Float32Array>> {
  const session = await ort.InferenceSession.create(encode(model), { executionProviders: ['cpu'], logSeverityLevel: 4 });
  try {
    const feeds = Object.fromEntries(fused.inputs.flatMap((i) => (i ? [[i[0], new ort.Tensor('float32', i[1].data, i[1].dims)]] : [])));
    const results = await session.run(feeds);
    return Object.fromEntries(fused.outputs.map((name) => [name, results[name]!.data as Float32Array]));
  } finally {
    await session.release();
  }
}

/** The fused model as shipped fails on the CPU provider; rewritten, it runs: returns its outputs and the rewrite's report. */
async function rewriteAndRun(fused: Fused, failsWith = /Could not find an implementation|Failed to find kernel/): Promise<{ outputs: Record<string, Float32Array>; report: CpuRewriteReport; model: OnnxTypes.ModelProto }> {
  await expect(run(oneNodeModel(fused), fused)).rejects.toThrow(failsWith);
  const model = oneNodeModel(fused);
  const report = rewriteForCpu(model);
  expect(report).toEqual({ rewritten: { [`com.microsoft.${fused.op}`]: 1 }, unsupported: {} });
  return { outputs: await run(model, fused), report, model };
}

function expectClose(actual: Float32Array, expected: Float32Array, tolerance = 1e-4): void {
  expect(actual.length).toBe(expected.length);
  let worst = 0;
  for (let i = 0; i < actual.length; i++) worst = Math.max(worst, Math.abs(actual[i]! - expected[i]!) / Math.max(1, Math.abs(expected[i]!)));
  expect(worst).toBeLessThan(tolerance);
}

const opTypes = (model: OnnxTypes.ModelProto) => new Set((model.graph!.node ?? []).map((n) => `${n.domain || 'ai.onnx'}.${n.opType}`));

describe('GroupNorm and SkipGroupNorm', () => {
  it.each([
    ['NHWC with SiLU (the diffusion optimiser’s form)', true, true, 1e-5],
    ['NHWC without activation', true, false, 1e-6],
    ['NCHW', false, true, 1e-5],
  ])('GroupNorm %s', async (_, channelsLast, silu, epsilon) => {
    // Offset inputs: a wrong mean or variance would show.
    const x = randomTensor(channelsLast ? [2, 5, 3, 8] : [2, 8, 5, 3], 2, 0.7);
    const gamma = randomTensor([8], 0.5, 1);
    const beta = randomTensor([8], 0.3);
    const fused: Fused = {
      op: 'GroupNorm',
      inputs: [['x', x], ['gamma', gamma], ['beta', beta]],
      outputs: ['y'],
      attributes: [int('groups', 4), int('activation', silu ? 1 : 0), float('epsilon', epsilon), ...(channelsLast ? [] : [int('channels_last', 0)])],
    };
    const { outputs, model } = await rewriteAndRun(fused);
    expect(opTypes(model)).not.toContain('com.microsoft.GroupNorm');
    expect(opTypes(model)).toContain('ai.onnx.InstanceNormalization');
    expectClose(outputs.y!, reference.groupNorm(x, gamma.data, beta.data, { groups: 4, epsilon, silu, channelsLast }));
  });

  it('GroupNorm takes epsilon 1e-5 when the attribute is absent', async () => {
    // A tiny variance makes epsilon matter.
    const x = randomTensor([1, 2, 2, 4], 1e-3);
    const gamma = randomTensor([4], 0.5, 1);
    const beta = randomTensor([4], 0.3);
    const fused: Fused = { op: 'GroupNorm', inputs: [['x', x], ['gamma', gamma], ['beta', beta]], outputs: ['y'], attributes: [int('groups', 2), int('activation', 0)] };
    const { outputs } = await rewriteAndRun(fused);
    expectClose(outputs.y!, reference.groupNorm(x, gamma.data, beta.data, { groups: 2, epsilon: 1e-5, silu: false, channelsLast: true }));
  });

  it.each([
    ['a full-size skip, a bias and the sum output', [2, 4, 3, 8], true, true],
    ['an (N, 1, 1, C) skip', [2, 1, 1, 8], false, false],
    ['an (N, C) skip and a bias', [2, 8], true, false],
  ])('SkipGroupNorm with %s', async (_, skipDims, withBias, withSum) => {
    const x = randomTensor([2, 4, 3, 8], 2, 0.3);
    const gamma = randomTensor([8], 0.5, 1);
    const beta = randomTensor([8], 0.3);
    const skip = randomTensor(skipDims, 1.5);
    const bias = withBias ? randomTensor([8], 0.5) : undefined;
    const fused: Fused = {
      op: 'SkipGroupNorm',
      inputs: [['x', x], ['gamma', gamma], ['beta', beta], ['skip', skip], bias ? ['bias', bias] : null],
      outputs: withSum ? ['y', 's'] : ['y'],
      attributes: [int('groups', 2), int('activation', 1), float('epsilon', 1e-5)],
    };
    const { outputs } = await rewriteAndRun(fused);
    const expected = reference.skipGroupNorm(x, gamma.data, beta.data, skip, bias?.data, { groups: 2, epsilon: 1e-5, silu: true, channelsLast: true });
    expectClose(outputs.y!, expected.y);
    if (withSum) expectClose(outputs.s!, expected.s, 1e-6);
  });

  it('SkipGroupNorm channels first with an (N, C) skip', async () => {
    const x = randomTensor([2, 8, 3, 3], 2);
    const gamma = randomTensor([8], 0.5, 1);
    const beta = randomTensor([8], 0.3);
    const skip = randomTensor([2, 8]);
    const bias = randomTensor([8], 0.5);
    const fused: Fused = {
      op: 'SkipGroupNorm',
      inputs: [['x', x], ['gamma', gamma], ['beta', beta], ['skip', skip], ['bias', bias]],
      outputs: ['y', 's'],
      attributes: [int('groups', 4), int('activation', 0), int('channels_last', 0)],
    };
    const { outputs } = await rewriteAndRun(fused);
    const expected = reference.skipGroupNorm(x, gamma.data, beta.data, skip, bias.data, { groups: 4, epsilon: 1e-5, silu: false, channelsLast: false });
    expectClose(outputs.y!, expected.y);
    expectClose(outputs.s!, expected.s, 1e-6);
  });
});

describe('BiasSplitGelu, BiasAdd, GemmFastGelu', () => {
  it('BiasSplitGelu: left half times the exact GELU of the right half', async () => {
    const x = randomTensor([2, 5, 12], 2);
    const bias = randomTensor([12], 0.5);
    const fused: Fused = { op: 'BiasSplitGelu', inputs: [['x', x], ['bias', bias]], outputs: ['y'] };
    const { outputs, model } = await rewriteAndRun(fused);
    expect(opTypes(model)).toContain('ai.onnx.Erf');
    expectClose(outputs.y!, reference.biasSplitGelu(x, bias.data), 1e-5);
  });

  it('BiasAdd: input plus bias plus skip', async () => {
    const x = randomTensor([2, 6, 4]);
    const bias = randomTensor([4]);
    const skip = randomTensor([2, 6, 4]);
    const fused: Fused = { op: 'BiasAdd', inputs: [['x', x], ['bias', bias], ['skip', skip]], outputs: ['y'] };
    const { outputs } = await rewriteAndRun(fused);
    expectClose(outputs.y!, reference.biasAdd(x, bias.data, skip.data), 1e-6);
  });

  it.each([true, false])('GemmFastGelu (bias %s): FastGelu of the product', async (withBias) => {
    const x = randomTensor([5, 6]);
    const w = randomTensor([6, 7], 0.5);
    const bias = withBias ? randomTensor([7], 0.3) : undefined;
    const fused: Fused = { op: 'GemmFastGelu', inputs: [['x', x], ['w', w], bias ? ['bias', bias] : null], outputs: ['y'] };
    const { outputs, model } = await rewriteAndRun(fused);
    // FastGelu itself has a CPU kernel and stays.
    expect(opTypes(model)).toEqual(new Set(['ai.onnx.MatMul', 'com.microsoft.FastGelu']));
    expectClose(outputs.y!, reference.gemmFastGelu(x, w, bias?.data), 1e-4);
  });
});

describe('NhwcConv', () => {
  it.each([
    ['3x3, padded', { pads: [1, 1, 1, 1], strides: [1, 1], dilations: [1, 1], group: 1 }, [1, 5, 6, 3], [4, 3, 3, 3]],
    ['stride 2 with (0, 1, 0, 1) padding, as the VAE encoder downsamples', { pads: [0, 0, 1, 1], strides: [2, 2], dilations: [1, 1], group: 1 }, [2, 6, 6, 4], [4, 3, 3, 4]],
    ['grouped and dilated', { pads: [2, 2, 2, 2], strides: [1, 1], dilations: [2, 2], group: 2 }, [1, 5, 5, 4], [6, 3, 3, 2]],
  ] as const)('%s: NHWC input, [M, kH, kW, C] weights, NHWC output', async (_, options, xDims, wDims) => {
    const x = randomTensor([...xDims]);
    const w = randomTensor([...wDims], 0.5);
    const b = randomTensor([wDims[0]], 0.2);
    const fused: Fused = {
      op: 'NhwcConv',
      inputs: [['x', x], ['w', w], ['b', b]],
      outputs: ['y'],
      attributes: [ints('kernel_shape', [wDims[1], wDims[2]]), ints('pads', [...options.pads]), ints('strides', [...options.strides]), ints('dilations', [...options.dilations]), int('group', options.group)],
    };
    const { outputs, model } = await rewriteAndRun(fused);
    expect(opTypes(model)).toContain('ai.onnx.Conv');
    const pads = [options.pads[0], options.pads[1], options.pads[2], options.pads[3]] as [number, number, number, number];
    expectClose(outputs.y!, reference.nhwcConv(x, w, b.data, { pads, strides: [...options.strides], dilations: [...options.dilations], group: options.group }).data, 1e-5);
  });
});

describe('MultiHeadAttention with packed inputs', () => {
  const ranAtRun = /not implemented for CPU/;

  it('packed QKV [B, S, N, 3, H] is unpacked for the CPU kernel', async () => {
    const packed = randomTensor([2, 5, 2, 3, 4]);
    const fused: Fused = { op: 'MultiHeadAttention', inputs: [['qkv', packed]], outputs: ['out'], attributes: [int('num_heads', 2)] };
    const { outputs, model } = await rewriteAndRun(fused, ranAtRun);
    expect(opTypes(model)).toContain('com.microsoft.MultiHeadAttention');
    expectClose(outputs.out!, reference.multiHeadAttention(reference.unpack(packed, 0), reference.unpack(packed, 1), reference.unpack(packed, 2), 2), 1e-5);
  });

  it('packed KV [B, L, N, 2, H] with a separate query and a bias', async () => {
    const q = randomTensor([2, 3, 8]);
    const kv = randomTensor([2, 6, 2, 2, 4]);
    const bias = randomTensor([24], 0.3);
    const fused: Fused = { op: 'MultiHeadAttention', inputs: [['q', q], ['kv', kv], null, ['bias', bias]], outputs: ['out'], attributes: [int('num_heads', 2)] };
    const { outputs } = await rewriteAndRun(fused, ranAtRun);
    expectClose(outputs.out!, reference.multiHeadAttention(q, reference.unpack(kv, 0), reference.unpack(kv, 1), 2, bias.data), 1e-5);
  });

  it('separate query, key and value are left alone (the CPU kernel runs them)', () => {
    const model = oneNodeModel({ op: 'MultiHeadAttention', inputs: [['q', randomTensor([1, 2, 4])], ['k', randomTensor([1, 3, 4])], ['v', randomTensor([1, 3, 4])]], outputs: ['out'], attributes: [int('num_heads', 2)] });
    const before = encode(model);
    expect(rewriteForCpu(model)).toEqual({ rewritten: {}, unsupported: {} });
    expect(encode(model)).toEqual(before);
  });
});

describe('graphs as a whole', () => {
  it('rewrites inside subgraphs (an If branch reading an outer value)', async () => {
    const x = randomTensor([1, 3, 3, 4], 2);
    const gamma = randomTensor([4], 0.5, 1);
    const beta = randomTensor([4], 0.3);
    const branch = (node: OnnxTypes.INodeProto): OnnxTypes.IGraphProto => ({ name: 'branch', node: [node], output: [valueInfo(node.output![0]!)] });
    const groupNorm = { opType: 'GroupNorm', domain: 'com.microsoft', input: ['x', 'gamma', 'beta'], output: ['normed'], attribute: [int('groups', 2), int('activation', 1)] };
    const model = onnx.ModelProto.decode(
      onnx.ModelProto.encode({
        irVersion: 8,
        opsetImport: [{ domain: '', version: 17 }, { domain: 'com.microsoft', version: 1 }],
        graph: {
          name: 'outer',
          node: [{ opType: 'If', input: ['cond'], output: ['y'], attribute: [{ name: 'then_branch', type: AttrType.GRAPH, g: branch(groupNorm) }, { name: 'else_branch', type: AttrType.GRAPH, g: branch({ opType: 'Identity', input: ['x'], output: ['same'] }) }] }],
          input: [{ name: 'cond', type: { tensorType: { elemType: DataType.BOOL, shape: { dim: [] } } } }, valueInfo('x', x.dims), valueInfo('gamma', [4]), valueInfo('beta', [4])],
          output: [valueInfo('y')],
        },
      }).finish(),
    );
    expect(rewriteForCpu(model)).toEqual({ rewritten: { 'com.microsoft.GroupNorm': 1 }, unsupported: {} });
    const session = await ort.InferenceSession.create(encode(model), { executionProviders: ['cpu'] });
    const result = await session.run({
      cond: new ort.Tensor('bool', [true], []),
      x: new ort.Tensor('float32', x.data, x.dims),
      gamma: new ort.Tensor('float32', gamma.data, [4]),
      beta: new ort.Tensor('float32', beta.data, [4]),
    });
    await session.release();
    expectClose(result.y!.data as Float32Array, reference.groupNorm(x, gamma.data, beta.data, { groups: 2, epsilon: 1e-5, silu: true, channelsLast: true }));
  });

  it('reports, by operator, what the CPU cannot run and nothing rewrites, and leaves the rest alone', () => {
    const model = onnx.ModelProto.decode(
      onnx.ModelProto.encode({
        irVersion: 8,
        opsetImport: [{ domain: '', version: 17 }, { domain: 'com.microsoft', version: 1 }, { domain: 'ai.onnx.contrib', version: 1 }],
        graph: {
          name: 'mixed',
          node: [
            { opType: 'PackedAttention', domain: 'com.microsoft', input: ['a'], output: ['b'] },
            { opType: 'PackedAttention', domain: 'com.microsoft', input: ['b'], output: ['c'] },
            { opType: 'StringRegexReplace', domain: 'ai.onnx.contrib', input: ['c'], output: ['d'] },
            { opType: 'NhwcConv', domain: 'com.microsoft', input: ['d', 'w'], output: ['e'], attribute: [ints('kernel_shape', [3, 3, 3])] },
            { opType: 'SkipLayerNormalization', domain: 'com.microsoft', input: ['e', 'e', 'g'], output: ['f'] },
            { opType: 'Relu', input: ['f'], output: ['g2'] },
          ],
        },
      }).finish(),
    );
    expect(rewriteForCpu(model)).toEqual({
      rewritten: {},
      unsupported: { 'com.microsoft.PackedAttention': 2, 'ai.onnx.contrib.StringRegexReplace': 1, 'com.microsoft.NhwcConv (3-D kernel)': 1 },
    });
    expect((model.graph!.node ?? []).map((n) => n.opType)).toEqual(['PackedAttention', 'PackedAttention', 'StringRegexReplace', 'NhwcConv', 'SkipLayerNormalization', 'Relu']);
  });

  it('gives new values names unused anywhere in the model', () => {
    const x = randomTensor([1, 2, 2, 4]);
    const fused: Fused = { op: 'GroupNorm', inputs: [['x', x], ['GroupNorm/cpu_0', randomTensor([4])], ['GroupNorm/cpu_1', randomTensor([4])]], outputs: ['y'], attributes: [int('groups', 2), int('activation', 0)] };
    const model = oneNodeModel(fused);
    rewriteForCpu(model);
    const outputs = (model.graph!.node ?? []).flatMap((n) => n.output ?? []);
    expect(new Set(outputs).size).toBe(outputs.length);
    expect(outputs).not.toContain('GroupNorm/cpu_0');
    expect(outputs).not.toContain('GroupNorm/cpu_1');
    expect(outputs).toContain('y');
  });
});

describe('the CPU kernel table', () => {
  it('agrees with onnxruntime-node for the fused operators diffusion and CLIP exports carry', async () => {
    // Operators the probe (scripts/probe-cpu-ops.ts) found to have kernels; the rewritten ones are checked above to have none.
    for (const op of ['Attention', 'MultiHeadAttention', 'SkipLayerNormalization', 'Gelu', 'BiasGelu', 'FastGelu', 'QuickGelu', 'FusedConv']) expect(runsOnCpu('com.microsoft', op), op).toBe(true);
    for (const op of ['GroupNorm', 'SkipGroupNorm', 'BiasSplitGelu', 'BiasAdd', 'NhwcConv', 'GemmFastGelu', 'PackedAttention', 'PackedMultiHeadAttention', 'BiasSoftmax']) expect(runsOnCpu('com.microsoft', op), op).toBe(false);
    expect(runsOnCpu('', 'InstanceNormalization')).toBe(true);
    expect(runsOnCpu('ai.onnx.contrib', 'Anything')).toBe(false);
    // One of the kept ones, made and run on the real runtime.
    const q = randomTensor([1, 2, 4]);
    const fused: Fused = { op: 'MultiHeadAttention', inputs: [['q', q], ['k', randomTensor([1, 3, 4])], ['v', randomTensor([1, 3, 4])]], outputs: ['out'], attributes: [int('num_heads', 2)] };
    await expect(run(oneNodeModel(fused), fused)).resolves.toHaveProperty('out');
  });
});
