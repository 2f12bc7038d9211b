import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { int8Plan, Unquantizable } from '../../src/runtimes/onnx/int8/candidates.js';
import { activationScale, quantizeWeight, writeInt8Graph } from '../../src/runtimes/onnx/int8/qdq.js';
import { choosePlan } from '../../src/runtimes/onnx/int8/search.js';
import { addRanges, removeRangeGraph, writeRangeGraph, type Range } from '../../src/runtimes/onnx/int8/ranges.js';
import { OnnxSession } from '../../src/runtimes/onnx/session.js';
import { convertToFp32 } from '../../src/runtimes/onnx/fp32.js';
import { floatsToHalves } from '../../src/runtimes/onnx/float16.js';
import { DataType, floats, model, node, onnx, valueInfo } from '../fixtures/onnx/build.js';

/**
 * The static int8 quantizer (runtimes/onnx/int8): weights per channel,
 * activations from calibrated ranges, the QDQ graph ONNX Runtime fuses into
 * QLinearConv / QLinearMatMul, and what it leaves alone.
 */

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-int8-'));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Deterministic values in (−1, 1). */
function values(count: number, seed: number): Float32Array {
  let s = seed >>> 0;
  return Float32Array.from({ length: count }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s / 2 ** 32) * 2 - 1;
  });
}

/**
 * x [1, 8, 16, 16] → Conv 3×3 (16 ch, bias) → Relu → Conv 1×1 (8 ch) → y1 (a
 * graph output), and the Relu's output flattened → MatMul [16·16·16, 10] →
 * y2; plus an activation·activation MatMul (y1ᵀ-ish product) that stays fp32.
 */
function convMatMulGraph(opset = 17): Uint8Array {
  return model(
    {
      name: 'int8-test',
      input: [valueInfo('x', [1, 8, 16, 16])],
      output: [valueInfo('y1', [1, 8, 16, 16]), valueInfo('y2', [1, 10]), valueInfo('y3', [1, 8, 16, 16])],
      initializer: [
        floats('conv1.weight', [16, 8, 3, 3], values(16 * 8 * 9, 1).map((v) => v * 0.3)),
        floats('conv1.bias', [16], values(16, 2).map((v) => v * 0.1)),
        floats('conv2.weight', [8, 16, 1, 1], values(8 * 16, 3).map((v) => v * 0.4)),
        floats('fc.weight', [16 * 16 * 16, 10], values(16 * 16 * 16 * 10, 4).map((v) => v * 0.02)),
        { name: 'flat', dims: [2], dataType: DataType.INT64, int64Data: [1, -1] },
      ],
      node: [
        node('Conv', ['x', 'conv1.weight', 'conv1.bias'], ['h'], [{ name: 'pads', type: onnx.AttributeProto.AttributeType.INTS, ints: [1, 1, 1, 1] }]),
        node('Relu', ['h'], ['r']),
        node('Conv', ['r', 'conv2.weight'], ['y1']),
        node('Reshape', ['r', 'flat'], ['f']),
        node('MatMul', ['f', 'fc.weight'], ['y2']),
        node('MatMul', ['y1', 'y1'], ['y3'], [], 'activation_product'),
      ],
    },
    { opset },
  );
}

async function run(file: string | Uint8Array, x: Float32Array): Promise<Record<string, Float32Array>> {
  const session = await ort.InferenceSession.create(file as string, { intraOpNumThreads: 1, graphOptimizationLevel: 'all' });
  const out = await session.run({ x: new ort.Tensor('float32', x.slice(), [1, 8, 16, 16]) });
  return Object.fromEntries(Object.entries(out).map(([k, v]) => [k, v.data as Float32Array]));
}

const relativeError = (a: Float32Array, b: Float32Array) => Math.sqrt(a.reduce((s, v, i) => s + (v - b[i]!) ** 2, 0) / a.reduce((s, v) => s + v * v, 0));

