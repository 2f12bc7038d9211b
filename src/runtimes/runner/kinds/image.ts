import { JobQueue } from '../../../core/job-queue.js';
import type { LoadedModel } from '../../../core/loader.js';
import { isImagePipeline, type GeneratedImage, type ImageJob, type ImagePipeline, type LatentDecoderModel } from '../../../core/tasks/image/image-pipeline.js';
import { RunnerClient, type ClientQueue } from '../client.js';
import type { RunnerProcess } from '../process.js';
import type { Loaded } from '../protocol.js';
import { assertModel, serve, type Served } from '../serving.js';
import { CROSSES_AS, type CrossesAs } from '../wire.js';

/**
 * An image model is one of two things: a pipeline that generates images
 * (Stable Diffusion), or a stand-alone latent decoder (TAESD) that a
 * request hands to a pipeline in place of its own VAE decoder. The runner
 * reports which methods the loaded model has; the server's client is the
 * one of them it is.
 */

/** An image pipeline's properties, read once after the load. */
type ImagePipelineProps = Pick<ImagePipeline, 'memoryBytes' | 'canEncode'>;

/** A latent decoder's properties, read once after the load. */
type LatentDecoderProps = Pick<LatentDecoderModel, 'memoryBytes'>;

/** The server's ImagePipeline for an image model in a runner (Stable Diffusion on ONNX Runtime). */
export class ImagePipelineRunnerClient extends RunnerClient<ImagePipeline, ImagePipelineProps> implements ImagePipeline {
  /** Generations take turns here, in the server. */
  readonly queue: JobQueue;

  constructor(runner: RunnerProcess, loaded: Loaded, queue: ClientQueue) {
    super(runner, loaded);
    this.queue = new JobQueue(queue.maxWaiting, `Image model '${queue.model}'`);
  }

  get canEncode(): boolean {
    return this.props.canEncode;
  }

  /** The job's functions (progress, log) cross as callbacks, its signal as the call's, and its decoder as what CROSSES_AS makes of it. */
  generate(job: ImageJob): Promise<{ images: GeneratedImage[]; revisedPrompt?: string }> {
    return this.remote.call('generate', job);
  }
}

/**
 * The server's LatentDecoderModel for a latent decoder in a runner. Handed
 * to a pipeline in another runner (ImageJob.decoder), it crosses as its
 * size and its decode method, which calls back to the server and from
 * there into this runner; the pipeline may decode with it, never dispose of it.
 */
export class LatentDecoderRunnerClient extends RunnerClient<LatentDecoderModel, LatentDecoderProps> implements LatentDecoderModel, CrossesAs {
  decode(scaledLatents: Float32Array, height: number, width: number): Promise<Float32Array> {
    return this.remote.call('decode', scaledLatents, height, width);
  }

  [CROSSES_AS](): Pick<LatentDecoderModel, 'memoryBytes' | 'decode'> {
    return { memoryBytes: this.memoryBytes, decode: (scaledLatents, height, width) => this.decode(scaledLatents, height, width) };
  }
}

/** The client for what the runner loaded: a pipeline when it generates, else a latent decoder. */
export function imageRunnerClient(runner: RunnerProcess, loaded: Loaded, queue: ClientQueue): ImagePipelineRunnerClient | LatentDecoderRunnerClient {
  return loaded.methods.includes('generate') ? new ImagePipelineRunnerClient(runner, loaded, queue) : new LatentDecoderRunnerClient(runner, loaded);
}

/** The runner's side: a pipeline's properties and generation, or a latent decoder's decode. */
export function serveImage(model: LoadedModel): Served {
  if (isImagePipeline(model)) {
    return serve<ImagePipeline, ImagePipelineProps>({ props: { memoryBytes: model.memoryBytes, canEncode: model.canEncode }, methods: { generate: model.generate.bind(model) } });
  }
  assertModel<LatentDecoderModel>(model, 'an image pipeline or a latent decoder', ['decode']);
  return serve<LatentDecoderModel, LatentDecoderProps>({ props: { memoryBytes: model.memoryBytes }, methods: { decode: model.decode.bind(model) } });
}
