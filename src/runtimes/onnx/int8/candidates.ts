import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';

/**
 * Which nodes of an fp32 graph the int8 quantizer rewrites (qdq.ts): the
 * convolutions and the matrix products whose second input is a constant
 * weight, in the main graph. Their data input and their output are the
 * activations whose ranges calibration measures (ranges.ts); an output that
 * is also a graph output stays fp32 (the caller reads it as floats, and an
 * 8-bit image or noise prediction would lose what the comparison keeps).
 * Products of two activations (attention's scores) stay fp32: their ranges
 * vary with the content more than a fixed scale can follow.
 */

const FLOAT = onnxProto.onnx.TensorProto.DataType.FLOAT;

export class Unquantizable extends Error {}

export interface Int8Plan {
  /** The nodes rewritten, in graph order. */
  nodes: OnnxTypes.NodeProto[];
  /** Activations quantized (each once, whatever reads it): the nodes' data inputs and outputs. */
  activations: string[];
  /** The weight's axis of output channels (per-channel scales), by node: 0 for a Conv's [M, C, k…], 1 for a MatMul's [K, N]. */
  axis: Map<OnnxTypes.NodeProto, number>;
  /** Nodes whose weights alone are int8 (dequantized as each run reads them; the product in fp32). */
  weightsOnly: Set<OnnxTypes.NodeProto>;
}

/** The per-axis QuantizeLinear/DequantizeLinear the rewrite uses came with opset 13. */
const MIN_OPSET = 13;

type Op = 'Conv' | 'MatMul';

export interface PlanOptions {
  /**
   * Graph inputs whose readers (directly or through Cast/Identity) keep fp32
   * activations, with 8-bit weights at most: an input computed by another
   * model (a UNet's text states) can carry outliers that one 8-bit scale
   * would crush, and the products that read it are small.
   */
  floatInputs?: readonly string[];
  /** Operators whose weights and activations are int8 (default both): convolutions alone are the cautious choice, their products' errors add up less. */
  ops?: readonly Op[];
  /**
   * Operators whose weights alone are int8 (the others' and the nodes reading
   * a float input): a quarter of the memory, fp32 products (ONNX Runtime
   * keeps DequantizeLinear of a constant as a node rather than folding it
   * back into fp32).
   */
  weightOps?: readonly Op[];
  /**
   * When given, only the nodes of `ops` named here get 8-bit activations
   * (the others keep 8-bit weights alone): a mixed plan that leaves the
   * layers most sensitive to rounding in fp32.
   */
  activationNodes?: ReadonlySet<string>;
}

/** The plan for `model` under `options`. */
export function int8Plan(model: OnnxTypes.ModelProto, { floatInputs = [], ops = ['Conv', 'MatMul'], weightOps = [], activationNodes }: PlanOptions = {}): Int8Plan {
  const graph = model.graph as OnnxTypes.GraphProto;
  const opset = model.opsetImport.find((o) => !o.domain || o.domain === 'ai.onnx');
  if (!opset || Number(opset.version) < MIN_OPSET) throw new Unquantizable(`opset ${opset?.version ?? 'unknown'} is older than ${MIN_OPSET}, the first with per-channel quantization`);
  const floats = new Map((graph.initializer as OnnxTypes.TensorProto[]).filter((t) => t.dataType === FLOAT).map((t) => [t.name, t]));
  const outputs = new Set(graph.output.map((o) => o.name));
  const nodes: OnnxTypes.NodeProto[] = [];
  const axis = new Map<OnnxTypes.NodeProto, number>();
  const weightsOnly = new Set<OnnxTypes.NodeProto>();
  const activations = new Set<string>();
  const kept = new Set(floatInputs);
  for (const node of graph.node as OnnxTypes.NodeProto[]) {
    if (node.domain && node.domain !== 'ai.onnx') continue;
    const [data, weight, bias] = node.input;
    if ((node.opType === 'Cast' || node.opType === 'Identity') && data && kept.has(data)) node.output.forEach((o) => kept.add(o));
    const w = weight ? floats.get(weight) : undefined;
    const op = node.opType as Op;
    if (!data || !w || floats.has(data) || (!ops.includes(op) && !weightOps.includes(op))) continue;
    if (op === 'Conv' && w.dims.length >= 3 && (!bias || floats.has(bias))) axis.set(node, 0);
    else if (op === 'MatMul' && w.dims.length === 2) axis.set(node, 1);
    else continue;
    nodes.push(node);
    if (!ops.includes(op) || kept.has(data) || (activationNodes && !activationNodes.has(node.name))) {
      weightsOnly.add(node);
      continue;
    }
    activations.add(data);
    const out = node.output[0];
    if (out && !outputs.has(out)) activations.add(out);
  }
  if (!nodes.length) throw new Unquantizable('it has no convolution or matrix product with constant weights');
  return { nodes, activations: [...activations], axis, weightsOnly };
}
