import { floatsToHalves, halvesToFloats } from './float16.js';

/**
 * Float tensors at the boundary of a graph whose inputs and outputs may be
 * fp32 or fp16 (fp16 and some int4 exports keep half-precision I/O): the
 * caller computes in fp32 and converts only where a value crosses into or
 * out of the graph. ONNX Runtime takes and returns float16 data as raw
 * 16-bit patterns (a Uint16Array) where the platform has no Float16Array.
 */

export type FloatType = 'float32' | 'float16';

/** The element type a graph declares for a float value; throws for any other (bfloat16, an integer type). */
export function floatType(type: string, what: string): FloatType {
  if (type === 'float32' || type === 'float16') return type;
  throw new Error(`${what} is ${type}, not float32 or float16`);
}

/** `values` as a graph of `type` takes them: as they are for float32, as half-precision bit patterns for float16. */
export function toFloatType(values: Float32Array, type: FloatType): Float32Array | Uint16Array {
  return type === 'float32' ? values : floatsToHalves(values);
}

/**
 * Elements [from, to) of an output's data as fp32: a view of float32 data
 * (copy it to keep it past the next run), a new array for float16 data.
 */
export function readFloats(type: string, data: unknown, from = 0, to?: number): Float32Array {
  if (type === 'float32') return (data as Float32Array).subarray(from, to);
  if (type !== 'float16') throw new Error(`expected a float output, got ${type}`);
  if (data instanceof Uint16Array) return halvesToFloats(data.subarray(from, to));
  // A platform Float16Array holds numbers already.
  return Float32Array.from((data as ArrayLike<number> & { subarray(a: number, b?: number): ArrayLike<number> }).subarray(from, to));
}

/** Float arrays one after another in a new one (a graph's outputs over several runs, blocks of samples). */
export function concatFloats(parts: readonly Float32Array[]): Float32Array {
  const all = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  return all;
}
