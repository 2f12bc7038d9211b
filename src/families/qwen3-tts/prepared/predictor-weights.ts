import type { onnx as OnnxTypes } from 'onnx-proto';
import { halvesToFloats } from '../../../runtimes/onnx/float16.js';

/**
 * Reads the published code_predictor graph for what a KV-cached predictor
 * needs (predictor-graph.ts): the front that turns the talker state and the
 * frame's codes into the transformer's input rows (the embedding lookups,
 * kept as the export wrote them), the optional projection into the
 * predictor's width (the 1.7B models' small_to_mtp_projection), and each
 * decoder layer's, the final norm's and the 15 heads' weights. Weights are
 * found by their module names (`layers.3.self_attn.q_proj.weight`, with the
 * quantizer's `_Q4` suffix where 4-bit), linear layers as the MatMul or
 * MatMulNBits node that reads them. A graph that does not read that way is
 * refused with the reason (the published graph is used then).
 */

export type Tensor = OnnxTypes.ITensorProto;
export type Node = OnnxTypes.INodeProto;

/** A linear layer as the export computes it: x · W (fp32 W [K, N]), or ONNX Runtime's 4-bit MatMulNBits with its constant inputs and attributes. */
export type Linear = { op: 'MatMul'; weight: Tensor; bias?: Tensor } | { op: 'MatMulNBits'; inputs: Array<Tensor | undefined>; attributes: OnnxTypes.IAttributeProto[]; bias?: Tensor };

export interface LayerWeights {
  inputNorm: Tensor;
  q: Linear;
  k: Linear;
  v: Linear;
  o: Linear;
  qNorm: Tensor;
  kNorm: Tensor;
  postNorm: Tensor;
  gate: Linear;
  up: Linear;
  down: Linear;
}

export interface PredictorWeights {
  /** Nodes (in graph order) and constants computing `front.output` [1, 16, width] from the graph's inputs. */
  front: { nodes: Node[]; initializers: Tensor[]; output: string };
  /** The graph's inputs: the talker state and the codes. */
  inputs: OnnxTypes.IValueInfoProto[];
  projection?: Linear;
  layers: LayerWeights[];
  norm: Tensor;
  heads: Linear[];
}

export class UnpreparableGraph extends Error {}

const escape = (text: string) => text.replace(/[.]/g, '\\.');

/** A transformer graph's weights, looked up by module name. */
export interface GraphWeights {
  nodes: Node[];
  initializers: Map<string, Tensor>;
  producers: Map<string, Node>;
  consumers(value: string): Node[];
  /** The initializer whose name ends with `param` (after a dot or at the start), with an optional quantizer suffix. */
  named(param: string, suffix?: string): Tensor | undefined;
  tensor(param: string): Tensor;
  /** The linear layer reading the weight `param` (its output too, to follow the graph from there). */
  linearAt(param: string): { linear: Linear; input: string; output: string };
  /** The decoder layers named `layers.<i>.…`. */
  layers(): LayerWeights[];
}

