import { constants } from 'node:fs';
import { copyFile, link, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import type { Tensor } from '../session.js';

/**
 * Calibration for static int8 activations: the graph with, for every
 * activation to be quantized, its minimum and maximum over the whole tensor
 * as two extra scalar outputs (ReduceMin/ReduceMax inside the graph, so a run
 * returns a few floats rather than every intermediate tensor: a VAE
 * decoder's at 512×512 would be gigabytes). It is used as the fp32 graph
 * itself: runs that fetch these outputs measure while they compute. The
 * graph is written to a folder of its own under `workDir` (never beside the
 * source, which may be a user's export), with hard links to the source's
 * external data files under the names the graph gives them (ONNX Runtime
 * follows symbolic links and refuses data outside the graph's folder); a
 * copy where the files are on another file system.
 */

const { onnx } = onnxProto;
const FLOAT = onnx.TensorProto.DataType.FLOAT;

export interface Range {
  min: number;
  max: number;
}

const MIN = '::int8_min';
const MAX = '::int8_max';

/** Writes the measuring graph into a new folder under `workDir`; returns its path and the names of its range outputs. */
export async function writeRangeGraph(source: string, activations: readonly string[], workDir: string): Promise<{ file: string; outputs: string[] }> {
  const model = onnx.ModelProto.decode(await readFile(source));
  const graph = model.graph as OnnxTypes.GraphProto;
  await mkdir(workDir, { recursive: true });
  const dir = await mkdtemp(path.join(workDir, '.ranges-'));
  for (const location of externalLocations(graph)) {
    // Locations were checked to stay inside the export's folder (export-check.ts, ExternalDataReader).
    await mkdir(path.dirname(path.join(dir, location)), { recursive: true });
    const from = path.resolve(path.dirname(source), location);
    const to = path.join(dir, location);
    await link(from, to).catch(() => copyFile(from, to, constants.COPYFILE_FICLONE));
  }
  const outputs: string[] = [];
  for (const tensor of activations) {
    for (const [op, suffix] of [['ReduceMin', MIN], ['ReduceMax', MAX]] as const) {
      const output = `${tensor}${suffix}`;
      // No axes: every axis, in every opset; keepdims 0: a scalar.
      graph.node.push(onnx.NodeProto.create({ name: output, opType: op, input: [tensor], output: [output], attribute: [onnx.AttributeProto.create({ name: 'keepdims', type: onnx.AttributeProto.AttributeType.INT, i: 0 })] }));
      graph.output.push(onnx.ValueInfoProto.create({ name: output, type: { tensorType: { elemType: FLOAT, shape: { dim: [] } } } }));
      outputs.push(output);
    }
  }
  const file = path.join(dir, 'model.onnx');
  await writeFile(file, onnx.ModelProto.encode(model).finish());
  return { file, outputs };
}

/** Removes what writeRangeGraph wrote (a link's removal leaves the source's file as it was). */
export function removeRangeGraph(file: string): Promise<void> {
  return rm(path.dirname(file), { recursive: true, force: true });
}

function externalLocations(graph: OnnxTypes.GraphProto): Set<string> {
  const locations = new Set<string>();
  for (const t of graph.initializer) {
    const location = t.externalData?.find((e) => e.key === 'location')?.value;
    if (!location) continue;
    if (path.isAbsolute(location) || location.split(/[\\/]/).includes('..')) throw new Error(`external data '${location}' of ${t.name} is outside the model folder`);
    locations.add(location);
  }
  return locations;
}

/** Widens `ranges` by a run's range outputs. */
export function addRanges(ranges: Map<string, Range>, outputs: Readonly<Record<string, Tensor>>): void {
  for (const [name, tensor] of Object.entries(outputs)) {
    const suffix = name.endsWith(MIN) ? MIN : name.endsWith(MAX) ? MAX : undefined;
    if (!suffix) continue;
    const value = (tensor.data as Float32Array)[0]!;
    const key = name.slice(0, -suffix.length);
    const range = ranges.get(key) ?? { min: Infinity, max: -Infinity };
    if (suffix === MIN) range.min = Math.min(range.min, value);
    else range.max = Math.max(range.max, value);
    ranges.set(key, range);
  }
}
