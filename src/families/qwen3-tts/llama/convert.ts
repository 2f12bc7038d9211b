import { TensorType, ValueType, writeGgufFile, type Metadata, type MetadataValue, type TensorSpec } from '../../../runtimes/llama/gguf-write.js';
import { graphWeights, UnpreparableGraph, type LayerWeights, type PredictorWeights, type Tensor } from '../prepared/predictor-weights.js';
import type { onnx as OnnxTypes } from 'onnx-proto';
import { linearShape, linearTensor, normTensor, zeroTable, type GgufTensor } from './gguf-tensors.js';

/**
 * The talker and the code predictor of a Qwen3-TTS export as GGUF files of
 * llama.cpp's `qwen3` architecture, converted from the ONNX graphs' weights
 * (found by module name, as the prepared predictor's are). Both are Qwen3
 * decoders (GQA, per-head q/k RMSNorm, SwiGLU, NEOX RoPE); the talker's
 * M-RoPE is a plain RoPE here because its three position rows are equal for
 * speech. They are fed input embeddings, never tokens, so the token table
 * is zeros and the vocabulary is the output's size alone (no tokenizer):
 * - talker: the output is codec_head (3072 codes);
 * - code predictor: the output is its first head (2048 codes), and all 15
 *   heads go in a second file (head.0 … head.14) that lserve's embedding
 *   decoder scores one of per step (step g: head g − 1), so that a step
 *   computes its own head, not all of them.
 * Its inputs (the talker state, projected where the 1.7B models project it,
 * and the codes' embeddings) are computed outside (predictor-front.ts).
 */

export interface DecoderDims {
  layers: number;
  width: number;
  vocab: number;
  /** ggml types of the linear layers, for the load line ("Q4_0"). */
  types: string[];
}

export interface DecoderNorms {
  ropeTheta: number;
  eps: number;
  contextLength: number;
}

interface Decoder {
  name: string;
  layers: LayerWeights[];
  norm: Tensor;
  output: GgufTensor;
}

/** Writes the talker of `model` (talker_cache) as GGUF. */
export async function convertTalker(model: OnnxTypes.IModelProto, file: string, norms: DecoderNorms): Promise<DecoderDims> {
  const weights = graphWeights(model);
  const decoder = { name: 'Qwen3-TTS talker', layers: weights.layers(), norm: weights.tensor('model.norm.weight'), output: linearTensor(weights.linearAt('codec_head.weight').linear) };
  return writeDecoder(file, decoder, norms);
}

/** Writes the code predictor (its weights, readPredictorWeights) as GGUF, its first head the model's output, and all its heads to `headsFile`. */
export async function convertPredictor(weights: PredictorWeights, file: string, headsFile: string, norms: DecoderNorms): Promise<DecoderDims> {
  const heads = weights.heads.map(linearTensor);
  if (heads.some((h) => h.dims.join() !== heads[0]!.dims.join())) throw new UnpreparableGraph('the code predictor heads differ in shape');
  const specs = heads.map((h, g): TensorSpec => ({ name: `head.${g}`, dims: h.dims, type: h.type }));
  await writeGgufFile(headsFile, new Map([['general.name', { type: ValueType.STRING, value: 'Qwen3-TTS code predictor heads' }]]), specs, (spec) => heads[Number(spec.name.slice(5))]!.bytes());
  return writeDecoder(file, { name: 'Qwen3-TTS code predictor', layers: weights.layers, norm: weights.norm, output: heads[0]! }, norms);
}

async function writeDecoder(file: string, decoder: Decoder, norms: DecoderNorms): Promise<DecoderDims> {
  const first = decoder.layers[0]!;
  const { K: width, N: qWidth } = linearShape(first.q);
  const headDim = normTensor(first.qNorm).dims[0]!;
  const kvWidth = linearShape(first.k).N;
  const ff = linearShape(first.gate).N;
  const vocab = decoder.output.dims[1]!;
  if (qWidth % headDim || kvWidth % headDim) throw new UnpreparableGraph(`attention widths ${qWidth} and ${kvWidth} are not whole heads of ${headDim}`);

  const tensors = new Map<string, GgufTensor>();
  tensors.set('token_embd.weight', zeroTable(width, vocab));
  tensors.set('output_norm.weight', normTensor(decoder.norm));
  tensors.set('output.weight', decoder.output);
  decoder.layers.forEach((layer, i) => {
    const blk = (name: string) => `blk.${i}.${name}.weight`;
    tensors.set(blk('attn_norm'), normTensor(layer.inputNorm));
    tensors.set(blk('attn_q'), linearTensor(layer.q));
    tensors.set(blk('attn_k'), linearTensor(layer.k));
    tensors.set(blk('attn_v'), linearTensor(layer.v));
    tensors.set(blk('attn_output'), linearTensor(layer.o));
    tensors.set(blk('attn_q_norm'), normTensor(layer.qNorm));
    tensors.set(blk('attn_k_norm'), normTensor(layer.kNorm));
    tensors.set(blk('ffn_norm'), normTensor(layer.postNorm));
    tensors.set(blk('ffn_gate'), linearTensor(layer.gate));
    tensors.set(blk('ffn_up'), linearTensor(layer.up));
    tensors.set(blk('ffn_down'), linearTensor(layer.down));
  });

  const u32 = (value: number) => ({ type: ValueType.UINT32, value }) as const;
  const f32 = (value: number) => ({ type: ValueType.FLOAT32, value }) as const;
  const text = (value: string) => ({ type: ValueType.STRING, value }) as const;
  const metadata: Metadata = new Map<string, MetadataValue>([
    ['general.architecture', text('qwen3')],
    ['general.name', text(decoder.name)],
    ['qwen3.block_count', u32(decoder.layers.length)],
    ['qwen3.context_length', u32(norms.contextLength)],
    ['qwen3.embedding_length', u32(width)],
    ['qwen3.feed_forward_length', u32(ff)],
    ['qwen3.attention.head_count', u32(qWidth / headDim)],
    ['qwen3.attention.head_count_kv', u32(kvWidth / headDim)],
    ['qwen3.attention.key_length', u32(headDim)],
    ['qwen3.attention.value_length', u32(headDim)],
    ['qwen3.attention.layer_norm_rms_epsilon', f32(norms.eps)],
    ['qwen3.rope.freq_base', f32(norms.ropeTheta)],
    ['qwen3.vocab_size', u32(vocab)],
    // No tokenizer: the decoder is fed embeddings.
    ['tokenizer.ggml.model', text('none')],
  ]);
  const specs: TensorSpec[] = [...tensors].map(([name, t]) => ({ name, dims: t.dims, type: t.type }));
  await writeGgufFile(file, metadata, specs, (spec) => tensors.get(spec.name)!.bytes());
  const types = [...new Set(specs.filter((s) => s.dims.length === 2 && s.name !== 'token_embd.weight').map((s) => TensorType[s.type]))];
  return { layers: decoder.layers.length, width, vocab, types };
}
