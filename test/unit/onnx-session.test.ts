import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OnnxSession } from '../../src/runtimes/onnx/session.js';
import { DataType, intAttr, model, node, valueInfo } from '../fixtures/onnx/build.js';

/**
 * The worker-thread session on a real ONNX Runtime and a graph shaped like a
 * decoder step: named inputs of several types, several outputs, and a cache
 * that grows by concatenation and stays in the worker between runs.
 */

let dir: string;
let file: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-onnx-session-'));
  file = path.join(dir, 'step.onnx');
  // present = Concat(past, x + Cast(ids)) along axis 1; total = ReduceSum(present) (keepdims 0); flag = Not(use_cache)
  await writeFile(
    file,
    model({
      name: 'step',
      input: [
        valueInfo('x', [1, 'n']),
        valueInfo('ids', [1, 'n'], DataType.INT64),
        valueInfo('use_cache', [1], DataType.BOOL),
        valueInfo('past', [1, 'past_n']),
      ],
      output: [valueInfo('present', [1, 'total_n']), valueInfo('total', []), valueInfo('flag', [1], DataType.BOOL)],
      node: [
        node('Cast', ['ids'], ['ids_f'], [intAttr('to', DataType.FLOAT)]),
        node('Add', ['x', 'ids_f'], ['step']),
        node('Concat', ['past', 'step'], ['present'], [intAttr('axis', 1)]),
        node('ReduceSum', ['present'], ['total'], [intAttr('keepdims', 0)]),
        node('Not', ['use_cache'], ['flag']),
      ],
    }),
  );
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('OnnxSession.runWith', () => {
  it('feeds typed inputs, fetches several outputs, and keeps a cache in the worker between runs', async () => {
    const session = await OnnxSession.create(file, { threads: 1 });
    try {
      expect(session.inputNames).toEqual(['x', 'ids', 'use_cache', 'past']);
      expect(session.outputNames).toEqual(['present', 'total', 'flag']);
      const first = await session.runWith(
        {
          x: { type: 'float32', data: Float32Array.of(0.5, 1.5), dims: [1, 2] },
          ids: { type: 'int64', data: BigInt64Array.of(1n, 2n), dims: [1, 2] },
          use_cache: { type: 'bool', data: Uint8Array.of(0), dims: [1] },
          past: { type: 'float32', data: new Float32Array(0), dims: [1, 0] },
        },
        { fetch: ['present', 'total', 'flag'], keep: { present: 'cache' }, keepInputs: { use_cache: 'flag-input' } },
      );
      expect(Array.from(first.present!.data as Float32Array)).toEqual([1.5, 3.5]);
      expect(first.present!.dims).toEqual([1, 2]);
      expect((first.total!.data as Float32Array)[0]).toBe(5);
      expect(first.flag).toMatchObject({ type: 'bool', data: Uint8Array.of(1) });

      // The cache never crosses threads again: it is fed back by name.
      const second = await session.runWith(
        {
          x: { type: 'float32', data: Float32Array.of(10), dims: [1, 1] },
          ids: { type: 'int64', data: BigInt64Array.of(0n), dims: [1, 1] },
          use_cache: { kept: 'flag-input' },
          past: { kept: 'cache' },
        },
        { fetch: ['total', 'flag'], keep: { present: 'cache' } },
      );
      expect((second.total!.data as Float32Array)[0]).toBe(15);
      // The kept input was the first run's use_cache (false).
      expect(second.flag!.data).toEqual(Uint8Array.of(1));
      const third = await session.runWith(
        { x: { type: 'float32', data: Float32Array.of(1), dims: [1, 1] }, ids: { type: 'int64', data: BigInt64Array.of(0n), dims: [1, 1] }, use_cache: { type: 'bool', data: Uint8Array.of(1), dims: [1] }, past: { kept: 'cache' } },
        { fetch: ['present'], rows: { present: [3, 0] } },
      );
      // Only the rows asked for, in that order: [1, 4] → [1, 2].
      expect(Array.from(third.present!.data as Float32Array)).toEqual([1, 1.5]);
      expect(third.present!.dims).toEqual([1, 2]);

      await session.dropKept();
      await expect(
        session.runWith(
          { x: { type: 'float32', data: Float32Array.of(1), dims: [1, 1] }, ids: { type: 'int64', data: BigInt64Array.of(0n), dims: [1, 1] }, use_cache: { type: 'bool', data: Uint8Array.of(1), dims: [1] }, past: { kept: 'cache' } },
          { fetch: ['total'] },
        ),
      ).rejects.toThrow(/no kept tensor named cache/);
      await expect(session.runWith({}, { fetch: ['nope'] })).rejects.toThrow();
    } finally {
      await session.release();
    }
  });

  it('createAll releases what it created when one model fails to load', async () => {
    const broken = path.join(dir, 'broken.onnx');
    await writeFile(broken, 'not a model');
    await expect(OnnxSession.createAll({ good: file, bad: broken, none: undefined }, { threads: 1 })).rejects.toThrow(/broken\.onnx/);
    const both = await OnnxSession.createAll({ a: file, b: undefined }, { threads: 1 });
    expect(both.a?.inputNames).toHaveLength(4);
    expect(both.b).toBeUndefined();
    await both.a!.release();
  });
});
