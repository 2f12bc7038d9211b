import { concatFloats } from '../../runtimes/onnx/float-io.js';
import type { OnnxSession, Tensor } from '../../runtimes/onnx/session.js';
import type { LazySession } from '../../runtimes/onnx/lazy-session.js';
import type { ClipTokenizer } from './clip-tokenizer.js';
import type { ImageJob, ImagePipeline, LatentDecoderModel } from '../../core/tasks/image/image-pipeline.js';
import type { JobQueue } from '../../core/job-queue.js';
import { generate, type DiffusionGraphs, type DiffusionInfo, type TextStates } from './sample.js';
import { asFloats, floatTensor, floatTypeOf, timestepTensor, type FloatType } from './tensors.js';
import { checkTiling, decodeTiled, DEFAULT_TILING, type Tiling } from './tiled-decode.js';

/**
 * A loaded Stable-Diffusion-family model: the four ONNX graphs (each in its
 * own ORT worker thread; the VAE encoder opened at the first request that
 * starts from an image), the CLIP tokenizer and the scheduler settings, and
 * the model's job queue. It offers the graph calls one step at a time; the
 * sampling loop (scheduler, guidance, masks) is sample.ts's (DiffusionGraphs),
 * so cancellation and progress happen between steps.
 */

export type { DiffusionInfo, TextStates } from './sample.js';

export interface DiffusionSessions {
  textEncoder: OnnxSession;
  unet: OnnxSession;
  vaeDecoder: OnnxSession;
  /** Opened at the first img2img or edit (txt2img never needs its weights); absent when the export has none. */
  vaeEncoder?: LazySession;
}

export interface DiffusionOptions {
  /** Latents larger than a tile on either side decode in overlapping tiles (tiled-decode.ts); default DEFAULT_TILING. */
  tiling?: Tiling;
}

let keptCounter = 0;

export class DiffusionPipeline implements DiffusionGraphs, ImagePipeline {
  private readonly unetIn: { sample: FloatType; context: FloatType; timestep: string };
  private readonly textOut: string;
  private readonly decoderIo: { input: string; output: string; type: FloatType };
  private encoderIo?: { input: string; output: string; type: FloatType };
  readonly tiling: Tiling;

  constructor(
    readonly sessions: DiffusionSessions,
    readonly tokenizer: ClipTokenizer,
    readonly info: DiffusionInfo,
    readonly queue: JobQueue,
    readonly memoryBytes: number,
    /** The export's scheduler_config.json as read (the image task interprets it); undefined when it ships none. */
    readonly schedulerConfig: unknown,
    options: DiffusionOptions = {},
  ) {
    this.tiling = options.tiling ?? DEFAULT_TILING;
    checkTiling(this.tiling);
    const { unet, textEncoder, vaeDecoder } = sessions;
    for (const name of ['sample', 'timestep', 'encoder_hidden_states']) {
      if (!unet.inputNames.includes(name)) throw new Error(`${unet.path}: the UNet has no input '${name}' (inputs: ${unet.inputNames.join(', ')})`);
    }
    this.unetIn = { sample: floatTypeOf(unet, 'sample'), context: floatTypeOf(unet, 'encoder_hidden_states'), timestep: unet.describe('timestep')?.type ?? 'int64' };
    this.textOut = textEncoder.outputNames.includes('last_hidden_state') ? 'last_hidden_state' : textEncoder.outputName;
    this.decoderIo = { input: vaeDecoder.inputName, output: vaeDecoder.outputNames.includes('sample') ? 'sample' : vaeDecoder.outputName, type: floatTypeOf(vaeDecoder, vaeDecoder.inputName) };
  }

  get canEncode(): boolean {
    return this.info.canEncode;
  }

  /** The sampling loop (sample.ts) over this model's graphs. */
  generate(job: ImageJob): ReturnType<ImagePipeline['generate']> {
    return generate(this, job);
  }

  /**
   * Runs the text encoder on each row of token ids (unconditional first when
   * guiding) and keeps the states in the UNet's worker for the steps to come.
   */
  async encodeText(rows: readonly Int32Array[]): Promise<TextStates> {
    const { textEncoder, unet } = this.sessions;
    const states: Float32Array[] = [];
    let width = 0;
    let length = 0;
    for (const ids of rows) {
      // One row per run: exports fix the text encoder's batch at 1 more often than not.
      const out = await textEncoder.runWith({ [textEncoder.inputName]: this.idsTensor(ids) }, { fetch: [this.textOut] });
      const tensor = out[this.textOut]!;
      [, length = 0, width = 0] = tensor.dims;
      states.push(asFloats(tensor, 'text encoder'));
    }
    const joined = concatFloats(states);
    const key = `text:${keptCounter++}`;
    let sent = false;
    const context = () => {
      if (sent) return { kept: key };
      sent = true;
      return floatTensor(this.unetIn.context, joined, [rows.length, length, width]);
    };
    const handle: TextStates & { context: typeof context; key: string } = {
      batch: rows.length,
      length,
      context,
      key,
      release: () => unet.dropKept(key),
    };
    return handle;
  }

