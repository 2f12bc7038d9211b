import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { DataType, intAttr, node, onnx, type OnnxTypes } from '../../test/fixtures/onnx/build.js';

/**
 * Dynamic int8 quantization of an ONNX graph's weight MatMuls, as
 * onnxruntime's `quantize_dynamic` (the tool behind the hub's
 * `*_int8.onnx` / `*_quantized.onnx` Whisper exports) writes it: each
 * `MatMul(x, W)` whose W is a 2-D float initializer becomes
 * DynamicQuantizeLinear(x) → MatMulInteger(x_q, W_q, x_zero) → Cast → Mul by
 * x_scale · W_scale (W per-tensor symmetric int8). A `Gemm(x, W, transB=1)`
 * over a 2-D initializer (the decoder's tied logits projection) gets the
 * same with W transposed. Nodes inside `If` branches are rewritten too (the
 * merged decoder's two branches); new initializers go in the main graph.
 * The bench uses it to measure what an int8 decoder step costs, not to ship.
 */

type Graph = OnnxTypes.IGraphProto;

function floatsOf(t: OnnxTypes.ITensorProto): Float32Array {
  if (t.rawData && t.rawData.length) return new Float32Array(new Uint8Array(t.rawData).buffer);
  return Float32Array.from(t.floatData ?? []);
}

export function quantizeMatMuls(bytes: Uint8Array): { bytes: Uint8Array; quantized: number } {
  const model = onnx.ModelProto.decode(bytes);
  const main = model.graph!;
  const initializers = new Map<string, OnnxTypes.ITensorProto>();
  for (const t of main.initializer ?? []) initializers.set(t.name!, t);
  const added = new Map<string, { name: string; scale: string }>();
  let quantized = 0;
  let counter = 0;

  /** The int8 copy of a weight ([in, out] for MatMul; transposed for Gemm transB), made once. */
  const weight = (name: string, transpose: boolean): { name: string; scale: string } | undefined => {
    const key = `${name}:${transpose}`;
    const done = added.get(key);
    if (done) return done;
    const t = initializers.get(name);
    if (!t || t.dataType !== DataType.FLOAT || t.dims?.length !== 2) return undefined;
    const [rows, cols] = t.dims.map(Number) as [number, number];
    const values = floatsOf(t);
    let max = 0;
    for (const v of values) max = Math.max(max, Math.abs(v));
    const scale = max / 127 || 1;
    const out = new Int8Array(values.length);
    if (transpose) for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = Math.round(values[r * cols + c]! / scale);
    else for (let i = 0; i < values.length; i++) out[i] = Math.round(values[i]! / scale);
    const q = { name: `${name}_int8${transpose ? 'T' : ''}`, scale: `${name}_int8_scale` };
    main.initializer!.push({ name: q.name, dims: transpose ? [cols, rows] : [rows, cols], dataType: DataType.INT8, rawData: new Uint8Array(out.buffer) });
    main.initializer!.push({ name: q.scale, dims: [], dataType: DataType.FLOAT, floatData: [scale] });
    added.set(key, q);
    return q;
  };

  const rewrite = (graph: Graph): void => {
    const nodes: OnnxTypes.INodeProto[] = [];
    for (const n of graph.node ?? []) {
      for (const a of n.attribute ?? []) if (a.g) rewrite(a.g);
      const transB = n.attribute?.find((a) => a.name === 'transB')?.i;
      const isGemm = n.opType === 'Gemm' && Number(transB ?? 0) === 1 && (n.input?.length ?? 0) === 2 && !n.attribute?.some((a) => (a.name === 'alpha' || a.name === 'beta') && a.f !== 1);
      const w = n.opType === 'MatMul' ? weight(n.input![1]!, false) : isGemm ? weight(n.input![1]!, true) : undefined;
      if (!w) {
        nodes.push(n);
        continue;
      }
      const p = `dq${counter++}`;
      nodes.push(
        node('DynamicQuantizeLinear', [n.input![0]!], [`${p}_q`, `${p}_s`, `${p}_z`]),
        node('MatMulInteger', [`${p}_q`, w.name, `${p}_z`], [`${p}_i`]),
        node('Cast', [`${p}_i`], [`${p}_f`], [intAttr('to', DataType.FLOAT)]),
        node('Mul', [`${p}_s`, w.scale], [`${p}_scale`]),
        node('Mul', [`${p}_f`, `${p}_scale`], [n.output![0]!]),
      );
      quantized++;
    }
    graph.node = nodes;
  };
  rewrite(main);
  // Drop float weights no longer read by any node (the tied embedding stays: the token lookup Gathers it).
  const used = new Set<string>();
  const collect = (graph: Graph) => {
    for (const n of graph.node ?? []) {
      for (const i of n.input ?? []) used.add(i);
      for (const a of n.attribute ?? []) if (a.g) collect(a.g);
    }
  };
  collect(main);
  main.initializer = main.initializer!.filter((t) => used.has(t.name!));
  return { bytes: onnx.ModelProto.encode(model).finish(), quantized };
}

/** `input` with its weight MatMuls in int8, written once to `output`. */
export function writeQuantized(input: string, output: string): string {
  if (existsSync(output)) return output;
  const { bytes } = quantizeMatMuls(readFileSync(input));
  writeFileSync(`${output}.${process.pid}.tmp`, bytes);
  renameSync(`${output}.${process.pid}.tmp`, output);
  return output;
}
