import type { OnnxSession, Tensor, TensorType } from '../../runtimes/onnx/session.js';
import { floatsToHalves, halvesToFloats } from '../../runtimes/onnx/float16.js';

/**
 * Feeding and reading graphs whose float tensors are float32 in one export
 * and float16 in another: the element type is read from the session at load,
 * and values cross as float32 on this side.
 */

export type FloatType = 'float32' | 'float16';

/** The element type a session declares for `name`; `fallback` when the graph does not say. */
export function floatTypeOf(session: OnnxSession, name: string): FloatType {
  const type = session.describe(name)?.type;
  if (type === 'float16') return 'float16';
  if (type === 'float32' || type === 'float' || type === '' || type === undefined) return 'float32';
  throw new Error(`${session.path}: '${name}' is ${type}; expected float32 or float16`);
}

/** A float tensor of `type` (float32 data is sent as is: its buffer is transferred). */
export function floatTensor(type: FloatType, data: Float32Array, dims: readonly number[]): Tensor {
  return type === 'float16' ? { type, data: floatsToHalves(data), dims } : { type, data, dims };
}

/** An output's values as float32, whatever its type. */
export function asFloats(tensor: Tensor | undefined, what: string): Float32Array {
  if (!tensor) throw new Error(`${what}: no output`);
  if (tensor.type === 'float32') return tensor.data as Float32Array;
  if (tensor.type === 'float16') return halvesToFloats(tensor.data as Uint16Array);
  throw new Error(`${what}: expected a float output, got ${tensor.type}`);
}

/** A one-element timestep tensor in whatever integer or float type the UNet declares. */
export function timestepTensor(type: string, t: number): Tensor {
  const kind = (type || 'int64') as TensorType;
  switch (kind) {
    case 'int64':
      return { type: 'int64', data: new BigInt64Array([BigInt(Math.round(t))]), dims: [1] };
    case 'int32':
      return { type: 'int32', data: new Int32Array([Math.round(t)]), dims: [1] };
    case 'float32':
      return { type: 'float32', data: new Float32Array([t]), dims: [1] };
    case 'float16':
      return { type: 'float16', data: floatsToHalves([t]), dims: [1] };
    default:
      throw new Error(`unsupported timestep type ${type}`);
  }
}
