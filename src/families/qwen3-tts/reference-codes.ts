import ort from 'onnxruntime-node';
import { PromptError } from './prompt.js';

/** The reference clip's rate: the codec and speaker encoders take 24 kHz. */
const SAMPLE_RATE = 24_000;

/**
 * A reference clip's codes for in-context cloning, as upstream makes them
 * (Qwen3TTSTokenizerV2Model.encode): the whole clip through the encoder in
 * one pass — its causal convolutions and attention read back across the
 * clip, so pieces encoded apart get other codes — keeping ceil(samples ÷
 * 1920) frames, the length of its padding mask in frames: a tail shorter
 * than a frame still gets its frame. The clip is zero-padded to whole frames
 * first (what the encoder's own padding of the last frame reads), so a graph
 * that only makes whole frames' codes gives the tail's frame too.
 *
 * No limit of upstream's applies: the clip is held to the speech task's
 * MAX_REFERENCE_SECONDS (60 s, 750 frames, one pass of the encoder) before it
 * gets here. A graph traced at a fixed audio length takes a clip of up to
 * its whole frames in its one pass; a longer clip is refused (a 400 naming
 * ref_audio and the limit) rather than encoded in pieces that differ from
 * the reference. Without a transcript (x-vector cloning) no codes are made,
 * so no such limit applies.
 */
export async function encodeReferenceCodes(encoder: ort.InferenceSession, samples: Float32Array, groups: number, samplesPerFrame: number): Promise<Int32Array[]> {
  const input = encoder.inputNames[0]!;
  const meta = encoder.inputMetadata.find((m) => m.name === input);
  const shape = meta?.isTensor ? meta.shape : [1, 1, 'audio_length'];
  const last = shape[shape.length - 1];
  const fixed = typeof last === 'number' && last > 0 ? last : undefined;
  const wanted = Math.ceil(samples.length / samplesPerFrame);
  if (wanted === 0) throw new PromptError('ref_audio has no samples to encode.', 'ref_audio');
  const padded = wanted * samplesPerFrame;
  if (fixed !== undefined && padded > Math.floor(fixed / samplesPerFrame) * samplesPerFrame) {
    const most = Math.floor(fixed / samplesPerFrame) * samplesPerFrame;
    throw new PromptError(
      `ref_audio is ${(samples.length / SAMPLE_RATE).toFixed(2)} s; this model's reference encoder takes at most ${(most / SAMPLE_RATE).toFixed(2)} s in one pass with ref_text. ` +
        'Use a shorter clip, or leave out ref_text to clone from the voice alone.',
      'ref_audio',
    );
  }
  const length = fixed ?? padded;
  const data = new Float32Array(length);
  data.set(samples);
  const out = await encoder.run({ [input]: new ort.Tensor('float32', data, shape.length === 3 ? [1, 1, length] : [1, length]) });
  const codes = out[encoder.outputNames[0]!]!;
  const frames = splitFrames(codes.data as BigInt64Array | Int32Array, codes.dims, groups);
  if (frames.length < wanted) throw new Error(`tok_encoder made ${frames.length} frames of codes for ${wanted} frames of audio`);
  return frames.slice(0, wanted);
}

/** Frames of a codes output, [1, F, G] or [1, G, F]. */
export function splitFrames(data: BigInt64Array | Int32Array, dims: readonly number[], groups: number): Int32Array[] {
  const frames: Int32Array[] = [];
  const last = dims[dims.length - 1]!;
  const count = data.length / groups;
  const framesMajor = last === groups;
  for (let f = 0; f < count; f++) {
    const frame = new Int32Array(groups);
    for (let g = 0; g < groups; g++) frame[g] = Number(framesMajor ? data[f * groups + g]! : data[g * count + f]!);
    frames.push(frame);
  }
  return frames;
}
