import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { EXTERNAL, ExternalDataReader } from '../../../runtimes/onnx/external-reader.js';
import { UnpreparableGraph } from './predictor-weights.js';

/**
 * Brings a graph's external data (files beside it) into the graph, so that
 * a prepared graph is one file that loads from memory or from anywhere: the
 * graphs prepared here (the code predictor, the 4-bit talker) are far below
 * protobuf's 2 GB.
 */

/** Tensors kept in external data files (in `dir`, beside the graph) read into the graph. */
export async function inlineExternalData(model: OnnxTypes.IModelProto, dir: string): Promise<void> {
  const tensors: OnnxTypes.ITensorProto[] = [];
  const visit = (g: OnnxTypes.IGraphProto | null | undefined) => {
    for (const t of g?.initializer ?? []) if (t.dataLocation === EXTERNAL) tensors.push(t);
    for (const n of g?.node ?? []) for (const a of n.attribute ?? []) visit(a.g);
  };
  visit(model.graph);
  const reader = new ExternalDataReader(dir);
  try {
    for (const t of tensors) {
      t.rawData = await reader.read(t).catch((error: Error) => {
        throw new UnpreparableGraph(error.message);
      });
      t.dataLocation = onnxProto.onnx.TensorProto.DataLocation.DEFAULT;
      t.externalData = [];
    }
  } finally {
    await reader.close();
  }
}
