/**
 * Which fused `com.microsoft` operators can onnxruntime-node's CPU execution
 * provider run? For each candidate this builds a one-node model (onnx-proto),
 * creates a CPU session and, when that works, runs it once on random inputs:
 * some kernels exist but refuse an input layout at run time (packed QKV in
 * MultiHeadAttention). The answer is what src/runtimes/onnx/cpu-operators.ts
 * hard-codes; rerun this after upgrading onnxruntime-node:
 *
 *   npx tsx scripts/probe-cpu-ops.ts
 *
 * Prints one line per candidate and element type: `kernel`, `no kernel`
 * (session creation: "Could not find an implementation" / "Failed to find
 * kernel"), `fails at run`, or another session error, with ORT's message.
 * (float16 `kernel` may mean ORT casts around a float32 kernel.)
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import ort from 'onnxruntime-node';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { floatsToHalves } from '../src/runtimes/onnx/float16.js';

const { onnx } = onnxProto;
const DataType = onnx.TensorProto.DataType;
const AttrType = onnx.AttributeProto.AttributeType;

type Elem = 'float' | 'int32' | 'int64';
interface Input {
  dims: number[];
  type?: Elem;
  /** Fixed values (int inputs such as offsets), otherwise random. */
  values?: number[];
}
interface Candidate {
  op: string;
  label?: string;
  inputs: Array<Input | null>;
  outputs?: number;
  attributes?: OnnxTypes.IAttributeProto[];
}

const int = (name: string, i: number): OnnxTypes.IAttributeProto => ({ name, type: AttrType.INT, i });
const ints = (name: string, v: number[]): OnnxTypes.IAttributeProto => ({ name, type: AttrType.INTS, ints: v });
const float = (name: string, f: number): OnnxTypes.IAttributeProto => ({ name, type: AttrType.FLOAT, f });
const str = (name: string, s: string): OnnxTypes.IAttributeProto => ({ name, type: AttrType.STRING, s: new TextEncoder().encode(s) });
const f = (...dims: number[]): Input => ({ dims });

/** The fused operators ONNX Runtime's transformer optimizer writes into diffusion, CLIP and BERT-like exports. */
const CANDIDATES: Candidate[] = [
  { op: 'GroupNorm', label: 'NHWC, SiLU', inputs: [f(1, 4, 4, 8), f(8), f(8)], attributes: [int('groups', 2), int('activation', 1), float('epsilon', 1e-5)] },
  { op: 'GroupNorm', label: 'NCHW', inputs: [f(1, 8, 4, 4), f(8), f(8)], attributes: [int('groups', 2), int('activation', 0), int('channels_last', 0)] },
  { op: 'SkipGroupNorm', inputs: [f(1, 4, 4, 8), f(8), f(8), f(1, 4, 4, 8), f(8)], outputs: 2, attributes: [int('groups', 2), int('activation', 1)] },
  { op: 'BiasSplitGelu', inputs: [f(1, 4, 16), f(16)] },
  { op: 'BiasAdd', inputs: [f(1, 4, 8), f(8), f(1, 4, 8)] },
  { op: 'NhwcConv', inputs: [f(1, 5, 5, 3), f(4, 3, 3, 3), f(4)], attributes: [ints('kernel_shape', [3, 3]), ints('pads', [1, 1, 1, 1])] },
  { op: 'NhwcFusedConv', inputs: [f(1, 5, 5, 3), f(4, 3, 3, 3), f(4)], attributes: [ints('kernel_shape', [3, 3]), ints('pads', [1, 1, 1, 1]), str('activation', 'Relu')] },
  { op: 'FusedConv', inputs: [f(1, 3, 5, 5), f(4, 3, 3, 3), f(4)], attributes: [ints('kernel_shape', [3, 3]), ints('pads', [1, 1, 1, 1]), str('activation', 'Relu')] },
  { op: 'MultiHeadAttention', label: 'q, k, v', inputs: [f(1, 4, 8), f(1, 6, 8), f(1, 6, 8)], attributes: [int('num_heads', 2)] },
  { op: 'MultiHeadAttention', label: 'q, k, v, bias', inputs: [f(1, 4, 8), f(1, 6, 8), f(1, 6, 8), f(24)], attributes: [int('num_heads', 2)] },
  { op: 'MultiHeadAttention', label: 'packed QKV', inputs: [f(1, 4, 2, 3, 4)], attributes: [int('num_heads', 2)] },
  { op: 'MultiHeadAttention', label: 'packed KV', inputs: [f(1, 4, 8), f(1, 6, 2, 2, 4)], attributes: [int('num_heads', 2)] },
  { op: 'Attention', inputs: [f(1, 4, 8), f(8, 24), f(24)], attributes: [int('num_heads', 2)] },
  { op: 'Attention', label: 'causal (CLIP)', inputs: [f(1, 4, 8), f(8, 24), f(24)], attributes: [int('num_heads', 2), int('unidirectional', 1)] },
  { op: 'PackedAttention', inputs: [f(4, 8), f(8, 24), f(24), { dims: [1, 4], type: 'int32', values: [0, 1, 2, 3] }, { dims: [2], type: 'int32', values: [0, 4] }], attributes: [int('num_heads', 2)] },
  { op: 'PackedMultiHeadAttention', inputs: [f(4, 8), f(4, 8), f(4, 8), null, { dims: [1, 4], type: 'int32', values: [0, 1, 2, 3] }, { dims: [2], type: 'int32', values: [0, 4] }], attributes: [int('num_heads', 2)] },
  { op: 'SkipLayerNormalization', inputs: [f(1, 4, 8), f(1, 4, 8), f(8), f(8), f(8)] },
  { op: 'SkipSimplifiedLayerNormalization', inputs: [f(1, 4, 8), f(1, 4, 8), f(8)] },
  { op: 'QuickGelu', inputs: [f(1, 4, 8)], attributes: [float('alpha', 1.702)] },
  { op: 'FastGelu', inputs: [f(1, 4, 8), f(8)] },
  { op: 'Gelu', inputs: [f(1, 4, 8)] },
  { op: 'BiasGelu', inputs: [f(1, 4, 8), f(8)] },
  { op: 'BiasSoftmax', inputs: [f(1, 2, 4, 4), f(1, 1, 4, 4)], attributes: [int('axis', 3), int('is_inner_broadcast', 0)] },
  { op: 'GemmFastGelu', inputs: [f(4, 8), f(8, 16), f(16)] },
  { op: 'FusedMatMul', inputs: [f(4, 8), f(8, 6)], attributes: [float('alpha', 0.5)] },
  { op: 'TransposeMatMul', inputs: [f(4, 8), f(8, 6)] },
];

