/**
 * Which operators onnxruntime-node's CPU execution provider has kernels for.
 * Every standard ONNX operator (domains '' / ai.onnx and ai.onnx.ml) has one.
 * Of ONNX Runtime's own operators, only those listed below: the CPU kernel
 * registry of onnxruntime 1.30 (the version onnxruntime-node ships), read
 * from the registry ONNX Runtime exposes and confirmed for the operators
 * GPU-optimised diffusion and CLIP exports carry by creating a CPU session
 * for a one-node model of each (scripts/probe-cpu-ops.ts; rerun it after
 * upgrading onnxruntime-node). The probe also found kernels that exist but
 * refuse an input form when they run (MultiHeadAttention with packed QKV or
 * KV): those forms are the rewriter's business (cpu-rewrite.ts), not this table's.
 */

const CONTRIB_CPU_KERNELS = new Set([
  'Attention', 'AttnLSTM', 'BeamSearch', 'BiasGelu', 'BifurcationDetector', 'CDist', 'CausalConvWithState',
  'ConvTransposeWithDynamicPads', 'CropAndResize', 'DecoderMaskedMultiHeadAttention', 'DequantizeLinear',
  'DynamicQuantizeLSTM', 'DynamicQuantizeMatMul', 'DynamicTimeWarping', 'EmbedLayerNormalization', 'EngramGate',
  'ExpandDims', 'FastGelu', 'FusedConv', 'FusedGemm', 'FusedMatMul', 'GatedAdd', 'GatedRMSNorm',
  'GatherBlockQuantized', 'GatherND', 'Gelu', 'GreedySearch', 'GridSample', 'GroupQueryAttention', 'Inverse',
  'LinearAttention', 'LinearAttentionGate', 'MRotaryEmbedding', 'MatMulBnb4', 'MatMulFpQ4', 'MatMulInteger16',
  'MatMulIntegerToFloat', 'MatMulNBits', 'MaxpoolWithMask', 'MoE', 'MultiHeadAttention', 'MurmurHash3',
  'NGramHashMapping', 'NGramRepeatBlock', 'NhwcMaxPool', 'Pad', 'QAttention', 'QEmbedLayerNormalization', 'QGemm',
  'QLinearAdd', 'QLinearAveragePool', 'QLinearConcat', 'QLinearConv', 'QLinearGlobalAveragePool',
  'QLinearLeakyRelu', 'QLinearMul', 'QLinearSigmoid', 'QLinearSoftmax', 'QLinearWhere', 'QMoE', 'QuantizeLinear',
  'QuickGelu', 'Range', 'RotaryEmbedding', 'SampleOp', 'Sampling', 'SkipLayerNormalization',
  'SkipSimplifiedLayerNormalization', 'SparseAttention', 'SparseToDenseMatMul', 'Tokenizer', 'TransposeMatMul',
  'Trilu', 'UnfoldTensor', 'Unique', 'WhisperBeamSearch', 'WordConvEmbedding',
]);

/** ONNX Runtime's blocked-layout operators, which its own CPU optimiser writes into saved optimised graphs. */
const NCHWC_CPU_KERNELS = new Set(['AveragePool', 'Conv', 'GlobalAveragePool', 'GlobalMaxPool', 'MaxPool', 'ReorderInput', 'ReorderOutput', 'Upsample']);

/** The default domain, however a graph spells it. */
export function normalDomain(domain: string | null | undefined): string {
  return !domain || domain === 'ai.onnx' ? '' : domain;
}

export function runsOnCpu(domain: string | null | undefined, opType: string): boolean {
  switch (normalDomain(domain)) {
    case '':
    case 'ai.onnx.ml':
      return true;
    case 'com.microsoft':
      return CONTRIB_CPU_KERNELS.has(opType);
    case 'com.microsoft.nchwc':
      return NCHWC_CPU_KERNELS.has(opType);
    default:
      return false;
  }
}
