import { copyFile, link, mkdir, readFile, rm } from 'node:fs/promises';
import { writeFileWhole } from '../../core/write-whole.js';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { rewriteForCpu, type CpuRewriteReport } from './cpu-rewrite.js';

/**
 * rewriteForCpu (cpu-rewrite.ts) over a graph file. Nothing is written when
 * nothing needs rewriting or when something is left that the CPU cannot run.
 * The rewritten graph goes to `target` (which may be the source itself)
 * under a temporary name first. Its weights stay where they were: inline
 * ones are re-encoded with the graph, and external data files that live
 * beside the source are hard-linked beside the target (copied where a link
 * is impossible), since ONNX Runtime reads external data only from the
 * graph's own folder. A single data file is linked as `<target>.data`, the
 * name the fp32 conversion gives its own, so the graph's size reads the same
 * way whichever step wrote it.
 */

const { onnx } = onnxProto;
const EXTERNAL = onnx.TensorProto.DataLocation.EXTERNAL;

export interface CpuRewriteFileResult extends CpuRewriteReport {
  /** The graph to load: `target` when it was written, else the source. */
  graph: string;
}

export async function rewriteFileForCpu(source: string, target: string): Promise<CpuRewriteFileResult> {
  const model = onnx.ModelProto.decode(await readFile(source));
  const report = rewriteForCpu(model);
  if (Object.keys(report.unsupported).length || !Object.keys(report.rewritten).length) return { ...report, graph: source };
  await mkdir(path.dirname(target), { recursive: true });
  await placeExternalData(model, source, target);
  await writeFileWhole(target, onnx.ModelProto.encode(model).finish());
  return { ...report, graph: target };
}

type Tensor = OnnxTypes.ITensorProto;

/** Every externally stored tensor of the model (initializers and Constant values, through subgraphs), by data file. */
function externalTensors(model: OnnxTypes.ModelProto): Map<string, Tensor[]> {
  const byLocation = new Map<string, Tensor[]>();
  const visitTensor = (t: Tensor | null | undefined) => {
    if (t?.dataLocation !== EXTERNAL) return;
    const location = t.externalData?.find((e) => e.key === 'location')?.value;
    if (!location || path.isAbsolute(location) || location.split(/[\\/]/).includes('..')) throw new Error(`external data '${location}' of ${t.name} is outside the model folder`);
    const tensors = byLocation.get(location);
    if (tensors) tensors.push(t);
    else byLocation.set(location, [t]);
  };
  const visitGraph = (g: OnnxTypes.IGraphProto) => {
    for (const t of g.initializer ?? []) visitTensor(t);
    for (const node of g.node ?? []) {
      for (const a of node.attribute ?? []) {
        visitTensor(a.t);
        for (const t of a.tensors ?? []) visitTensor(t);
        if (a.g) visitGraph(a.g);
        for (const sub of a.graphs ?? []) visitGraph(sub);
      }
    }
  };
  if (model.graph) visitGraph(model.graph);
  return byLocation;
}

/** Links (or copies) the external data files into the target's folder, renaming a single one `<target>.data`. */
async function placeExternalData(model: OnnxTypes.ModelProto, source: string, target: string): Promise<void> {
  const sourceDir = path.dirname(source);
  const targetDir = path.dirname(target);
  if (path.resolve(sourceDir) === path.resolve(targetDir)) return;
  const files = externalTensors(model);
  for (const [location, tensors] of files) {
    const name = files.size === 1 ? `${path.basename(target)}.data` : location;
    if (name !== location) for (const t of tensors) for (const e of t.externalData ?? []) if (e.key === 'location') e.value = name;
    const from = path.join(sourceDir, location);
    const to = path.join(targetDir, name);
    await mkdir(path.dirname(to), { recursive: true });
    await rm(to, { force: true });
    await link(from, to).catch(() => copyFile(from, to));
  }
}