function tensorType(type: Elem, floatType: number): number {
  return type === 'int32' ? DataType.INT32 : type === 'int64' ? DataType.INT64 : floatType;
}

function oneNodeModel(candidate: Candidate, floatType: number): Uint8Array {
  const inputNames = candidate.inputs.map((input, i) => (input ? `in${i}` : ''));
  const outputNames = Array.from({ length: candidate.outputs ?? 1 }, (_, i) => `out${i}`);
  return onnx.ModelProto.encode({
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }, { domain: 'com.microsoft', version: 1 }],
    graph: {
      name: 'probe',
      node: [{ opType: candidate.op, domain: 'com.microsoft', input: inputNames, output: outputNames, attribute: candidate.attributes ?? [], name: 'probe' }],
      input: candidate.inputs.flatMap((input, i) => (input ? [{ name: `in${i}`, type: { tensorType: { elemType: tensorType(input.type ?? 'float', floatType), shape: { dim: input.dims.map((d) => ({ dimValue: d })) } } } }] : [])),
      // Output shapes are left to ORT's inference: only the element type is declared.
      output: outputNames.map((name) => ({ name, type: { tensorType: { elemType: floatType } } })),
    },
  }).finish();
}

function feeds(candidate: Candidate, half: boolean): Record<string, ort.Tensor> {
  const out: Record<string, ort.Tensor> = {};
  candidate.inputs.forEach((input, i) => {
    if (!input) return;
    const count = input.dims.reduce((a, b) => a * b, 1);
    const values = input.values ?? Array.from({ length: count }, () => Math.random() * 2 - 1);
    if (input.type === 'int32') out[`in${i}`] = new ort.Tensor('int32', Int32Array.from(values), input.dims);
    else if (input.type === 'int64') out[`in${i}`] = new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), input.dims);
    else if (half) out[`in${i}`] = new ort.Tensor('float16', floatsToHalves(values), input.dims);
    else out[`in${i}`] = new ort.Tensor('float32', Float32Array.from(values), input.dims);
  });
  return out;
}

async function probe(dir: string, candidate: Candidate, half: boolean): Promise<string> {
  const file = path.join(dir, `${candidate.op}-${half ? 16 : 32}.onnx`);
  await writeFile(file, oneNodeModel(candidate, half ? DataType.FLOAT16 : DataType.FLOAT));
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(file, { executionProviders: ['cpu'], graphOptimizationLevel: 'disabled', logSeverityLevel: 4 });
  } catch (error) {
    const message = (error as Error).message.split('\n')[0]!;
    return /Could not find an implementation|Failed to find kernel/.test(message) ? 'no kernel' : `session error: ${message}`;
  }
  try {
    await session.run(feeds(candidate, half));
    return 'kernel';
  } catch (error) {
    return `fails at run: ${(error as Error).message.split('\n')[0]}`;
  } finally {
    await session.release();
  }
}

async function main(): Promise<void> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'lserve-probe-'));
  try {
    process.stdout.write(`onnxruntime-node ${ort.env.versions.common}, CPU execution provider\n`);
    for (const candidate of CANDIDATES) {
      const name = `com.microsoft.${candidate.op}${candidate.label ? ` (${candidate.label})` : ''}`;
      for (const half of [false, true]) process.stdout.write(`${name.padEnd(52)} ${half ? 'float16' : 'float32'}  ${await probe(dir, candidate, half)}\n`);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