describe('weights and activations', () => {
  it('quantizes weights per output channel, symmetric, each within half a step', () => {
    const w = Float32Array.from([1, -2, 0.5, 0.25, 10, -10, 0, 0]); // [2 rows, 4 cols]
    const byRow = quantizeWeight(w, [2, 4], 0);
    expect([...byRow.scales]).toEqual([Math.fround(2 / 127), Math.fround(10 / 127)]);
    const byColumn = quantizeWeight(w, [2, 4], 1);
    expect([...byColumn.scales].map((s) => s * 127)).toEqual([10, 10, 0.5, 0.25].map((v) => expect.closeTo(v, 5)));
    for (const [q, scales, axisOf] of [[byRow.q, byRow.scales, (i: number) => Math.floor(i / 4)], [byColumn.q, byColumn.scales, (i: number) => i % 4]] as const) {
      w.forEach((v, i) => expect(Math.abs(q[i]! * scales[axisOf(i)]! - v)).toBeLessThanOrEqual(scales[axisOf(i)]! / 2 + 1e-7));
      expect(Math.max(...[...q].map(Math.abs))).toBe(127);
    }
    // An all-zero channel gets scale 1 (not 0: no division by zero downstream).
    expect([...quantizeWeight(new Float32Array(4), [2, 2], 0).scales]).toEqual([1, 1]);
  });

  it('gives activations a uint8 scale that covers the range and holds zero exactly', () => {
    for (const range of [{ min: -1.5, max: 3 }, { min: 0.5, max: 2 }, { min: -4, max: -1 }]) {
      const { scale, zeroPoint } = activationScale(range);
      expect(zeroPoint).toBeGreaterThanOrEqual(0);
      expect(zeroPoint).toBeLessThanOrEqual(255);
      expect((0 - zeroPoint) * scale).toBeLessThanOrEqual(Math.min(0, range.min) + 1e-9);
      expect((255 - zeroPoint) * scale).toBeGreaterThanOrEqual(Math.max(0, range.max) - scale);
    }
    expect(activationScale({ min: 0, max: 0 })).toEqual({ scale: 1, zeroPoint: 0 });
  });
});

