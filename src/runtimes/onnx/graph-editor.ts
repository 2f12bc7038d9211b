import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';

/**
 * Small tools for replacing one node of a decoded ONNX graph by several:
 * reading its attributes, emitting standard operators and constants under
 * names that cannot collide with any already in the model (outer-scope names
 * are visible inside subgraphs, so freshness is model-wide).
 */

const { onnx } = onnxProto;
const AttrType = onnx.AttributeProto.AttributeType;
const DataType = onnx.TensorProto.DataType;

export type Node = OnnxTypes.NodeProto;

export const attr = {
  int: (name: string, i: number) => onnx.AttributeProto.create({ name, type: AttrType.INT, i }),
  ints: (name: string, ints: number[]) => onnx.AttributeProto.create({ name, type: AttrType.INTS, ints }),
  float: (name: string, f: number) => onnx.AttributeProto.create({ name, type: AttrType.FLOAT, f }),
};

export function attribute(node: Node, name: string): OnnxTypes.AttributeProto | undefined {
  return (node.attribute as OnnxTypes.AttributeProto[]).find((a) => a.name === name);
}

export function intAttribute(node: Node, name: string, fallback: number): number {
  const a = attribute(node, name);
  return a ? Number(a.i) : fallback;
}

export function floatAttribute(node: Node, name: string, fallback: number): number {
  const a = attribute(node, name);
  return a ? a.f : fallback;
}

export function intsAttribute(node: Node, name: string): number[] | undefined {
  const a = attribute(node, name);
  return a ? a.ints.map(Number) : undefined;
}

/** An optional input: present when named (ONNX marks a skipped one with ''). */
export function input(node: Node, index: number): string | undefined {
  const name = node.input[index];
  return name ? name : undefined;
}

/** Hands out names unused anywhere in a model. */
export class FreshNames {
  private counter = 0;

  constructor(private readonly taken: Set<string>) {}

  next(base: string): string {
    let name: string;
    do name = `${base}/cpu_${this.counter++}`;
    while (this.taken.has(name));
    this.taken.add(name);
    return name;
  }
}

/** Builds the nodes that stand in for one node (`origin`), in order. */
export class NodeEmitter {
  readonly nodes: Node[] = [];
  private readonly base: string;

  constructor(
    readonly origin: Node,
    private readonly names: FreshNames,
  ) {
    this.base = origin.name || `${origin.opType}_${origin.output[0] ?? ''}`;
  }

  /** A standard-domain node; returns its (fresh) output name. */
  op(opType: string, inputs: ReadonlyArray<string | undefined>, attributes: OnnxTypes.IAttributeProto[] = []): string {
    return this.node(opType, '', inputs, attributes);
  }

  /**
   * A node of any domain (some rewrites keep a com.microsoft operator that
   * does have a CPU kernel, in another form); returns its first output, a
   * fresh name unless `outputs` names them all.
   */
  node(opType: string, domain: string, inputs: ReadonlyArray<string | undefined>, attributes: OnnxTypes.IAttributeProto[] = [], outputs?: string[]): string {
    const output = outputs ?? [this.names.next(this.base)];
    this.nodes.push(onnx.NodeProto.create({ name: this.names.next(this.base), opType, domain, input: inputs.map((i) => i ?? ''), output, attribute: attributes }));
    return output[0]!;
  }

  /** An int64 vector constant (shapes, axes, slice bounds); a scalar when `scalar` is set. */
  int64s(values: number[], scalar = false): string {
    const tensor = onnx.TensorProto.create({ dataType: DataType.INT64, dims: scalar ? [] : [values.length], rawData: new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer) });
    return this.constant(tensor);
  }

  /** A float32 constant (the rewrites run on float32 graphs: after the fp16 → fp32 conversion). */
  floats(values: number[], dims: number[] = [values.length]): string {
    const tensor = onnx.TensorProto.create({ dataType: DataType.FLOAT, dims, rawData: new Uint8Array(Float32Array.from(values).buffer) });
    return this.constant(tensor);
  }

  /**
   * Constants are Constant nodes rather than initializers, so a rewrite reads
   * the same in a main graph, a subgraph or a function body; ONNX Runtime
   * folds them when the session is made.
   */
  private constant(tensor: OnnxTypes.TensorProto): string {
    return this.op('Constant', [], [onnx.AttributeProto.create({ name: 'value', type: AttrType.TENSOR, t: tensor })]);
  }

  /** Gives the value `value` the name `name` (an output of the replaced node): every use among the emitted nodes follows. */
  rename(value: string, name: string): void {
    for (const node of this.nodes) {
      node.output = node.output.map((o) => (o === value ? name : o));
      node.input = node.input.map((i) => (i === value ? name : i));
    }
  }
}

/** How one fused operator becomes operators the CPU provider runs. */
export interface Decomposition {
  /** Why this node's form is not covered (a rewrite would compute something else), or undefined. */
  refuse?(node: Node): string | undefined;
  /** Whether the node needs rewriting at all (default: always). */
  needed?(node: Node): boolean;
  /** Emits the equivalent of `e.origin`, writing its outputs. */
  emit(e: NodeEmitter): void;
}

/** Every value name of a model: graph inputs, initializers and node outputs, through subgraphs and functions. */
export function valueNames(model: OnnxTypes.ModelProto): Set<string> {
  const names = new Set<string>();
  const visitNodes = (nodes: OnnxTypes.INodeProto[]) => {
    for (const node of nodes) {
      for (const output of node.output ?? []) names.add(output);
      for (const a of node.attribute ?? []) {
        if (a.g) visitGraph(a.g);
        for (const g of a.graphs ?? []) visitGraph(g);
      }
    }
  };
  const visitGraph = (graph: OnnxTypes.IGraphProto) => {
    for (const i of graph.input ?? []) if (i.name) names.add(i.name);
    for (const t of graph.initializer ?? []) if (t.name) names.add(t.name);
    visitNodes(graph.node ?? []);
  };
  if (model.graph) visitGraph(model.graph);
  for (const f of model.functions ?? []) {
    for (const i of f.input ?? []) names.add(i);
    visitNodes(f.node ?? []);
  }
  return names;
}
