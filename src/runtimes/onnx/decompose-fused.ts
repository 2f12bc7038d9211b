import { attr, input, intsAttribute, type Decomposition, type NodeEmitter } from './graph-editor.js';

/**
 * The other fused `com.microsoft` operators that diffusion exports optimised
 * for GPUs carry, as standard operators (definitions from ONNX Runtime's
 * contrib operator schemas and the optimiser that writes them,
 * onnxruntime/python/tools/transformers):
 *
 *   BiasSplitGelu(X [N, S, D], bias [D]) → [N, S, D/2]: h = x + bias split in
 *     halves on the last axis, left · gelu(right), gelu the exact erf form
 *     (diffusers' GEGLU).
 *   BiasAdd(X, bias [C], skip) → x + bias + skip.
 *   GemmFastGelu(X, W, bias?) → FastGelu(X·W, bias) (FastGelu runs on the CPU).
 *   NhwcConv(X NHWC, W [M, kH, kW, C/group], B?) → Conv's result in NHWC: the
 *     optimiser transposes both the input and the weights to channels last.
 *   MultiHeadAttention with packed QKV (query [B, S, N, 3, H], no key or
 *     value) or packed KV (key [B, L, N, 2, H], no value): the CPU kernel
 *     exists but refuses packed inputs when it runs, so they are unpacked
 *     into [B, S, N·H] query, key and value for the same operator.
 */

/** Exact GELU, x · ½(1 + erf(x/√2)), as torch exports nn.GELU(). */
function gelu(e: NodeEmitter, x: string): string {
  const erf = e.op('Erf', [e.op('Div', [x, e.floats([Math.SQRT2])])]);
  return e.op('Mul', [e.op('Mul', [x, e.op('Add', [erf, e.floats([1])])]), e.floats([0.5])]);
}

export const biasSplitGelu: Decomposition = {
  emit(e) {
    const [x, bias] = e.origin.input as [string, string];
    const h = e.op('Add', [x, bias]);
    const width = e.op('Shape', [bias]);
    const half = e.op('Div', [width, e.int64s([2])]);
    const lastAxis = e.int64s([-1]);
    const left = e.op('Slice', [h, e.int64s([0]), half, lastAxis]);
    const right = e.op('Slice', [h, half, width, lastAxis]);
    e.rename(e.op('Mul', [left, gelu(e, right)]), e.origin.output[0]!);
  },
};

export const biasAdd: Decomposition = {
  emit(e) {
    const [x, bias, skip] = e.origin.input as [string, string, string];
    e.rename(e.op('Add', [e.op('Add', [x, bias]), skip]), e.origin.output[0]!);
  },
};

export const gemmFastGelu: Decomposition = {
  emit(e) {
    const [x, w] = e.origin.input as [string, string];
    const bias = input(e.origin, 2);
    const product = e.op('MatMul', [x, w]);
    e.node('FastGelu', 'com.microsoft', bias ? [product, bias] : [product], [], [e.origin.output[0]!]);
  },
};

export const nhwcConv: Decomposition = {
  refuse(node) {
    const kernel = intsAttribute(node, 'kernel_shape');
    return kernel && kernel.length !== 2 ? `${kernel.length}-D kernel` : undefined;
  },
  emit(e) {
    const [x, w] = e.origin.input as [string, string];
    const bias = input(e.origin, 2);
    const toNchw = [attr.ints('perm', [0, 3, 1, 2])];
    const inputs = [e.op('Transpose', [x], toNchw), e.op('Transpose', [w], toNchw)];
    if (bias) inputs.push(bias);
    // Conv's own attributes (kernel_shape, pads, strides, dilations, group, auto_pad) carry over unchanged.
    const y = e.op('Conv', inputs, [...e.origin.attribute]);
    e.rename(e.op('Transpose', [y], [attr.ints('perm', [0, 2, 3, 1])]), e.origin.output[0]!);
  },
};

export const packedMultiHeadAttention: Decomposition = {
  needed: (node) => !input(node, 2),
  emit(e) {
    const node = e.origin;
    // One slice of the packed axis (3) as [B, S, N·H].
    const unpack = (packed: string, index: number) => e.op('Reshape', [e.op('Gather', [packed, e.int64s([index], true)], [attr.int('axis', 3)]), e.int64s([0, 0, -1])]);
    const key = input(node, 1);
    const [q, k, v] = key ? [node.input[0]!, unpack(key, 0), unpack(key, 1)] : [0, 1, 2].map((i) => unpack(node.input[0]!, i));
    e.node('MultiHeadAttention', 'com.microsoft', [q, k, v, ...node.input.slice(3)], [...node.attribute], [...node.output]);
  },
};
