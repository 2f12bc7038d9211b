import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { OnnxSession } from '../../src/runtimes/onnx/session.js';
import { DataType } from '../../test/fixtures/onnx/build.js';
import { Graph } from '../../test/fixtures/onnx/sd-turbo/graph.js';

/**
 * This machine's FLOP rate as ONNX Runtime reaches it, through the same
 * session settings lserve uses: one fp32 MatMul of the UNet's most common
 * shape class ([4096, 1024] · [1024, 1024], 8.6 GFLOP), and one 3x3 Conv at
 * the UNet's full latent resolution (320 → 320 channels at 64x64, 7.5 GFLOP).
 * The best of `runs` after a warm-up (shared machines: the best run is the
 * machine's rate, the others include other people's load).
 */

export interface Throughput {
  matmul: number;
  conv: number;
}

async function rate(bytes: Uint8Array, feeds: () => Record<string, { type: 'float32'; data: Float32Array; dims: number[] }>, output: string, flops: number, threads: number, runs: number): Promise<number> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-bench-matmul-'));
  const file = path.join(dir, 'g.onnx');
  await writeFile(file, bytes);
  const session = await OnnxSession.create(file, { threads });
  try {
    await session.runWith(feeds(), { fetch: [output] });
    let best = Infinity;
    for (let i = 0; i < runs; i++) {
      const input = feeds();
      const t = performance.now();
      await session.runWith(input, { fetch: [output] });
      best = Math.min(best, (performance.now() - t) / 1000);
    }
    return flops / best;
  } finally {
    await session.release();
    await rm(dir, { recursive: true, force: true });
  }
}

export async function ortThroughput(threads: number, runs = 10): Promise<Throughput> {
  const mm = new Graph('float32', 1);
  const x = mm.input('x', [4096, 1024], DataType.FLOAT);
  mm.output('y', mm.op1('MatMul', [x, mm.weight('w', [1024, 1024], 0.03)]), [4096, 1024], DataType.FLOAT);
  const matmul = await rate(mm.encode(), () => ({ x: { type: 'float32', data: new Float32Array(4096 * 1024).fill(0.5), dims: [4096, 1024] } }), 'y', 2 * 4096 * 1024 * 1024, threads, runs);

  const cv = new Graph('float32', 2);
  const input = cv.input('x', [1, 320, 64, 64], DataType.FLOAT);
  cv.output('y', cv.conv(input, 'c', 320, 320, 3), [1, 320, 64, 64], DataType.FLOAT);
  const conv = await rate(cv.encode(), () => ({ x: { type: 'float32', data: new Float32Array(320 * 64 * 64).fill(0.5), dims: [1, 320, 64, 64] } }), 'y', 2 * 9 * 320 * 320 * 64 * 64, threads, runs);
  return { matmul, conv };
}