export function graphWeights(model: OnnxTypes.IModelProto): GraphWeights {
  const graph = model.graph;
  if (!graph?.node || !graph.initializer) throw new UnpreparableGraph('the file has no graph');
  const nodes = graph.node;
  const all = graph.initializer;
  const initializers = new Map(all.map((t) => [t.name!, t]));
  const producers = new Map<string, Node>();
  for (const n of nodes) for (const out of n.output ?? []) producers.set(out, n);
  const consumers = (value: string) => nodes.filter((n) => n.input?.includes(value));

  const named = (param: string, suffix = ''): Tensor | undefined => {
    const pattern = new RegExp(`(^|\\.)${escape(param)}${suffix}$`);
    const found = all.filter((t) => pattern.test(t.name ?? ''));
    if (found.length > 1) throw new UnpreparableGraph(`more than one initializer is named like ${param}`);
    return found[0];
  };
  const tensor = (param: string): Tensor => {
    const t = named(param);
    if (!t) throw new UnpreparableGraph(`no initializer named like ${param}`);
    return t;
  };
  const constant = (name: string | undefined) => (name ? initializers.get(name) : undefined);

  const linearAt = (param: string): { linear: Linear; input: string; output: string } => {
    const weight = named(param) ?? named(param, '_Q4');
    if (!weight) throw new UnpreparableGraph(`no weight named like ${param}`);
    const node = consumers(weight.name!).find((n) => n.input?.[1] === weight.name);
    if (!node) throw new UnpreparableGraph(`${weight.name} is not the weight of a MatMul`);
    let linear: Linear;
    if (node.opType === 'MatMul' && (node.domain ?? '') === '') {
      linear = { op: 'MatMul', weight };
    } else if (node.opType === 'MatMulNBits' && node.domain === 'com.microsoft') {
      const inputs = node.input!.slice(1).map((name) => (name ? constant(name) : undefined));
      if (node.input!.slice(1).some((name, i) => name && !inputs[i])) throw new UnpreparableGraph(`${node.name}: a MatMulNBits input is not constant`);
      linear = { op: 'MatMulNBits', inputs, attributes: node.attribute ?? [] };
    } else {
      throw new UnpreparableGraph(`${weight.name} is read by ${node.opType}, not MatMul or MatMulNBits`);
    }
    let output = node.output![0]!;
    // A bias the exporter kept as an Add of a constant.
    const next = consumers(output);
    const biasName = next.length === 1 && next[0]!.opType === 'Add' ? next[0]!.input!.find((name) => name !== output) : undefined;
    const bias = constant(biasName);
    if (bias) {
      linear.bias = bias;
      output = next[0]!.output![0]!;
    }
    return { linear, input: node.input![0]!, output };
  };

  const layers = (): LayerWeights[] => {
    const found: LayerWeights[] = [];
    for (let i = 0; named(`layers.${i}.input_layernorm.weight`); i++) {
      const p = `layers.${i}`;
      found.push({
        inputNorm: tensor(`${p}.input_layernorm.weight`),
        q: linearAt(`${p}.self_attn.q_proj.weight`).linear,
        k: linearAt(`${p}.self_attn.k_proj.weight`).linear,
        v: linearAt(`${p}.self_attn.v_proj.weight`).linear,
        o: linearAt(`${p}.self_attn.o_proj.weight`).linear,
        qNorm: tensor(`${p}.self_attn.q_norm.weight`),
        kNorm: tensor(`${p}.self_attn.k_norm.weight`),
        postNorm: tensor(`${p}.post_attention_layernorm.weight`),
        gate: linearAt(`${p}.mlp.gate_proj.weight`).linear,
        up: linearAt(`${p}.mlp.up_proj.weight`).linear,
        down: linearAt(`${p}.mlp.down_proj.weight`).linear,
      });
    }
    if (!found.length) throw new UnpreparableGraph('no decoder layers named like layers.0.input_layernorm.weight');
    return found;
  };
  return { nodes, initializers, producers, consumers, named, tensor, linearAt, layers };
}

export function readPredictorWeights(model: OnnxTypes.IModelProto, groups: number): PredictorWeights {
  const { nodes, initializers, producers, consumers, named, tensor, linearAt, layers: readLayers } = graphWeights(model);
  const layers = readLayers();

  // Layer 0's input: the residual Add after its o_proj reads it beside the attention's output.
  const attention = linearAt('layers.0.self_attn.o_proj.weight').output;
  const residual = consumers(attention).find((n) => n.opType === 'Add');
  const layerInput = residual?.input?.find((name) => name !== attention);
  if (!layerInput) throw new UnpreparableGraph("cannot find layer 0's residual input");
  let frontOutput = layerInput;
  let projection: Linear | undefined;
  if (named('small_to_mtp_projection.weight') ?? named('small_to_mtp_projection.weight', '_Q4')) {
    const projected = linearAt('small_to_mtp_projection.weight');
    if (projected.output !== layerInput) throw new UnpreparableGraph('small_to_mtp_projection does not feed layer 0');
    projection = projected.linear;
    frontOutput = projected.input;
  }

  const heads = readHeads(named, linearAt, groups);
  return { front: closure(frontOutput, producers, initializers, nodes), inputs: model.graph!.input ?? [], projection, layers, norm: tensor('model.norm.weight'), heads };
}

