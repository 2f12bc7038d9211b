/**
 * Checks lserve's rewrite of fused com.microsoft operators against ONNX
 * Runtime's own optimiser: the synthetic SD-Turbo's fp32 graphs are fused
 * by it (ort_fused_sd.py, Python with onnxruntime), rewritten by
 * rewriteFileForCpu, and run beside the unfused originals on the same
 * inputs; prints what was rewritten and the largest output difference.
 *
 *   npx tsx scripts/golden/compare-ort-fused.ts [python]
 */
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ort from 'onnxruntime-node';
import { rewriteFileForCpu } from '../../src/runtimes/onnx/cpu-rewrite-file.js';
import { TINY_SD, writeSdTurboFolder } from '../../test/fixtures/onnx/sd-turbo/index.js';

const wave = (n: number, scale = 0.8) => Float32Array.from({ length: n }, (_, i) => Math.sin(i * 12.9898) * scale);

function inputs(role: string): Record<string, ort.Tensor> {
  switch (role) {
    case 'unet':
      return {
        sample: new ort.Tensor('float32', wave(4 * 8 * 8), [1, 4, 8, 8]),
        timestep: new ort.Tensor('int64', BigInt64Array.from([999n]), [1]),
        encoder_hidden_states: new ort.Tensor('float32', wave(77 * TINY_SD.text.width), [1, 77, TINY_SD.text.width]),
      };
    case 'vae_decoder':
      return { latent_sample: new ort.Tensor('float32', wave(4 * 8 * 8), [1, 4, 8, 8]) };
    case 'vae_encoder':
      return { sample: new ort.Tensor('float32', wave(3 * 64 * 64), [1, 3, 64, 64]) };
    default:
      return { input_ids: new ort.Tensor('int32', Int32Array.from({ length: 77 }, (_, i) => (i * 7919) % 49408), [1, 77]) };
  }
}

async function output(graph: string, role: string): Promise<Float32Array> {
  const session = await ort.InferenceSession.create(graph, { executionProviders: ['cpu'] });
  const result = await session.run(inputs(role));
  await session.release();
  return result[session.outputNames[0]!]!.data as Float32Array;
}

async function main(python: string): Promise<void> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-ort-fused-'));
  try {
    const standard = await writeSdTurboFolder(path.join(dir, 'standard'), TINY_SD, 'float32');
    const fused = path.join(dir, 'fused');
    await mkdir(fused);
    const script = fileURLToPath(new URL('ort_fused_sd.py', import.meta.url));
    process.stdout.write(execFileSync(python, [script, standard, fused], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }));
    for (const role of ['text_encoder', 'unet', 'vae_decoder', 'vae_encoder']) {
      const rewritten = await rewriteFileForCpu(path.join(fused, `${role}.onnx`), path.join(dir, 'rewritten', `${role}.onnx`));
      const [a, b] = [await output(path.join(standard, role, 'model.onnx'), role), await output(rewritten.graph, role)];
      let worst = 0;
      let largest = 0;
      for (let i = 0; i < a.length; i++) {
        worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
        largest = Math.max(largest, Math.abs(a[i]!));
      }
      process.stdout.write(`${role}: rewritten ${JSON.stringify(rewritten.rewritten)}, left ${JSON.stringify(rewritten.unsupported)}; max |original − fused+rewritten| ${worst.toExponential(2)} (outputs up to ${largest.toFixed(3)})\n`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main(process.argv[2] ?? 'python3');
