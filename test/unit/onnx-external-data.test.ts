import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toHalf } from '../../src/runtimes/onnx/float16.js';
import { externalDataFiles } from '../../src/runtimes/onnx/external-data.js';
import { convertToFp32 } from '../../src/runtimes/onnx/fp32.js';
import { OnnxSession } from '../../src/runtimes/onnx/session.js';
import { DataType, model, node, onnx, valueInfo } from '../fixtures/onnx/build.js';
import { withExternalData } from '../fixtures/onnx/external-data.js';

/**
 * Graphs that keep their weights in an external data file, as optimum's and
 * diffusers' exports of a Stable Diffusion UNet do: the files a graph names
 * are found without reading its weights, missing or truncated ones and
 * locations outside the graph's folder are refused by name, ONNX Runtime
 * reads them from the graph's own folder, and the fp16 → fp32 conversion
 * reads weights from them.
 */

let dir: string;
const SIZE = 32;
const weights = Float32Array.from({ length: SIZE * SIZE }, (_, i) => Math.sin(i) / 4);
const bias = Float32Array.from({ length: SIZE }, (_, i) => i / SIZE);
const input = Float32Array.from({ length: SIZE }, (_, i) => (i % 5) - 2);

/** y = x · W + b with W [32, 32] (4 KiB: external) and b [32] (128 bytes: stays inline), in fp32 or fp16 weights. */
function linear(type: 'float32' | 'float16'): Uint8Array {
  const raw = (values: Float32Array) => (type === 'float32' ? new Uint8Array(values.buffer.slice(0)) : new Uint8Array(Uint16Array.from(values, toHalf).buffer));
  const elem = type === 'float32' ? DataType.FLOAT : DataType.FLOAT16;
  const nodes = [node('MatMul', ['x', 'W'], ['xw']), node('Add', ['xw', 'b'], ['y'])];
  return model({
    name: 'linear',
    input: [valueInfo('x', [1, SIZE], elem)],
    output: [valueInfo('y', [1, SIZE], elem)],
    initializer: [
      { name: 'W', dims: [SIZE, SIZE], dataType: elem, rawData: raw(weights) },
      { name: 'b', dims: [SIZE], dataType: elem, rawData: raw(bias) },
    ],
    node: nodes,
  });
}

/** The reference: x · W + b in float64. */
function expected(): number[] {
  return Array.from({ length: SIZE }, (_, j) => bias[j]! + input.reduce((sum, x, i) => sum + x * weights[i * SIZE + j]!, 0));
}

/** Writes `graph` with its weights in `location` into a folder of its own; returns the graph's path. */
async function exported(name: string, graph: Uint8Array, location = 'model.onnx_data'): Promise<string> {
  const folder = path.join(dir, name, 'unet');
  await mkdir(folder, { recursive: true });
  const split = withExternalData(graph, location);
  await writeFile(path.join(folder, 'model.onnx'), split.graph);
  if (!location.includes('..')) await writeFile(path.join(folder, location), split.data);
  return path.join(folder, 'model.onnx');
}

/** The graph's output for `input`, run by ONNX Runtime from the file. */
async function outputOf(graph: string): Promise<ArrayLike<number>> {
  const session = await OnnxSession.create(graph, { threads: 1 });
  try {
    return (await session.run(input.slice(), [1, SIZE])).data;
  } finally {
    await session.release();
  }
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-external-data-'));
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('externalDataFiles', () => {
  it('names the files a graph keeps its weights in, with the bytes it needs of each', async () => {
    const graph = await exported('optimum', linear('float32'));
    expect(await externalDataFiles(graph)).toEqual([{ location: 'model.onnx_data', path: path.join(path.dirname(graph), 'model.onnx_data'), needed: SIZE * SIZE * 4, tensors: 1 }]);
    const diffusers = await exported('diffusers', linear('float32'), 'weights.pb');
    expect((await externalDataFiles(diffusers)).map((f) => f.location)).toEqual(['weights.pb']);
  });

  it('finds none in a graph that keeps its weights inline', async () => {
    const file = path.join(dir, 'inline.onnx');
    await writeFile(file, linear('float32'));
    expect(await externalDataFiles(file)).toEqual([]);
  });

  it('refuses a missing or truncated data file, a location outside the folder, and a file that is not a graph', async () => {
    const missing = await exported('missing', linear('float32'));
    await rm(path.join(path.dirname(missing), 'model.onnx_data'));
    await expect(externalDataFiles(missing)).rejects.toThrow(`${missing} keeps 1 of its tensors in 'model.onnx_data', which is missing beside it`);

    const truncated = await exported('truncated', linear('float32'));
    await truncate(path.join(path.dirname(truncated), 'model.onnx_data'), 100);
    await expect(externalDataFiles(truncated)).rejects.toThrow(/model\.onnx_data is 100 bytes, but .* reads up to byte 4096 of it \(truncated\?\)/);

    const escaping = await exported('escaping', linear('float32'), '../../secret.bin');
    await expect(externalDataFiles(escaping)).rejects.toThrow(/stored in '\.\.\/\.\.\/secret\.bin', outside the graph's folder/);

    const garbage = path.join(dir, 'garbage.onnx');
    await writeFile(garbage, Buffer.from([0x3a, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3]));
    await expect(externalDataFiles(garbage)).rejects.toThrow(`${garbage} is not a readable ONNX graph`);
    await expect(externalDataFiles(path.join(dir, 'none.onnx'))).rejects.toThrow('none.onnx is missing or cannot be read');
  });
});

describe('graphs with external data at run time and at conversion', () => {
  it('ONNX Runtime reads the weights from the graph\'s own folder, whatever the working directory', async () => {
    const out = await outputOf(await exported('run', linear('float32')));
    expected().forEach((value, i) => expect(out[i]).toBeCloseTo(value, 5));
  });

  it('converts an fp16 graph whose weights are external to fp32, reading them from its data file', async () => {
    const graph = await exported('fp16', linear('float16'));
    const target = path.join(dir, 'fp16-converted', 'model.onnx');
    const result = await convertToFp32(graph, target);
    expect(result).toMatchObject({ graph: target, converted: 2 });
    const converted = onnx.ModelProto.decode(await readFile(target));
    expect(converted.graph!.initializer!.map((t) => [t.name, t.dataType])).toEqual([
      ['W', DataType.FLOAT],
      ['b', DataType.FLOAT],
    ]);
    const out = await outputOf(target);
    // The weights went through fp16: agreement to fp16's precision.
    expected().forEach((value, i) => expect(out[i]).toBeCloseTo(value, 2));
  });

  it('leaves an fp32 graph with external data as it is, writing nothing', async () => {
    const graph = await exported('fp32', linear('float32'));
    const target = path.join(dir, 'fp32-converted', 'model.onnx');
    expect(await convertToFp32(graph, target)).toEqual({ graph, converted: 0, bytes: 0 });
    expect(existsSync(path.dirname(target)) ? await readdir(path.dirname(target)) : []).toEqual([]);
  });
});