/** The 15 heads: one Linear per group (`lm_head.<g>.weight`), or one stacked [15, d, V] tensor (`lm_head`). */
function readHeads(named: (param: string, suffix?: string) => Tensor | undefined, linearAt: (param: string) => { linear: Linear }, groups: number): Linear[] {
  if (named('lm_head.0.weight') ?? named('lm_head.0.weight', '_Q4')) {
    return Array.from({ length: groups - 1 }, (_, g) => linearAt(`lm_head.${g}.weight`).linear);
  }
  const stacked = named('lm_head');
  const dims = stacked?.dims?.map(Number);
  if (!stacked || dims?.length !== 3 || dims[0] !== groups - 1) throw new UnpreparableGraph('no heads named like lm_head.0.weight or a stacked lm_head');
  const [, K, N] = dims as [number, number, number];
  // Split into fp32 MatMul weights, so the graph takes them as the export's fp32 ones only.
  if (stacked.dataType !== 1) throw new UnpreparableGraph(`${stacked.name} is not float32`);
  const values = floatValues(stacked);
  return Array.from({ length: groups - 1 }, (_, g) => ({
    op: 'MatMul' as const,
    weight: { name: `${stacked.name}.${g}`, dims: [K, N], dataType: 1, rawData: bytesOf(values.subarray(g * K * N, (g + 1) * K * N)) },
  }));
}

/** Every node `output` depends on, in graph order, with the initializers they read. */
function closure(output: string, producers: Map<string, Node>, initializers: Map<string, Tensor>, nodes: Node[]): PredictorWeights['front'] {
  const needed = new Set<Node>();
  const constants = new Set<Tensor>();
  const visit = (value: string) => {
    const node = producers.get(value);
    if (!node) {
      const t = initializers.get(value);
      if (t) constants.add(t);
      return;
    }
    if (needed.has(node)) return;
    if (node.attribute?.some((a) => a.g || a.graphs?.length)) throw new UnpreparableGraph('the embedding front has subgraphs');
    needed.add(node);
    for (const input of node.input ?? []) if (input) visit(input);
  };
  visit(output);
  return { nodes: nodes.filter((n) => needed.has(n)), initializers: [...constants], output };
}

/** An fp32 or fp16 tensor's values as float32 (inline raw data, float_data or fp16's int32_data): a view of fp32 raw data where aligned. */
export function floatValues(t: Tensor): Float32Array {
  if (t.dataType !== 1 && t.dataType !== 10) throw new UnpreparableGraph(`${t.name} is neither float32 nor float16`);
  if (t.dataLocation === 1) throw new UnpreparableGraph(`${t.name} is stored outside the graph and cannot be split`);
  const raw = t.rawData;
  if (t.dataType === 10) {
    if (!raw?.length) return halvesToFloats(Uint16Array.from(t.int32Data ?? []));
    return halvesToFloats(raw.byteOffset % 2 === 0 ? new Uint16Array(raw.buffer, raw.byteOffset, raw.byteLength / 2) : new Uint16Array(Uint8Array.from(raw).buffer));
  }
  if (raw?.length) return raw.byteOffset % 4 === 0 ? new Float32Array(raw.buffer, raw.byteOffset, raw.byteLength / 4) : new Float32Array(Uint8Array.from(raw).buffer);
  return Float32Array.from(t.floatData ?? []);
}

export const bytesOf = (values: Float32Array) => new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
