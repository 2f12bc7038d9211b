import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { normalDomain, runsOnCpu } from './cpu-kernels.js';
import { biasAdd, biasSplitGelu, gemmFastGelu, nhwcConv, packedMultiHeadAttention } from './decompose-fused.js';
import { groupNorm, skipGroupNorm } from './decompose-group-norm.js';
import { FreshNames, NodeEmitter, valueNames, type Decomposition, type Node } from './graph-editor.js';

/**
 * Makes a decoded float32 ONNX model runnable by ONNX Runtime's CPU provider,
 * in place: fused operators it has no kernel for (exports optimised for a
 * GPU carry them) are replaced by the standard operators they stand for,
 * through every subgraph and function body, and whatever else it cannot run
 * is reported, by operator, for the caller to refuse the model with.
 */

const { onnx } = onnxProto;

const DECOMPOSITIONS: Record<string, Decomposition> = {
  GroupNorm: groupNorm,
  SkipGroupNorm: skipGroupNorm,
  BiasSplitGelu: biasSplitGelu,
  BiasAdd: biasAdd,
  GemmFastGelu: gemmFastGelu,
  NhwcConv: nhwcConv,
  MultiHeadAttention: packedMultiHeadAttention,
};

/** The rewrites use Slice with inputs (opset 10) and nothing newer than that changed. */
const MIN_OPSET = 10;
/** Imported when a model that had no default-domain import gains standard operators. */
const ADDED_OPSET = 17;

export interface CpuRewriteReport {
  /** Nodes replaced by standard operators, by operator ('com.microsoft.GroupNorm'). */
  rewritten: Record<string, number>;
  /** Nodes the CPU provider cannot run and that were left as they were, by operator (and the form, where that is the problem). */
  unsupported: Record<string, number>;
}

const count = (tally: Record<string, number>, key: string) => (tally[key] = (tally[key] ?? 0) + 1);
const label = (node: Node) => `${normalDomain(node.domain) || 'ai.onnx'}.${node.opType}`;

export function rewriteForCpu(model: OnnxTypes.ModelProto): CpuRewriteReport {
  const report: CpuRewriteReport = { rewritten: {}, unsupported: {} };
  const imports = model.opsetImport as OnnxTypes.OperatorSetIdProto[];
  const standard = imports.find((o) => normalDomain(o.domain) === '');
  const opset = standard ? Number(standard.version) : ADDED_OPSET;
  const names = new FreshNames(valueNames(model));
  const functions = new Set((model.functions as OnnxTypes.FunctionProto[]).map((f) => `${normalDomain(f.domain)}:${f.name}`));

  const rewriteNodes = (nodes: Node[]): Node[] => {
    const result: Node[] = [];
    for (const node of nodes) {
      for (const a of node.attribute as OnnxTypes.AttributeProto[]) {
        if (a.g) a.g.node = rewriteNodes(a.g.node as Node[]);
        for (const g of a.graphs as OnnxTypes.GraphProto[]) g.node = rewriteNodes(g.node as Node[]);
      }
      const domain = normalDomain(node.domain);
      const decomposition = domain === 'com.microsoft' ? DECOMPOSITIONS[node.opType] : undefined;
      if (decomposition && (decomposition.needed?.(node) ?? true)) {
        const problem = decomposition.refuse?.(node) ?? (opset < MIN_OPSET ? `in a model of opset ${opset}` : undefined);
        if (problem) {
          count(report.unsupported, `${label(node)} (${problem})`);
          result.push(node);
          continue;
        }
        const emitter = new NodeEmitter(node, names);
        decomposition.emit(emitter);
        result.push(...emitter.nodes);
        count(report.rewritten, label(node));
        continue;
      }
      if (!runsOnCpu(domain, node.opType) && !functions.has(`${domain}:${node.opType}`)) count(report.unsupported, label(node));
      result.push(node);
    }
    return result;
  };

  if (model.graph) model.graph.node = rewriteNodes(model.graph.node as Node[]);
  for (const f of model.functions as OnnxTypes.FunctionProto[]) f.node = rewriteNodes(f.node as Node[]);
  if (!standard && Object.keys(report.rewritten).length) imports.push(onnx.OperatorSetIdProto.create({ domain: '', version: ADDED_OPSET }));
  return report;
}