describe('the QDQ graph', () => {
  it('measures ranges inside the graph, rewrites Conv and weight MatMuls, and stays close to fp32', async () => {
    const source = path.join(dir, 'fp32', 'model.onnx');
    await mkdir(path.dirname(source), { recursive: true });
    await writeFile(source, convMatMulGraph());
    const plan = int8Plan(onnx.ModelProto.decode(await readFile(source)));
    expect(plan.nodes.map((n) => n.opType)).toEqual(['Conv', 'Conv', 'MatMul']);
    // The Conv whose output is y1 (a graph output) quantizes its input only; the activation product is not a candidate.
    expect(plan.activations.sort()).toEqual(['f', 'h', 'r', 'x'].sort());

    const { file, outputs } = await writeRangeGraph(source, plan.activations, path.join(dir, 'work'));
    const session = await OnnxSession.create(file, { threads: 1 });
    const ranges = new Map<string, Range>();
    for (const seed of [11, 12]) {
      addRanges(ranges, await session.runWith({ x: { type: 'float32', data: values(8 * 256, seed), dims: [1, 8, 16, 16] } }, { fetch: outputs }));
    }
    await session.release();
    await removeRangeGraph(file);
    expect(existsSync(path.dirname(file))).toBe(false);
    // The Relu's output is never negative: its measured range says so.
    expect(ranges.get('r')!.min).toBe(0);
    expect(ranges.get('x')!.min).toBeLessThan(-0.9);

    const target = path.join(dir, 'int8', 'model.onnx');
    const { nodes } = await writeInt8Graph(source, target, ranges);
    expect(nodes).toBe(3);
    const written = onnx.ModelProto.decode(await readFile(target));
    const ops = written.graph!.node!.map((n) => n.opType);
    expect(ops.filter((o) => o === 'QuantizeLinear')).toHaveLength(4);
    const initializers = new Map(written.graph!.initializer!.map((t) => [t.name!, t]));
    for (const weight of ['conv1.weight', 'conv2.weight', 'fc.weight']) {
      expect(initializers.has(weight)).toBe(false);
      expect(initializers.get(`${weight}::int8`)?.dataType).toBe(DataType.INT8);
    }
    expect(initializers.get('conv1.bias::int32')?.dataType).toBe(DataType.INT32);
    expect((await readdir(path.dirname(target))).sort()).toEqual(['model.onnx', 'model.onnx.data']);

    const x = values(8 * 256, 13);
    const [reference, quantized] = [await run(source, x), await run(target, x)];
    for (const output of ['y1', 'y2', 'y3']) expect(relativeError(reference[output]!, quantized[output]!)).toBeLessThan(0.03);
    // Not a copy of fp32: the products did run on 8-bit values.
    expect(relativeError(reference.y2!, quantized.y2!)).toBeGreaterThan(1e-5);
  });

  it('reads weights from an fp32 conversion\'s external data (linked, not copied) and leaves them untouched', async () => {
    const fp16 = path.join(dir, 'ext16.onnx');
    const half = onnx.ModelProto.decode(convMatMulGraph());
    for (const t of half.graph!.initializer!) {
      if (t.dataType !== DataType.FLOAT) continue;
      t.rawData = new Uint8Array(floatsToHalves(t.floatData as number[]).buffer);
      t.floatData = [];
      t.dataType = DataType.FLOAT16;
    }
    for (const info of [...half.graph!.input!, ...half.graph!.output!]) info.type!.tensorType!.elemType = DataType.FLOAT16;
    await writeFile(fp16, onnx.ModelProto.encode(half).finish());
    const source = path.join(dir, 'ext32', 'model.onnx');
    await convertToFp32(fp16, source);
    const before = await readFile(`${source}.data`);
    const plan = int8Plan(onnx.ModelProto.decode(await readFile(source)));
    const { file, outputs } = await writeRangeGraph(source, plan.activations, path.join(dir, 'work-ext'));
    const session = await OnnxSession.create(file, { threads: 1 });
    const ranges = new Map<string, Range>();
    addRanges(ranges, await session.runWith({ x: { type: 'float32', data: values(8 * 256, 21), dims: [1, 8, 16, 16] } }, { fetch: outputs }));
    await session.release();
    await removeRangeGraph(file);
    const target = path.join(dir, 'ext8', 'model.onnx');
    await writeInt8Graph(source, target, ranges);
    expect(Buffer.compare(await readFile(`${source}.data`), before)).toBe(0);
    const x = values(8 * 256, 22);
    expect(relativeError((await run(source, x)).y2!, (await run(target, x)).y2!)).toBeLessThan(0.03);
  });

  it('leaves the readers of an input named fp32 alone, through a Cast', () => {
    const graph = onnx.ModelProto.decode(convMatMulGraph());
    const conv = graph.graph!.node![0]!;
    graph.graph!.node!.unshift(onnx.NodeProto.create({ name: 'cast', opType: 'Cast', input: ['x'], output: ['x32'], attribute: [{ name: 'to', type: onnx.AttributeProto.AttributeType.INT, i: DataType.FLOAT }] }));
    conv.input![0] = 'x32';
    const plan = int8Plan(onnx.ModelProto.decode(onnx.ModelProto.encode(graph).finish()), { floatInputs: ['x'] });
    expect(int8Plan(onnx.ModelProto.decode(convMatMulGraph()), { ops: ['Conv'] }).nodes.map((n) => n.opType)).toEqual(['Conv', 'Conv']);
    const mixed = int8Plan(onnx.ModelProto.decode(convMatMulGraph()), { ops: ['MatMul'], weightOps: ['Conv'] });
    expect(mixed.nodes.map((n) => n.opType)).toEqual(['Conv', 'Conv', 'MatMul']);
    expect([...mixed.weightsOnly].map((n) => n.opType)).toEqual(['Conv', 'Conv']);
    expect(mixed.activations.sort()).toEqual(['f']);
    // Its reader keeps 8-bit weights, with fp32 activations.
    expect(plan.nodes.map((n) => n.input[1])).toEqual(['conv1.weight', 'conv2.weight', 'fc.weight']);
    expect([...plan.weightsOnly].map((n) => n.input[1])).toEqual(['conv1.weight']);
    expect(plan.activations).not.toContain('x32');
  });

  it('refuses graphs it cannot quantize, saying why', async () => {
    expect(() => int8Plan(onnx.ModelProto.decode(convMatMulGraph(12)))).toThrow(Unquantizable);
    expect(() => int8Plan(onnx.ModelProto.decode(convMatMulGraph(12)))).toThrow(/opset 12 is older than 13/);
    const none = model({ name: 'none', input: [valueInfo('x', [2])], output: [valueInfo('y', [2])], node: [node('Relu', ['x'], ['y'])] });
    expect(() => int8Plan(onnx.ModelProto.decode(none))).toThrow(/no convolution or matrix product/);
    const source = path.join(dir, 'fp32', 'model.onnx');
    await expect(writeInt8Graph(source, path.join(dir, 'missing', 'model.onnx'), new Map([['x', { min: -1, max: 1 }]]))).rejects.toThrow(/no calibrated range/);
    expect(existsSync(path.join(dir, 'missing', 'model.onnx'))).toBe(false);
  });
});

