import { readdir, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';

/**
 * Where a UNet step's time goes: one run of the UNet under ORT's profiler
 * (same graph optimisation and thread count as lserve's sessions), node
 * times summed by operator type.
 */

export interface OpShare {
  op: string;
  seconds: number;
  share: number;
}

export async function profileUnet(graph: string, threads: number, crossDim: number, latent = 64): Promise<{ total: number; ops: OpShare[] }> {
  const prefix = path.join(os.tmpdir(), `lserve-unet-profile-${process.pid}`);
  const session = await ort.InferenceSession.create(graph, {
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    logSeverityLevel: 3,
    enableProfiling: true,
    profileFilePrefix: prefix,
    extra: { session: { intra_op: { allow_spinning: '0' } } },
  });
  const sampleType = session.inputMetadata.find((m) => m.name === 'sample');
  const half = sampleType?.isTensor && sampleType.type === 'float16';
  const tensor = (dims: number[]) => {
    const n = dims.reduce((a, b) => a * b, 1);
    return half ? new ort.Tensor('float16', new Uint16Array(n).fill(0x3800), dims) : new ort.Tensor('float32', new Float32Array(n).fill(0.5), dims);
  };
  await session.run({ sample: tensor([1, 4, latent, latent]), timestep: new ort.Tensor('int64', new BigInt64Array([999n]), [1]), encoder_hidden_states: tensor([1, 77, crossDim]) });
  session.endProfiling();
  await session.release();
  // ORT names the trace <prefix>_<date>.json.
  const name = (await readdir(path.dirname(prefix))).find((n) => n.startsWith(path.basename(prefix)) && n.endsWith('.json'));
  if (!name) throw new Error(`ORT wrote no profile next to ${prefix}`);
  const file = path.join(path.dirname(prefix), name);
  const events = JSON.parse(await readFile(file, 'utf8')) as Array<{ cat: string; name: string; dur: number; args?: { op_name?: string } }>;
  await rm(file, { force: true });
  const byOp = new Map<string, number>();
  let total = 0;
  for (const e of events) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
    const op = e.args?.op_name ?? 'unknown';
    byOp.set(op, (byOp.get(op) ?? 0) + e.dur / 1e6);
    total += e.dur / 1e6;
  }
  const ops = [...byOp].map(([op, seconds]) => ({ op, seconds, share: seconds / total })).sort((a, b) => b.seconds - a.seconds);
  return { total, ops };
}
