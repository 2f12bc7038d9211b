import { open } from 'node:fs/promises';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { UnpreparableGraph } from './predictor-weights.js';

/**
 * Brings a graph's external data (files beside it) into the graph, so that
 * a prepared graph is one file that loads from memory or from anywhere: the
 * graphs prepared here (the code predictor, the 4-bit talker) are far below
 * protobuf's 2 GB.
 */

const { onnx } = onnxProto;
const EXTERNAL = onnx.TensorProto.DataLocation.EXTERNAL;

/** Tensors kept in external data files (beside the graph) read into the graph. */
export async function inlineExternalData(model: OnnxTypes.IModelProto, dir: string): Promise<void> {
  const tensors: OnnxTypes.ITensorProto[] = [];
  const visit = (g: OnnxTypes.IGraphProto | null | undefined) => {
    for (const t of g?.initializer ?? []) if (t.dataLocation === EXTERNAL) tensors.push(t);
    for (const n of g?.node ?? []) for (const a of n.attribute ?? []) visit(a.g);
  };
  visit(model.graph);
  for (const t of tensors) {
    const entry = (key: string) => t.externalData?.find((e) => e.key === key)?.value;
    const location = entry('location');
    if (!location || path.isAbsolute(location) || location.split(/[\\/]/).includes('..')) throw new UnpreparableGraph(`external data of ${t.name} is outside the model folder`);
    const offset = Number(entry('offset') ?? 0);
    const length = Number(entry('length'));
    const file = await open(path.join(dir, location), 'r');
    try {
      const data = Buffer.alloc(length);
      const { bytesRead } = await file.read(data, 0, length, offset);
      if (bytesRead !== length) throw new UnpreparableGraph(`external data of ${t.name} is cut short`);
      t.rawData = data;
    } finally {
      await file.close();
    }
    t.dataLocation = onnx.TensorProto.DataLocation.DEFAULT;
    t.externalData = [];
  }
}