/** x [1, 8, 16, 16] → `depth` × (Conv 3×3 with bias → Relu) → y: rounding errors that add up layer by layer. */
function convChain(depth: number): Uint8Array {
  const layers = Array.from({ length: depth }, (_, i) => i);
  return model({
    name: 'int8-chain',
    input: [valueInfo('x', [1, 8, 16, 16])],
    output: [valueInfo('y', [1, 8, 16, 16])],
    initializer: layers.flatMap((i) => [floats(`conv${i}.weight`, [8, 8, 3, 3], values(8 * 8 * 9, 100 + i).map((v) => v * 0.3)), floats(`conv${i}.bias`, [8], values(8, 200 + i).map((v) => v * 0.1))]),
    node: layers.flatMap((i) => [
      node('Conv', [i ? `r${i - 1}` : 'x', `conv${i}.weight`, `conv${i}.bias`], [`h${i}`], [{ name: 'pads', type: onnx.AttributeProto.AttributeType.INTS, ints: [1, 1, 1, 1] }], `conv${i}`),
      node('Relu', [`h${i}`], [i === depth - 1 ? 'y' : `r${i}`]),
    ]),
  });
}

describe('the plan search', () => {
  it('adds 8-bit activations layer by layer while the summed harm stays within the bound, and leaves the chosen graph in place', async () => {
    const source = path.join(dir, 'chain', 'model.onnx');
    await mkdir(path.dirname(source), { recursive: true });
    await writeFile(source, convChain(6));
    const { file, outputs } = await writeRangeGraph(source, int8Plan(onnx.ModelProto.decode(await readFile(source))).activations, path.join(dir, 'work-chain'));
    const calibration = await OnnxSession.create(file, { threads: 1 });
    const ranges = new Map<string, Range>();
    for (const seed of [31, 32]) addRanges(ranges, await calibration.runWith({ x: { type: 'float32', data: values(8 * 256, seed), dims: [1, 8, 16, 16] } }, { fetch: outputs }));
    await calibration.release();
    await removeRangeGraph(file);

    const x = values(8 * 256, 33);
    const reference = (await run(source, x)).y!;
    const errorOf = async (session: OnnxSession) => {
      const out = await session.runWith({ x: { type: 'float32', data: x.slice(), dims: [1, 8, 16, 16] } }, { fetch: ['y'] });
      return relativeError(reference, out.y!.data as Float32Array);
    };
    const ladder = [{ ops: ['Conv' as const] }, { ops: [], weightOps: ['Conv' as const] }];
    const target = path.join(dir, 'chain8', 'model.onnx');
    // Every layer's rounding first, to set a bound between weights alone and 8-bit activations everywhere.
    const measure = async (plan: (typeof ladder)[number]) => {
      await writeInt8Graph(source, target, ranges, plan);
      const session = await OnnxSession.create(target, { threads: 1 });
      try {
        return await errorOf(session);
      } finally {
        await session.release();
      }
    };
    const [all, weights] = [await measure(ladder[0]!), await measure(ladder[1]!)];
    expect(all).toBeGreaterThan(weights * 2);
    const bound = Math.sqrt((all ** 2 + weights ** 2) / 2);
    const probed: number[] = [];
    const probe = async (session: OnnxSession) => {
      const error = await errorOf(session);
      probed.push(error);
      return { error, accepted: error <= bound, loss: error ** 2, reason: `${error} over ${bound}` };
    };
    const { chosen, missed } = await choosePlan(source, target, ranges, ladder, probe, bound ** 2);
    expect(missed).toEqual([expect.stringMatching(/^Conv in int8: /)]);
    expect(chosen).toMatchObject({ name: 'weights', added: { op: 'Conv', of: 6 }, verdict: { accepted: true } });
    const layers = chosen!.added!.layers;
    expect(layers).toBeGreaterThan(0);
    expect(layers).toBeLessThan(6);
    // The ladder's two plans, a probe for each layer on its own, then the chosen runs together.
    expect(probed.length).toBeGreaterThanOrEqual(2 + 6);
    expect(chosen!.verdict.error).toBeGreaterThan(weights);
    // The graph left in place is the chosen one, whatever was probed last: its layers read 8-bit activations, the others fp32.
    const written = onnx.ModelProto.decode(await readFile(target));
    const convs = written.graph!.node!.filter((n) => n.opType === 'Conv');
    expect(convs.filter((n) => n.input![0]!.endsWith('::dequantized')).map((n) => n.name).sort()).toEqual([...chosen!.plan.activationNodes!].sort());
    expect(convs.filter((n) => n.input![0]!.endsWith('::dequantized'))).toHaveLength(layers);
    const again = await OnnxSession.create(target, { threads: 1 });
    expect(await errorOf(again)).toBe(chosen!.verdict.error);
    await again.release();
    // A bound only the least harmful layer fits under: that layer's graph is put back in place after the other layers' probes.
    const singles = probed.slice(2, 8);
    const best = singles.indexOf(Math.min(...singles));
    expect(best).toBeLessThan(5);
    const tight = [...singles].sort((a, b) => a - b)[1]! * 0.999;
    const one = await choosePlan(source, target, ranges, ladder, async (session) => {
      const error = await errorOf(session);
      return { error, accepted: error <= tight, loss: error ** 2, reason: 'over' };
    }, tight ** 2);
    expect(one.chosen).toMatchObject({ added: { layers: 1 }, plan: { activationNodes: new Set([`conv${best}`]) } });
    const single = onnx.ModelProto.decode(await readFile(target)).graph!.node!.filter((n) => n.opType === 'Conv' && n.input![0]!.endsWith('::dequantized'));
    expect(single.map((n) => n.name)).toEqual([`conv${best}`]);

    // One data file for every plan: each weight written once.
    expect((await readdir(path.dirname(target))).sort()).toEqual(['model.onnx', 'model.onnx.data']);
    expect(one.chosen!.bytes).toBeLessThanOrEqual((await readFile(target)).length + (await readFile(`${target}.data`)).length);
  });

  it('removes the target when no plan holds', async () => {
    const source = path.join(dir, 'chain', 'model.onnx');
    const target = path.join(dir, 'chain-none', 'model.onnx');
    const ranges = new Map<string, Range>();
    const { chosen, missed } = await choosePlan(source, target, ranges, [{ ops: [], weightOps: ['Conv'] }], async () => ({ accepted: false, loss: 1, reason: 'never' }), 0.5);
    expect(chosen).toBeUndefined();
    expect(missed).toEqual(['weights in int8: never']);
    expect(existsSync(path.dirname(target))).toBe(false);
  });
});