  private idsTensor(ids: Int32Array): Tensor {
    const { textEncoder } = this.sessions;
    const type = textEncoder.describe(textEncoder.inputName)?.type ?? 'int32';
    if (type === 'int64') return { type: 'int64', data: BigInt64Array.from(ids, (v) => BigInt(v)), dims: [1, ids.length] };
    if (type !== 'int32') throw new Error(`${textEncoder.path}: input_ids of type ${type} are not supported`);
    return { type: 'int32', data: ids.slice(), dims: [1, ids.length] };
  }

  /**
   * The UNet's prediction for `sample` [batch, C, h, w] (already scaled to the
   * model's input) at `timestep`, under the kept text states.
   */
  async predict(sample: Float32Array, dims: readonly number[], timestep: number, states: TextStates): Promise<Float32Array> {
    const { unet } = this.sessions;
    const handle = states as TextStates & { context: () => Tensor | { kept: string }; key: string };
    const context = handle.context();
    const out = await unet.runWith(
      {
        sample: floatTensor(this.unetIn.sample, sample, dims),
        timestep: timestepTensor(this.unetIn.timestep, timestep),
        encoder_hidden_states: context,
      },
      { fetch: [unet.outputName], keepInputs: 'kept' in context ? {} : { encoder_hidden_states: handle.key } },
    );
    return asFloats(out[unet.outputName], 'UNet');
  }

  /**
   * Pixels [3, H, W] in about [-1, 1] from unscaled latents [C, h, w]
   * (whose buffer may be handed to the decoder's worker): whole when they
   * fit one tile, else tile by tile (tiled-decode.ts), `signal` checked
   * between tiles.
   */
  decode(latents: Float32Array, height: number, width: number, signal?: AbortSignal): Promise<Float32Array> {
    const grid = { channels: this.info.latentChannels, height, width, factor: this.info.vaeFactor };
    return decodeTiled(latents, grid, this.tiling, (tile, h, w) => this.decodeWhole(tile, h, w), signal);
  }

  private async decodeWhole(latents: Float32Array, height: number, width: number): Promise<Float32Array> {
    const { vaeDecoder } = this.sessions;
    const { input, output, type } = this.decoderIo;
    const out = await vaeDecoder.runWith({ [input]: floatTensor(type, latents, [1, this.info.latentChannels, height, width]) }, { fetch: [output] });
    return asFloats(out[output], 'VAE decoder');
  }

  /** Unscaled latents [C, h, w] (the posterior mean) of pixels [3, H, W] in [-1, 1]. */
  async encode(pixels: Float32Array, height: number, width: number): Promise<Float32Array> {
    if (!this.sessions.vaeEncoder) throw new Error('this model has no VAE encoder');
    const vaeEncoder = await this.sessions.vaeEncoder.get();
    this.encoderIo ??= { input: vaeEncoder.inputName, output: vaeEncoder.outputName, type: floatTypeOf(vaeEncoder, vaeEncoder.inputName) };
    const { input, output, type } = this.encoderIo;
    const out = await vaeEncoder.runWith({ [input]: floatTensor(type, pixels, [1, 3, height, width]) }, { fetch: [output] });
    const tensor = out[output]!;
    const values = asFloats(tensor, 'VAE encoder');
    const channels = tensor.dims[1] ?? 0;
    const c = this.info.latentChannels;
    // Exports give the mean (c channels) or the posterior's parameters (mean then log-variance, 2c): keep the mean.
    if (channels === c) return values;
    if (channels === 2 * c) return values.subarray(0, values.length / 2);
    throw new Error(`VAE encoder output has ${channels} channels; expected ${c} or ${2 * c}`);
  }

  async dispose(): Promise<void> {
    const { textEncoder, unet, vaeDecoder, vaeEncoder } = this.sessions;
    await Promise.all([textEncoder.release(), unet.release(), vaeDecoder.release(), vaeEncoder?.release()]);
  }
}

/**
 * A stand-alone VAE decoder (a tiny one, TAESD-class) used in place of a
 * model's own: it takes the UNet's latents as they are (its scaling factor
 * is 1) and returns pixels in [-1, 1].
 */
export class LatentDecoder implements LatentDecoderModel {
  private readonly type: FloatType;
  private readonly output: string;

  constructor(
    readonly session: OnnxSession,
    readonly latentChannels: number,
    readonly memoryBytes: number,
  ) {
    this.type = floatTypeOf(session, session.inputName);
    this.output = session.outputNames.includes('sample') ? 'sample' : session.outputName;
  }

  async decode(scaledLatents: Float32Array, height: number, width: number): Promise<Float32Array> {
    const out = await this.session.runWith({ [this.session.inputName]: floatTensor(this.type, scaledLatents, [1, this.latentChannels, height, width]) }, { fetch: [this.output] });
    return asFloats(out[this.output], 'tiny VAE decoder');
  }

  async dispose(): Promise<void> {
    await this.session.release();
  }
}
