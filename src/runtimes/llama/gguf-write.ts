import { open } from 'node:fs/promises';
import { toHalf } from '../onnx/float16.js';

/**
 * Writing GGUF v3, llama.cpp's model format (reference: ggml's docs/gguf.md
 * and gguf-py): a header of metadata and a tensor table, then each tensor's
 * data at 32-byte alignment. lserve writes GGUF where it converts another
 * format's weights for llama.cpp (Qwen3-TTS's talker and code predictor);
 * the test suite builds its random-weight models with it.
 */

export enum ValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** ggml tensor types this module can lay out. */
export enum TensorType {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 8,
}

export type Scalar = number | bigint | boolean | string;
export type MetadataValue =
  | { type: Exclude<ValueType, ValueType.ARRAY>; value: Scalar }
  | { type: ValueType.ARRAY; itemType: Exclude<ValueType, ValueType.ARRAY>; value: Scalar[] };

export type Metadata = Map<string, MetadataValue>;

export interface TensorSpec {
  name: string;
  /** ggml order: ne[0] (the contiguous, "input" dimension) first. */
  dims: number[];
  type: TensorType;
}

export const GGUF_MAGIC = 0x46554747; // "GGUF" little-endian
const ALIGNMENT = 32;

/** Values per block and bytes per block of each type (a block of 1 for the float types). */
const LAYOUT: Record<TensorType, { values: number; bytes: number }> = {
  [TensorType.F32]: { values: 1, bytes: 4 },
  [TensorType.F16]: { values: 1, bytes: 2 },
  [TensorType.Q4_0]: { values: 32, bytes: 18 }, // f16 d, 16 bytes of nibbles
  [TensorType.Q4_1]: { values: 32, bytes: 20 }, // f16 d, f16 m, 16 bytes of nibbles
  [TensorType.Q8_0]: { values: 32, bytes: 34 }, // f16 d, 32 int8
};

/** Bytes a tensor of this type and shape occupies. */
export function tensorBytes(spec: TensorSpec): number {
  const n = spec.dims.reduce((a, b) => a * b, 1);
  const { values, bytes } = LAYOUT[spec.type];
  if (spec.dims[0]! % values !== 0) throw new Error(`${spec.name}: ${TensorType[spec.type]} needs ne[0] divisible by ${values}`);
  return (n / values) * bytes;
}

export const alignmentPad = (n: number) => (ALIGNMENT - (n % ALIGNMENT)) % ALIGNMENT;

function encodeScalar(type: ValueType, value: Scalar): Buffer {
  if (type === ValueType.STRING) {
    const bytes = Buffer.from(String(value), 'utf8');
    const out = Buffer.alloc(8 + bytes.length);
    out.writeBigUInt64LE(BigInt(bytes.length));
    bytes.copy(out, 8);
    return out;
  }
  const sizes: Partial<Record<ValueType, number>> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  const b = Buffer.alloc(sizes[type] ?? 0);
  switch (type) {
    case ValueType.UINT8: b.writeUInt8(Number(value)); break;
    case ValueType.INT8: b.writeInt8(Number(value)); break;
    case ValueType.UINT16: b.writeUInt16LE(Number(value)); break;
    case ValueType.INT16: b.writeInt16LE(Number(value)); break;
    case ValueType.UINT32: b.writeUInt32LE(Number(value)); break;
    case ValueType.INT32: b.writeInt32LE(Number(value)); break;
    case ValueType.FLOAT32: b.writeFloatLE(Number(value)); break;
    case ValueType.BOOL: b.writeUInt8(value ? 1 : 0); break;
    case ValueType.UINT64: b.writeBigUInt64LE(BigInt(value)); break;
    case ValueType.INT64: b.writeBigInt64LE(BigInt(value)); break;
    case ValueType.FLOAT64: b.writeDoubleLE(Number(value)); break;
    default: throw new Error(`cannot encode GGUF value type ${type}`);
  }
  return b;
}

const u32 = (v: number) => encodeScalar(ValueType.UINT32, v);
const u64 = (v: number | bigint) => encodeScalar(ValueType.UINT64, v);

/** The header (metadata and tensor table) padded to the data's alignment; tensors follow in order, each padded. */
export function ggufHeader(metadata: Metadata, tensors: readonly TensorSpec[]): Buffer {
  const head: Buffer[] = [u32(GGUF_MAGIC), u32(3), u64(tensors.length), u64(metadata.size)];
  for (const [key, entry] of metadata) {
    head.push(encodeScalar(ValueType.STRING, key), u32(entry.type));
    if (entry.type === ValueType.ARRAY) {
      head.push(u32(entry.itemType), u64(entry.value.length));
      for (const item of entry.value) head.push(encodeScalar(entry.itemType, item));
    } else {
      head.push(encodeScalar(entry.type, entry.value));
    }
  }
  let offset = 0;
  for (const spec of tensors) {
    head.push(encodeScalar(ValueType.STRING, spec.name), u32(spec.dims.length));
    for (const d of spec.dims) head.push(u64(d));
    head.push(u32(spec.type), u64(offset));
    offset += tensorBytes(spec);
    offset += alignmentPad(offset);
  }
  const header = Buffer.concat(head);
  return Buffer.concat([header, Buffer.alloc(alignmentPad(header.length))]);
}

/**
 * Writes a GGUF file, each tensor's bytes asked of `data` in order (so a
 * model of hundreds of MB is never held whole). `data` must give exactly
 * tensorBytes(spec) bytes.
 */
export async function writeGgufFile(file: string, metadata: Metadata, tensors: readonly TensorSpec[], data: (spec: TensorSpec) => Uint8Array | Promise<Uint8Array>): Promise<void> {
  const handle = await open(file, 'w');
  try {
    await handle.write(ggufHeader(metadata, tensors));
    for (const spec of tensors) {
      const bytes = await data(spec);
      const size = tensorBytes(spec);
      if (bytes.byteLength !== size) throw new Error(`${spec.name}: ${bytes.byteLength} bytes given for a tensor of ${size}`);
      await handle.write(bytes);
      const pad = alignmentPad(size);
      if (pad) await handle.write(Buffer.alloc(pad));
    }
  } finally {
    await handle.close();
  }
}

// ---------------------------------------------------------------- values

/** float32 rows → Q8_0 blocks: per 32 values an f16 scale d = max|x| / 127 and int8 round(x / d). */
export function quantizeQ8_0(values: Float32Array): Uint8Array {
  if (values.length % 32 !== 0) throw new Error('Q8_0 needs a multiple of 32 values');
  const out = new Uint8Array((values.length / 32) * 34);
  const view = new DataView(out.buffer);
  for (let block = 0, at = 0; block < values.length; block += 32, at += 34) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(values[block + i]!));
    const d = amax / 127;
    const inverse = d ? 1 / d : 0;
    view.setUint16(at, toHalf(d), true);
    for (let i = 0; i < 32; i++) view.setInt8(at + 2 + i, Math.round(values[block + i]! * inverse));
  }
  return out;
}
