import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import type { Linear, Tensor } from './predictor-weights.js';

/** Graph building for the graphs rebuilt from an export's weights (predictor-graph.ts, decoder-graph.ts). */

const { onnx } = onnxProto;
const DataType = onnx.TensorProto.DataType;
const AttrType = onnx.AttributeProto.AttributeType;

export const int = (name: string, i: number): OnnxTypes.IAttributeProto => ({ name, type: AttrType.INT, i });
export const ints = (name: string, values: number[]): OnnxTypes.IAttributeProto => ({ name, type: AttrType.INTS, ints: values });
export const float = (name: string, f: number): OnnxTypes.IAttributeProto => ({ name, type: AttrType.FLOAT, f });

export function tensorInfo(name: string, elemType: number, dims: Array<number | string>): OnnxTypes.IValueInfoProto {
  return { name, type: { tensorType: { elemType, shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) } } } };
}

/** Emits nodes and constants under names no export uses (`prefix` + op and count). */
export class Emitter {
  readonly nodes: OnnxTypes.INodeProto[] = [];
  readonly initializers: Tensor[] = [];
  private readonly added = new Set<string>();
  private static count = 0;

  constructor(
    private readonly prefix: string,
    readonly accuracyLevel?: number,
  ) {}

  op(opType: string, inputs: string[], attribute: OnnxTypes.IAttributeProto[] = [], domain = ''): string {
    const out = `${this.prefix}${opType}_${Emitter.count++}`;
    this.nodes.push({ opType, domain, input: inputs, output: [out], attribute, name: out });
    return out;
  }

  constant(t: Tensor): string {
    if (!this.added.has(t.name!)) {
      this.added.add(t.name!);
      this.initializers.push(t);
    }
    return t.name!;
  }

  /** A float constant of the export, cast to fp32 where it is fp16 (ONNX Runtime folds the cast at load). */
  float(t: Tensor): string {
    const name = this.constant(t);
    return t.dataType === DataType.FLOAT16 ? this.op('Cast', [name], [int('to', DataType.FLOAT)]) : name;
  }

  i64(values: number[], dims: number[] = [values.length]): string {
    const name = `${this.prefix}i64_${Emitter.count++}`;
    this.initializers.push({ name, dims, dataType: DataType.INT64, int64Data: values });
    return name;
  }

  f32(values: ArrayLike<number>, dims: number[]): string {
    const name = `${this.prefix}f32_${Emitter.count++}`;
    this.initializers.push({ name, dims, dataType: DataType.FLOAT, floatData: Array.from(values) });
    return name;
  }

  linear(x: string, linear: Linear): string {
    let y: string;
    if (linear.op === 'MatMul') {
      y = this.op('MatMul', [x, this.float(linear.weight)]);
    } else {
      const inputs = linear.inputs.map((t) => (t ? this.constant(t) : ''));
      while (inputs.at(-1) === '') inputs.pop();
      const attributes = linear.attributes.filter((a) => a.name !== 'accuracy_level' || this.accuracyLevel === undefined);
      if (this.accuracyLevel !== undefined) attributes.push(int('accuracy_level', this.accuracyLevel));
      y = this.op('MatMulNBits', [x, ...inputs], attributes, 'com.microsoft');
    }
    return linear.bias ? this.op('Add', [y, this.float(linear.bias)]) : y;
  }

  rmsNorm(x: string, weight: Tensor, eps: number): string {
    return this.op('SimplifiedLayerNormalization', [x, this.float(weight)], [int('axis', -1), float('epsilon', eps), int('stash_type', 1)]);
  }
}

