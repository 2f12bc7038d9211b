import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * What the runtime reads from the 12 Hz speech tokenizer's config
 * (`speech_tokenizer/config.json` in the Qwen3-TTS repositories:
 * Qwen3TTSTokenizerV2Config), with upstream's values where the file or a key
 * is missing (Qwen3TTSTokenizerV2DecoderConfig's defaults, which the released
 * checkpoints keep).
 */

export interface SpeechTokenizerConfigJson {
  encode_downsample_rate?: number;
  decode_upsample_rate?: number;
  decoder_config?: {
    sliding_window?: number;
    num_hidden_layers?: number;
    num_attention_heads?: number;
    num_key_value_heads?: number;
    rope_theta?: number;
    rms_norm_eps?: number;
    num_quantizers?: number;
    upsample_rates?: number[];
    upsampling_ratios?: number[];
  };
}

export interface CodecDecoderConfig {
  /** Frames each attention layer of the decoder's transformer sees, the query's own included. */
  slidingWindow: number;
  layers: number;
  heads: number;
  kvHeads: number;
  ropeTheta: number;
  rmsEps: number;
  /** Residual codebook groups (1 semantic + the acoustic ones). */
  quantizers: number;
  /** Strides of the decoder blocks (each a transposed convolution, then residual units). */
  upsampleRates: number[];
  /** Strides of the upsampling stages between the transformer and the decoder blocks. */
  upsamplingRatios: number[];
}

export interface CodecConfig {
  /** Audio samples the decoder makes per frame (decode_upsample_rate). */
  samplesPerFrame: number;
  /** Audio samples the encoder reads per frame of codes (encode_downsample_rate). */
  encoderSamplesPerFrame: number;
  decoder: CodecDecoderConfig;
}

const UPSTREAM_DECODER: CodecDecoderConfig = { slidingWindow: 72, layers: 8, heads: 16, kvHeads: 16, ropeTheta: 10_000, rmsEps: 1e-5, quantizers: 16, upsampleRates: [8, 5, 4, 3], upsamplingRatios: [2, 2] };

/** speech_tokenizer/config.json: its role, else where the Qwen repositories keep it beside config.json. */
function speechTokenizerConfigFile(files: Record<string, string>): string | undefined {
  if (files.speech_tokenizer_config) return files.speech_tokenizer_config;
  const guess = files.config && path.join(path.dirname(files.config), 'speech_tokenizer', 'config.json');
  return guess && existsSync(guess) ? guess : undefined;
}

/** The codec config of a model's files (upstream's values without a speech tokenizer config). */
export async function readCodecConfig(files: Record<string, string>): Promise<CodecConfig> {
  const file = speechTokenizerConfigFile(files);
  let json: SpeechTokenizerConfigJson = {};
  if (file) {
    try {
      json = JSON.parse(await readFile(file, 'utf8')) as SpeechTokenizerConfigJson;
    } catch (error) {
      throw new Error(`cannot read ${path.basename(file)}: ${(error as Error).message}`);
    }
  }
  return parseCodecConfig(json);
}

const product = (values: number[]) => values.reduce((a, b) => a * b, 1);

export function parseCodecConfig(json: SpeechTokenizerConfigJson = {}): CodecConfig {
  const d = json.decoder_config ?? {};
  const decoder: CodecDecoderConfig = {
    slidingWindow: d.sliding_window ?? UPSTREAM_DECODER.slidingWindow,
    layers: d.num_hidden_layers ?? UPSTREAM_DECODER.layers,
    heads: d.num_attention_heads ?? UPSTREAM_DECODER.heads,
    kvHeads: d.num_key_value_heads ?? d.num_attention_heads ?? UPSTREAM_DECODER.kvHeads,
    ropeTheta: d.rope_theta ?? UPSTREAM_DECODER.ropeTheta,
    rmsEps: d.rms_norm_eps ?? UPSTREAM_DECODER.rmsEps,
    quantizers: d.num_quantizers ?? UPSTREAM_DECODER.quantizers,
    upsampleRates: d.upsample_rates ?? UPSTREAM_DECODER.upsampleRates,
    upsamplingRatios: d.upsampling_ratios ?? UPSTREAM_DECODER.upsamplingRatios,
  };
  const strides = product([...decoder.upsampleRates, ...decoder.upsamplingRatios]);
  const samplesPerFrame = json.decode_upsample_rate ?? strides;
  if (samplesPerFrame !== strides) throw new Error(`speech tokenizer config: decode_upsample_rate ${samplesPerFrame} is not the product of the decoder's strides (${strides})`);
  return { samplesPerFrame, encoderSamplesPerFrame: json.encode_downsample_rate ?? samplesPerFrame, decoder };
}

// The decoder's fixed geometry (Qwen3TTSTokenizerV2Decoder): kernel sizes are not in the config.
const PRE_CONV_KERNEL = 3;
const CONVNEXT_KERNEL = 7;
const DECODER_KERNEL = 7;
const RESIDUAL_DILATIONS = [1, 3, 9];

/**
 * Frames of history a frame's audio depends on: how far left the decoder
 * reads, so that a block decoded with this many frames before it gives the
 * samples a decode of everything would. Every layer is causal: the frame-rate
 * part reaches back through its causal k3 convolution (2 frames) and each
 * sliding-window attention layer (window − 1 frames, stacked); the
 * sample-rate part through its causal convolutions (kernel − 1 positions
 * times dilation, at the rate where they run) and transposed convolutions
 * (one input back when the kernel is longer than the stride). The sample-rate
 * part reaches a fraction of a frame per layer; rounded up to whole frames.
 * For the released decoder: 2 + 8 × 71 + 10 = 580 frames.
 */
export function decoderLookBack(decoder: CodecDecoderConfig): number {
  const frameRate = PRE_CONV_KERNEL - 1 + decoder.layers * (decoder.slidingWindow - 1);
  let rate = 1; // positions per frame where the next layer runs
  let samples = 0; // look-back in frames, fractional
  const causal = (kernel: number, dilation = 1) => (samples += ((kernel - 1) * dilation) / rate);
  const transposed = (kernel: number, stride: number) => {
    samples += Math.floor((kernel - 1) / stride) / rate;
    rate *= stride;
  };
  for (const ratio of decoder.upsamplingRatios) {
    transposed(ratio, ratio);
    causal(CONVNEXT_KERNEL);
  }
  causal(DECODER_KERNEL);
  for (const stride of decoder.upsampleRates) {
    transposed(2 * stride, stride);
    for (const dilation of RESIDUAL_DILATIONS) causal(DECODER_KERNEL, dilation);
  }
  causal(DECODER_KERNEL);
  // Floating sums of exact fractions: a hair above a whole number must not round up.
  return frameRate + Math.ceil(samples - 1e-9);
}
