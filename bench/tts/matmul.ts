import { createRequire } from 'node:module';
import type * as Ort from 'onnxruntime-node';
import { ortSessionOptions } from '../../src/runtimes/onnx/session.js';
import { onnx, valueInfo } from '../../test/fixtures/onnx/build.js';
import { Graph } from '../../test/fixtures/onnx/qwen3-tts/graph.js';
import { VARIANTS, type Variant } from './model.js';

/**
 * ORT's own matrix-multiply speed on this machine, for reference: a chain of
 * `count` linear layers alternating [1024 → 3072] and [3072 → 1024] (the
 * talker's MLP shapes; 100 M weights at the default 32, 400 MB in fp32, far
 * more than the caches hold), with M = 1 row (a talker step) or 16 rows (a
 * code-predictor call), as plain MatMul or 4-bit MatMulNBits.
 */

const ort = createRequire(import.meta.url)('onnxruntime-node') as typeof Ort;

export interface MatMulRate {
  variant: Variant;
  rows: number;
  threads: number;
  ms: number;
  gflops: number;
  /** Weight bytes read per ms → GB/s. */
  gbps: number;
}

function chainModel(variant: Variant, count: number): { bytes: Uint8Array; params: number; weightBytes: number } {
  const int4 = VARIANTS[variant];
  const g = new Graph(7, int4);
  let x = 'x';
  let params = 0;
  for (let i = 0; i < count; i++) {
    const [k, n] = i % 2 === 0 ? [1024, 3072] : [3072, 1024];
    g.weight(`w${i}`, [k, n], 1 / Math.sqrt(k));
    x = g.linear(x, `w${i}`);
    params += k * n;
  }
  g.output(x, 'y');
  const bytes = onnx.ModelProto.encode({
    irVersion: 8,
    producerName: 'lserve-bench',
    opsetImport: [{ domain: '', version: 17 }, ...(g.contrib ? [{ domain: 'com.microsoft', version: 1 }] : [])],
    graph: { name: 'chain', node: g.nodes, initializer: g.initializers, input: [valueInfo('x', ['rows', 1024])], output: [valueInfo('y', ['rows', 1024])] },
  }).finish();
  const weightBytes = params * (int4 ? 0.5 + 4 / int4.blockSize : 4);
  return { bytes, params, weightBytes };
}

export async function matmulRates(variants: Variant[], threadCounts: number[], rowCounts: number[], count = 32): Promise<MatMulRate[]> {
  const rates: MatMulRate[] = [];
  for (const variant of variants) {
    const { bytes, params, weightBytes } = chainModel(variant, count);
    for (const threads of threadCounts) {
      const session = await ort.InferenceSession.create(bytes, ortSessionOptions({ threads }));
      for (const rows of rowCounts) {
        const feeds = { x: new ort.Tensor('float32', new Float32Array(rows * 1024).fill(0.5), [rows, 1024]) };
        await session.run(feeds);
        const times: number[] = [];
        for (let i = 0; i < 5; i++) {
          const started = performance.now();
          await session.run(feeds);
          times.push(performance.now() - started);
        }
        times.sort((a, b) => a - b);
        const ms = times[2]!;
        rates.push({ variant, rows, threads, ms, gflops: (2 * rows * params) / ms / 1e6, gbps: weightBytes / ms / 1e6 });
      }
      await session.release();
    }
  }
  return rates;
}
