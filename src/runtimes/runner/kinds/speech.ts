import { JobQueue } from '../../../core/job-queue.js';
import type { LoadedModel } from '../../../core/loader.js';
import type { SpeechModelInfo, SpeechRuntime, SynthesisRequest } from '../../../core/tasks/speak/synthesizer.js';
import { RunnerClient, type ClientQueue } from '../client.js';
import type { RunnerProcess } from '../process.js';
import type { Loaded } from '../protocol.js';
import { assertModel, serve, type Served } from '../serving.js';

/** A speech synthesis model's properties, read once after the load. */
type SpeechProps = Pick<SpeechRuntime, 'memoryBytes' | 'info'>;

/** The server's SpeechRuntime for a speech synthesis model in a runner (Qwen3-TTS on ONNX Runtime). */
export class SpeechRunnerClient extends RunnerClient<SpeechRuntime, SpeechProps> implements SpeechRuntime {
  /** Pieces of speech take turns here, in the server. */
  readonly queue: JobQueue;

  constructor(runner: RunnerProcess, loaded: Loaded, queue: ClientQueue) {
    super(runner, loaded);
    this.queue = new JobQueue(queue.maxWaiting, `Speech synthesis model '${queue.model}'`);
  }

  get info(): SpeechModelInfo {
    return this.props.info;
  }

  /** `onAudio` crosses as a callback: the runner calls it back with each block of samples as it is decoded. */
  synthesize(request: SynthesisRequest, onAudio: (samples: Float32Array) => void, signal: AbortSignal): Promise<{ frames: number }> {
    return this.remote.call('synthesize', request, onAudio, signal);
  }
}

/** The runner's side: the loaded model's voices and its synthesis. */
export function serveSpeech(model: LoadedModel): Served {
  assertModel<SpeechRuntime>(model, 'a speech synthesis model', ['synthesize']);
  return serve<SpeechRuntime, SpeechProps>({ props: { memoryBytes: model.memoryBytes, info: model.info }, methods: { synthesize: model.synthesize.bind(model) } });
}
