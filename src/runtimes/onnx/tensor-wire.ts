/**
 * How tensors and requests cross between an OnnxSession (session.ts) and its
 * worker thread (session-worker.ts): a tensor as its buffer (transferred, not
 * copied), the view's place in it and its shape.
 */

export type TensorType = 'float32' | 'float16' | 'int64' | 'int32' | 'bool' | 'uint8';

/** The typed array each element type travels in (float16 as raw bits, bool as bytes). */
export const VIEWS = { float32: Float32Array, float16: Uint16Array, int64: BigInt64Array, int32: Int32Array, bool: Uint8Array, uint8: Uint8Array } as const;

export interface WireTensor {
  type: TensorType;
  buffer: ArrayBuffer;
  byteOffset: number;
  length: number;
  dims: number[];
}

export type Shape = ReadonlyArray<number | string | undefined>;

/** What `create` answers: the graph's inputs and outputs. */
export interface Described {
  inputNames: string[];
  outputNames: string[];
  inputShapes: Shape[];
  outputShapes: Shape[];
  /** Element type of each input and output as ORT names it ('float16', 'int64', …); '' for non-tensors. */
  inputTypes: string[];
  outputTypes: string[];
}

/** What a run sends back: its fetched outputs. */
export interface RunResult {
  outputs: Record<string, WireTensor>;
}

/** The requests a session worker serves (WorkerCalls adds the `id` its reply carries). */
export type SessionRequest =
  /** Creates the session from the file at `path`, or from `model`'s bytes when given (`path` then names it); answered with Described. */
  | { type: 'create'; path: string; model?: Uint8Array; options: Record<string, unknown> }
  /** One run (session.ts's RunOptions, spelled out); answered with RunResult. */
  | {
      type: 'run';
      feeds: Record<string, WireTensor | { kept: string }>;
      fetch: string[];
      keep: Record<string, string>;
      keepInputs: Record<string, string>;
      rows: Record<string, readonly number[]>;
    }
  /** Forgets the kept tensors whose names start with `prefix`. */
  | { type: 'drop'; prefix: string }
  /** Releases the session (the worker's last request). */
  | { type: 'release' };
