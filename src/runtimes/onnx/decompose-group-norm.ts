import { attr, floatAttribute, input, intAttribute, type Decomposition, type Node, type NodeEmitter } from './graph-editor.js';

/**
 * ONNX Runtime's `com.microsoft` GroupNorm and SkipGroupNorm (contrib
 * operator schemas; kernels for CUDA, DirectML and WebGPU, none for the CPU):
 *
 *   GroupNorm(X, gamma, beta) → Y
 *     y = gamma · (x − mean) / √(variance + epsilon) + beta, mean and variance
 *     over each (batch, group of C/groups channels); then y · sigmoid(y) when
 *     activation = 1 (SiLU). X is NHWC when channels_last = 1 (the default),
 *     NCHW otherwise; gamma and beta are [C]; epsilon defaults to 1e-5.
 *   SkipGroupNorm(X, gamma, beta, skip, bias?) → Y, S?
 *     the same over s = x + skip (+ bias), where skip is (N, H, W, C),
 *     (N, 1, 1, C) or (N, C) (channels first: (N, C, H, W), (N, C, 1, 1),
 *     (N, C)) and bias [C]; S is s.
 *
 * Rewritten the way torch exports nn.GroupNorm: Reshape to [N, groups, −1],
 * InstanceNormalization with unit scale and zero bias, Reshape back, Mul by
 * gamma and Add beta per channel. An NHWC input is transposed to NCHW and the
 * result back: the optimiser that fused these nodes wrapped them in the
 * opposite transposes, and ONNX Runtime cancels the pairs.
 */

const channelsLast = (node: Node) => intAttribute(node, 'channels_last', 1) !== 0;

function refuseAttributes(node: Node): string | undefined {
  if (intAttribute(node, 'groups', 0) <= 0) return 'no groups attribute';
  const activation = intAttribute(node, 'activation', 0);
  return activation === 0 || activation === 1 ? undefined : `activation ${activation}`;
}

/** Group normalisation (and SiLU) of an NCHW value. */
function normaliseNchw(e: NodeEmitter, x: string): string {
  const node = e.origin;
  const gamma = node.input[1]!;
  const beta = node.input[2]!;
  const groups = intAttribute(node, 'groups', 0);
  const grouped = e.op('Reshape', [x, e.int64s([0, groups, -1])]);
  const scale = e.floats(new Array<number>(groups).fill(1));
  const shift = e.floats(new Array<number>(groups).fill(0));
  const normed = e.op('InstanceNormalization', [grouped, scale, shift], [attr.float('epsilon', floatAttribute(node, 'epsilon', 1e-5))]);
  const restored = e.op('Reshape', [normed, e.op('Shape', [x])]);
  const perChannel = e.int64s([-1, 1, 1]);
  let y = e.op('Add', [e.op('Mul', [restored, e.op('Reshape', [gamma, perChannel])]), e.op('Reshape', [beta, perChannel])]);
  if (intAttribute(node, 'activation', 0) === 1) y = e.op('Mul', [y, e.op('Sigmoid', [y])]);
  return y;
}

/** Group normalisation in the node's own layout. */
function normalise(e: NodeEmitter, x: string): string {
  if (!channelsLast(e.origin)) return normaliseNchw(e, x);
  const nchw = e.op('Transpose', [x], [attr.ints('perm', [0, 3, 1, 2])]);
  return e.op('Transpose', [normaliseNchw(e, nchw)], [attr.ints('perm', [0, 2, 3, 1])]);
}

export const groupNorm: Decomposition = {
  refuse: refuseAttributes,
  emit(e) {
    e.rename(normalise(e, e.origin.input[0]!), e.origin.output[0]!);
  },
};

export const skipGroupNorm: Decomposition = {
  refuse: refuseAttributes,
  emit(e) {
    const node = e.origin;
    const x = node.input[0]!;
    const bias = input(node, 4);
    const last = channelsLast(node);
    // Both addends flattened to [N, −1, C] (channels last) or [N, C, −1], so a
    // skip of (N, C) or (N, 1, 1, C) broadcasts over the pixels as the kernel's does.
    const channels = e.op('Shape', [node.input[1]!]);
    const axis0 = [attr.int('axis', 0)];
    const flat = last ? e.op('Concat', [e.int64s([0, -1]), channels], axis0) : e.op('Concat', [e.int64s([0]), channels, e.int64s([-1])], axis0);
    let sum = e.op('Add', [e.op('Reshape', [x, flat]), e.op('Reshape', [node.input[3]!, flat])]);
    if (bias) sum = e.op('Add', [sum, last ? bias : e.op('Reshape', [bias, e.int64s([-1, 1])])]);
    const s = e.op('Reshape', [sum, e.op('Shape', [x])]);
    e.rename(normalise(e, s), node.output[0]!);
    const sumOutput = node.output[1];
    if (sumOutput) e.rename(s, sumOutput);
  },
};
