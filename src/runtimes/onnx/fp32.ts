import { mkdir, open, readFile, rename, rm, writeFile, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { halvesToFloats } from './float16.js';
import { DataWriter } from './data-writer.js';

/**
 * Rewrites an fp16 ONNX graph as fp32: every float16 initializer, constant
 * and Constant/ConstantOfShape value widened, every float16 tensor type
 * (inputs, outputs, value infos) and Cast/RandomNormal target made float32,
 * through subgraphs too. ONNX Runtime's CPU provider lacks fp16 kernels
 * for part of the graph (Softmax, the normalisations) and casts around
 * them: with SD-Turbo-sized graphs the
 * fp16 export as shipped took 10.9 GB at its peak and 4.67 s per UNet step,
 * the fp32 conversion 9.6 GB and 4.31 s (bench/images.ts; an attention-heavy
 * 64x64-latent block alone ran 2x slower in fp16). The cost is disk: the
 * weights take twice the space, so they go to an external data file (an
 * fp32 SD UNet is 3.5 GB, past protobuf's 2 GB limit for one message).
 *
 * The source graph is read whole (its inline weights are views into that
 * buffer, not copies); its external data is read tensor by tensor. Weights,
 * fp16 or not, are streamed to `<name>.data` beside the new graph; a graph
 * without any float16 is left as it is.
 * Both files are written under temporary names and renamed into place last.
 */

const { onnx } = onnxProto;
const FLOAT = onnx.TensorProto.DataType.FLOAT;
const FLOAT16 = onnx.TensorProto.DataType.FLOAT16;
const Attr = onnx.AttributeProto.AttributeType;

export interface ConversionResult {
  /** The graph written (its weights are in `${graph}.data`); the source itself when it had no fp16 tensors (nothing is written). */
  graph: string;
  /** float16 tensors widened. */
  converted: number;
  /** Bytes of the graph and its data file. */
  bytes: number;
}

export async function convertToFp32(source: string, target: string): Promise<ConversionResult> {
  const sourceDir = path.dirname(source);
  const model = onnx.ModelProto.decode(await readFile(source));
  if (!model.graph) throw new Error(`${source}: not an ONNX model (no graph)`);
  // An fp32 export (its weights possibly gigabytes of external data) is used as it is, without copying a byte.
  if (!hasFloat16(model.graph as OnnxTypes.GraphProto)) return { graph: source, converted: 0, bytes: 0 };
  await mkdir(path.dirname(target), { recursive: true });
  const dataName = `${path.basename(target)}.data`;
  const tmpGraph = `${target}.${process.pid}.tmp`;
  const tmpData = path.join(path.dirname(target), `${dataName}.${process.pid}.tmp`);
  const data = await open(tmpData, 'w');
  const writer = new DataWriter(data, dataName, sourceDir);
  try {
    await convertGraph(model.graph as OnnxTypes.GraphProto, writer);
    await data.close();
    if (writer.converted === 0) {
      // Nothing was fp16: the graph is used as it is.
      await rm(tmpData, { force: true });
      return { graph: source, converted: 0, bytes: 0 };
    }
    const bytes = onnx.ModelProto.encode(model).finish();
    await writeFile(tmpGraph, bytes);
    await rename(tmpData, path.join(path.dirname(target), dataName));
    await rename(tmpGraph, target);
    return { graph: target, converted: writer.converted, bytes: bytes.length + writer.offset };
  } catch (error) {
    await data.close().catch(() => undefined);
    await rm(tmpData, { force: true });
    await rm(tmpGraph, { force: true });
    throw error;
  } finally {
    await writer.close();
  }
}

/** Whether any tensor, value type or type attribute of the graph (or its subgraphs) is float16. */
function hasFloat16(graph: OnnxTypes.GraphProto): boolean {
  const isHalf = (type: OnnxTypes.ITypeProto | null | undefined): boolean =>
    !!type && (type.tensorType?.elemType === FLOAT16 || isHalf(type.sequenceType?.elemType) || isHalf(type.mapType?.valueType));
  if (graph.initializer.some((t) => t.dataType === FLOAT16)) return true;
  if ([...graph.input, ...graph.output, ...graph.valueInfo].some((info) => isHalf(info.type))) return true;
  return (graph.node as OnnxTypes.NodeProto[]).some((node) =>
    (node.attribute as OnnxTypes.AttributeProto[]).some(
      (a) =>
        (a.name === TYPE_ATTRIBUTES[node.opType] && a.type === Attr.INT && Number(a.i) === FLOAT16) ||
        (a.type === Attr.TENSOR && a.t?.dataType === FLOAT16) ||
        (a.type === Attr.TENSORS && a.tensors.some((t) => t.dataType === FLOAT16)) ||
        (a.type === Attr.GRAPH && !!a.g && hasFloat16(a.g as OnnxTypes.GraphProto)) ||
        (a.type === Attr.GRAPHS && a.graphs.some((g) => hasFloat16(g as OnnxTypes.GraphProto))),
    ),
  );
}

/**
 * Widens one tensor (if fp16) and places its bytes; tensors of other types
 * are only relocated. Node attribute tensors (Constant values) stay inline.
 */
async function convertTensor(tensor: OnnxTypes.TensorProto, writer: DataWriter, inline = false): Promise<void> {
  if (tensor.dataType === FLOAT16) {
    const raw = await writer.bytesOf(tensor);
    let halves: Uint16Array;
    if (raw) {
      // Copy to an aligned buffer: a view into the decoded file may start at an odd offset.
      halves = new Uint16Array(raw.length / 2);
      new Uint8Array(halves.buffer).set(raw);
    } else {
      // Without raw data, ONNX keeps fp16 bit patterns in int32_data.
      halves = Uint16Array.from(tensor.int32Data, (v) => v & 0xffff);
      tensor.int32Data = [];
    }
    const floats = halvesToFloats(halves);
    tensor.dataType = FLOAT;
    writer.converted++;
    await writer.place(tensor, new Uint8Array(floats.buffer), inline);
    return;
  }
  const raw = await writer.bytesOf(tensor);
  if (raw) await writer.place(tensor, raw, inline);
}

function widenType(type: OnnxTypes.ITypeProto | null | undefined): void {
  if (!type) return;
  if (type.tensorType?.elemType === FLOAT16) type.tensorType.elemType = FLOAT;
  if (type.sequenceType) widenType(type.sequenceType.elemType);
  if (type.mapType) widenType(type.mapType.valueType);
}

/** Ops whose attribute names an output element type. */
const TYPE_ATTRIBUTES: Record<string, string> = { Cast: 'to', RandomNormal: 'dtype', RandomUniform: 'dtype', RandomNormalLike: 'dtype', RandomUniformLike: 'dtype', EyeLike: 'dtype', Bernoulli: 'dtype' };

async function convertGraph(graph: OnnxTypes.GraphProto, writer: DataWriter): Promise<void> {
  // Decoded messages are class instances with every repeated field present.
  for (const tensor of graph.initializer as OnnxTypes.TensorProto[]) await convertTensor(tensor, writer);
  for (const info of [...graph.input, ...graph.output, ...graph.valueInfo]) widenType(info.type);
  for (const node of graph.node as OnnxTypes.NodeProto[]) {
    const typeAttribute = TYPE_ATTRIBUTES[node.opType];
    for (const attribute of node.attribute as OnnxTypes.AttributeProto[]) {
      if (attribute.name === typeAttribute && attribute.type === Attr.INT && Number(attribute.i) === FLOAT16) attribute.i = FLOAT;
      if (attribute.type === Attr.TENSOR && attribute.t) await convertTensor(attribute.t as OnnxTypes.TensorProto, writer, true);
      if (attribute.type === Attr.TENSORS) for (const t of attribute.tensors) await convertTensor(t as OnnxTypes.TensorProto, writer, true);
      if (attribute.type === Attr.GRAPH && attribute.g) await convertGraph(attribute.g as OnnxTypes.GraphProto, writer);
      if (attribute.type === Attr.GRAPHS) for (const g of attribute.graphs) await convertGraph(g as OnnxTypes.GraphProto, writer);
    }
  }
}
