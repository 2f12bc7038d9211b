import { mkdir, open, readFile, rename, rm, writeFile, type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import onnxProto from 'onnx-proto';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { DataWriter } from '../data-writer.js';
import { int8Plan, Unquantizable, type PlanOptions } from './candidates.js';
import type { Range } from './ranges.js';

/**
 * Writes an fp32 graph's int8 form in ONNX's QDQ format, as ONNX Runtime's
 * static quantizer does: each chosen Conv or MatMul (candidates.ts) reads
 * its weight as int8 with one scale per output channel (symmetric), a Conv's
 * bias as int32 at the product of the input's and the weight's scales, and
 * its data input and output through QuantizeLinear → DequantizeLinear at
 * uint8 with the calibrated ranges (ranges.ts). ONNX Runtime fuses each such
 * group into QLinearConv / QLinearMatMul (u8·s8 products, VNNI where the
 * CPU has it); every other node still computes in fp32 on the dequantized
 * values. The weights go to `<target>.data`; both files are written under
 * temporary names and renamed into place last.
 */

const { onnx } = onnxProto;
const T = onnx.TensorProto.DataType;
const INT32_LIMIT = 2 ** 31 - 1;

export interface Int8Result {
  /** Nodes rewritten. */
  nodes: number;
  /** Bytes of the graph and the data it reads. */
  bytes: number;
}

/** Writes the int8 form of `source` (int8Plan with `options`) to `target`. */
export async function writeInt8Graph(source: string, target: string, ranges: ReadonlyMap<string, Range>, options: PlanOptions = {}): Promise<Int8Result> {
  const graphs = await Int8Graphs.open(source, target, ranges);
  try {
    return await graphs.write(options);
  } catch (error) {
    await rm(graphs.dataFile, { force: true });
    throw error;
  } finally {
    await graphs.close();
  }
}

/**
 * Int8 forms of one graph under several plans, written in turn to the same
 * `target` and sharing one data file: a weight is quantized and written
 * once, the first time a plan reads it, so trying another plan costs a
 * graph's rewrite (kilobytes), not its weights' (a UNet's take 20 s). The
 * data file is new (an existing one is unlinked first, so a process that
 * maps it keeps its copy); each graph is written under a temporary name and
 * renamed into place.
 */
export class Int8Graphs {
  /** Tensors already placed in the data file (or inline), by name, and the weights' scales. */
  private readonly placed = new Map<string, OnnxTypes.TensorProto>();
  private readonly scales = new Map<string, Float32Array>();

  private constructor(
    private readonly source: string,
    private readonly target: string,
    private readonly ranges: ReadonlyMap<string, Range>,
    readonly dataFile: string,
    private readonly file: FileHandle,
    private readonly writer: DataWriter,
  ) {}

  static async open(source: string, target: string, ranges: ReadonlyMap<string, Range>): Promise<Int8Graphs> {
    await mkdir(path.dirname(target), { recursive: true });
    const dataName = `${path.basename(target)}.data`;
    const data = path.join(path.dirname(target), dataName);
    await rm(data, { force: true });
    const file = await open(data, 'w');
    return new Int8Graphs(source, target, ranges, data, file, new DataWriter(file, dataName, path.dirname(source)));
  }

  async write(options: PlanOptions): Promise<Int8Result> {
    const model = onnx.ModelProto.decode(await readFile(this.source));
    const graph = model.graph as OnnxTypes.GraphProto;
    const plan = int8Plan(model, options);
    for (const a of plan.activations) if (!this.ranges.has(a)) throw new Unquantizable(`no calibrated range for ${a}`);
    const rewrite = new QdqRewrite(graph, this.ranges, this.writer, this.placed, this.scales);
    for (const node of plan.nodes) await (plan.weightsOnly.has(node) ? rewrite.weight(node, plan.axis.get(node)!) : rewrite.node(node, plan.axis.get(node)!));
    rewrite.finish();
    // What stayed fp32 (norms, biases of other ops, weights no rewritten node reads) is copied as it was.
    for (const [i, tensor] of (graph.initializer as OnnxTypes.TensorProto[]).entries()) {
      if (!rewrite.written.has(tensor)) graph.initializer[i] = await rewrite.copied(tensor);
    }
    const bytes = onnx.ModelProto.encode(model).finish();
    const tmp = `${this.target}.${process.pid}.tmp`;
    try {
      await writeFile(tmp, bytes);
      await rename(tmp, this.target);
    } catch (error) {
      await rm(tmp, { force: true });
      throw error;
    }
    const external = (graph.initializer as OnnxTypes.TensorProto[]).reduce((sum, t) => sum + Number(t.externalData?.find((e) => e.key === 'length')?.value ?? 0), 0);
    return { nodes: plan.nodes.length, bytes: bytes.length + external };
  }

  async close(): Promise<void> {
    await this.file.close().catch(() => undefined);
    await this.writer.close();
  }
}

/** uint8 scale and zero point covering [min, max] and 0 (as ONNX Runtime's quantizer: zero exactly representable). */
export function activationScale({ min, max }: Range): { scale: number; zeroPoint: number } {
  const lo = Math.min(0, min);
  const hi = Math.max(0, max);
  const scale = hi > lo ? (hi - lo) / 255 : 1;
  return { scale, zeroPoint: Math.min(255, Math.max(0, Math.round(-lo / scale))) };
}

/** Symmetric int8 per output channel along `axis` (0 or 1 of the weight's dims): q = round(w / s), s = max|w| / 127. */
export function quantizeWeight(values: Float32Array, dims: readonly number[], axis: number): { q: Int8Array; scales: Float32Array } {
  const channels = dims[axis]!;
  const inner = dims.slice(axis + 1).reduce((a, b) => a * b, 1);
  const outer = values.length / (channels * inner);
  // Element (o, c, j) is at (o * channels + c) * inner + j: loops in that order, no index arithmetic per element.
  const scales = new Float32Array(channels);
  for (let o = 0, i = 0; o < outer; o++) {
    for (let c = 0; c < channels; c++) {
      let max = scales[c]!;
      for (const end = i + inner; i < end; i++) max = Math.max(max, Math.abs(values[i]!));
      scales[c] = max;
    }
  }
  for (let c = 0; c < channels; c++) scales[c] = scales[c]! > 0 ? scales[c]! / 127 : 1;
  const q = new Int8Array(values.length);
  for (let o = 0, i = 0; o < outer; o++) {
    for (let c = 0; c < channels; c++) {
      const scale = scales[c]!;
      for (const end = i + inner; i < end; i++) q[i] = Math.max(-127, Math.min(127, Math.round(values[i]! / scale)));
    }
  }
  return { q, scales };
}

class QdqRewrite {
  /** Initializers already placed by the writer (new ones, and none of the old fp32 weights). */
  readonly written = new Set<OnnxTypes.TensorProto>();
  private readonly initializers: Map<string, OnnxTypes.TensorProto>;
  private readonly dequantized = new Map<string, string>();
  /** Nodes to insert after a value is produced ('' for graph inputs and constants: at the start). */
  private readonly after = new Map<string, OnnxTypes.NodeProto[]>();
  private readonly replacedWeights = new Set<string>();

  constructor(
    private readonly graph: OnnxTypes.GraphProto,
    private readonly ranges: ReadonlyMap<string, Range>,
    private readonly writer: DataWriter,
    /** Tensors an earlier plan's graph placed (shared by Int8Graphs), and weights' scales. */
    private readonly placed: Map<string, OnnxTypes.TensorProto>,
    private readonly weightScales: Map<string, Float32Array>,
  ) {
    this.initializers = new Map((graph.initializer as OnnxTypes.TensorProto[]).map((t) => [t.name, t]));
  }

  /** The node with its weight in int8, dequantized as it is read; returns the weight's scales. */
  async weight(node: OnnxTypes.NodeProto, axis: number): Promise<Float32Array> {
    const weight = node.input[1]!;
    const name = `${weight}::int8`;
    let scales = this.weightScales.get(name);
    if (scales) this.reuse(name);
    else {
      const w = this.initializers.get(weight)!;
      const quantized = quantizeWeight(await this.floats(w), w.dims.map(Number), axis);
      scales = quantized.scales;
      this.weightScales.set(name, scales);
      await this.constant(name, T.INT8, w.dims.map(Number), () => new Uint8Array(quantized.q.buffer));
    }
    node.input[1] = await this.dequantize(name, scales, T.INT8, axis);
    this.replacedWeights.add(weight);
    return scales;
  }

  /** The node with weight, bias, data input and output quantized (its QDQ group). */
  async node(node: OnnxTypes.NodeProto, axis: number): Promise<void> {
    const [data, , bias] = node.input as [string, string, string | undefined];
    const input = this.activation(data);
    const scales = await this.weight(node, axis);
    const inputScale = activationScale(this.ranges.get(data)!).scale;
    if (bias) {
      const b = this.initializers.get(bias)!;
      const biasScales = scales.map((s) => s * inputScale);
      const bq = await this.constant(`${bias}::int32`, T.INT32, [biasScales.length], async () => {
        const values = await this.floats(b);
        return new Uint8Array(Int32Array.from(values, (v, c) => Math.max(-INT32_LIMIT, Math.min(INT32_LIMIT, Math.round(v / biasScales[c]!)))).buffer);
      });
      node.input[2] = await this.dequantize(bq, biasScales, T.INT32, 0);
      this.replacedWeights.add(bias);
    }
    node.input[0] = input;
    const out = node.output[0]!;
    if (this.ranges.has(out)) this.activation(out);
  }

  /** Rewires every reader of a value quantized on the way to QuantizeLinear → DequantizeLinear's output, and places those nodes. */
  finish(): void {
    const ownQdq = new Set([...this.after.values()].flat());
    for (const node of this.graph.node as OnnxTypes.NodeProto[]) {
      if (ownQdq.has(node)) continue;
      node.input = node.input.map((name) => this.dequantized.get(name) ?? name);
    }
    const ordered: OnnxTypes.NodeProto[] = [...(this.after.get('') ?? [])];
    for (const node of this.graph.node as OnnxTypes.NodeProto[]) {
      ordered.push(node);
      for (const output of node.output) ordered.push(...(this.after.get(output) ?? []));
    }
    this.graph.node = ordered;
    // The fp32 weights no node reads any more are dropped.
    const read = new Set(ordered.flatMap((n) => n.input));
    this.graph.initializer = (this.graph.initializer as OnnxTypes.TensorProto[]).filter((t) => !this.replacedWeights.has(t.name) || read.has(t.name));
  }

  /** The dequantized name of an activation, creating its QuantizeLinear → DequantizeLinear pair once. */
  private activation(name: string): string {
    const known = this.dequantized.get(name);
    if (known) return known;
    const { scale, zeroPoint } = activationScale(this.ranges.get(name)!);
    const s = this.inlineConstant(`${name}::scale`, T.FLOAT, [], new Uint8Array(Float32Array.of(scale).buffer));
    const z = this.inlineConstant(`${name}::zero_point`, T.UINT8, [], Uint8Array.of(zeroPoint));
    const quantized = `${name}::quantized`;
    const dequantized = `${name}::dequantized`;
    const producedAt = this.producer(name);
    const list = this.after.get(producedAt) ?? [];
    list.push(
      onnx.NodeProto.create({ name: quantized, opType: 'QuantizeLinear', input: [name, s, z], output: [quantized] }),
      onnx.NodeProto.create({ name: dequantized, opType: 'DequantizeLinear', input: [quantized, s, z], output: [dequantized] }),
    );
    this.after.set(producedAt, list);
    this.dequantized.set(name, dequantized);
    return dequantized;
  }

  /** The output a value comes from ('' for a graph input or initializer). */
  private producer(name: string): string {
    return (this.graph.node as OnnxTypes.NodeProto[]).some((n) => n.output.includes(name)) ? name : '';
  }

  /** Symmetric (zero points 0) DequantizeLinear of `quantized`, an int8 or int32 constant, along `axis`. */
  private async dequantize(quantized: string, scales: Float32Array, type: typeof T.INT8 | typeof T.INT32, axis: number): Promise<string> {
    const zeros = type === T.INT8 ? new Int8Array(scales.length) : new Int32Array(scales.length);
    const s = await this.constant(`${quantized}::scale`, T.FLOAT, [scales.length], () => new Uint8Array(scales.buffer));
    const z = await this.constant(`${quantized}::zero_point`, type, [scales.length], () => new Uint8Array(zeros.buffer));
    const output = `${quantized}::dequantized`;
    const list = this.after.get('') ?? [];
    list.push(onnx.NodeProto.create({ name: output, opType: 'DequantizeLinear', input: [quantized, s, z], output: [output], attribute: [onnx.AttributeProto.create({ name: 'axis', type: onnx.AttributeProto.AttributeType.INT, i: axis })] }));
    this.after.set('', list);
    return output;
  }

  /** A new initializer `name`: placed once (its bytes computed then), reused by later plans. */
  private async constant(name: string, dataType: number, dims: number[], bytes: () => Uint8Array | Promise<Uint8Array>): Promise<string> {
    if (this.placed.has(name)) return this.reuse(name);
    const tensor = onnx.TensorProto.create({ name, dataType, dims });
    await this.writer.place(tensor, await bytes(), false);
    this.placed.set(name, tensor);
    return this.reuse(name);
  }

  /** The placed tensor `name` as an initializer of this graph. */
  private reuse(name: string): string {
    const tensor = onnx.TensorProto.create(this.placed.get(name)!);
    this.graph.initializer.push(tensor);
    this.written.add(tensor);
    this.initializers.set(name, tensor);
    return name;
  }

  /** An fp32 initializer left as it was, placed in the data file once. */
  async copied(tensor: OnnxTypes.TensorProto): Promise<OnnxTypes.TensorProto> {
    let placed = this.placed.get(tensor.name);
    if (!placed) {
      const bytes = await this.writer.bytesOf(tensor);
      if (!bytes) return tensor;
      await this.writer.place(tensor, bytes, false);
      placed = tensor;
      this.placed.set(tensor.name, placed);
    }
    return onnx.TensorProto.create(placed);
  }

  private inlineConstant(name: string, dataType: number, dims: number[], bytes: Uint8Array): string {
    const tensor = onnx.TensorProto.create({ name, dataType, dims, rawData: bytes });
    this.graph.initializer.push(tensor);
    this.written.add(tensor);
    return name;
  }

  private async floats(tensor: OnnxTypes.TensorProto): Promise<Float32Array> {
    const raw = await this.writer.bytesOf(tensor);
    if (raw) {
      // Copied to an aligned buffer: a view into the decoded file may start at an odd offset.
      const out = new Float32Array(raw.length / 4);
      new Uint8Array(out.buffer).set(raw);
      return out;
    }
    return Float32Array.from(tensor.floatData);
  }
}
