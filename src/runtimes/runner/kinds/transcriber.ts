import { JobQueue } from '../../../core/job-queue.js';
import type { LoadedModel } from '../../../core/loader.js';
import type { SpeechDetector, Transcriber, Transcription, TranscriptionOptions } from '../../../core/tasks/transcribe/transcriber.js';
import { Remote, RunnerClient, type ClientQueue } from '../client.js';
import type { MethodTable } from '../contract.js';
import type { RunnerProcess } from '../process.js';
import type { Loaded } from '../protocol.js';
import { assertModel, serve, type Served } from '../serving.js';

/** A speech recognition model's properties, read once after the load. */
type TranscriberProps = Pick<Transcriber, 'memoryBytes' | 'wordTimestamps'>;

/** The server's SpeechDetector for a Transcriber's voice activity detector in its runner. */
class SpeechDetectorRunnerClient implements SpeechDetector {
  constructor(private readonly remote: Remote<SpeechDetector>) {}

  probabilities(samples: Float32Array, signal?: AbortSignal): Promise<Float32Array> {
    return this.remote.call('probabilities', samples, signal);
  }
}

/** The server's Transcriber for a speech recognition model in a runner (Whisper on ONNX Runtime, with Silero VAD). */
export class TranscriberRunnerClient extends RunnerClient<Transcriber, TranscriberProps> implements Transcriber {
  readonly vad?: SpeechDetector;
  /** Transcriptions take turns here, in the server. */
  readonly queue: JobQueue;

  constructor(runner: RunnerProcess, loaded: Loaded, queue: ClientQueue) {
    super(runner, loaded);
    this.queue = new JobQueue(queue.maxWaiting, `Speech recognition model '${queue.model}'`);
    const vad = new Remote<SpeechDetector>(runner, loaded, 'vad');
    if (vad.has('probabilities')) this.vad = new SpeechDetectorRunnerClient(vad);
  }

  get wordTimestamps(): boolean {
    return this.props.wordTimestamps;
  }

  transcribe(samples: Float32Array, options: TranscriptionOptions, signal: AbortSignal): Promise<Transcription> {
    return this.remote.call('transcribe', samples, options, signal);
  }
}

/** The runner's side: the loaded model's properties and method, and its voice activity detector when it has one. */
export function serveTranscriber(model: LoadedModel): Served {
  assertModel<Transcriber>(model, 'a speech recognition model', ['transcribe']);
  const vad: MethodTable<SpeechDetector> | undefined = model.vad && { probabilities: model.vad.probabilities.bind(model.vad) };
  return serve<Transcriber, TranscriberProps>({
    props: { memoryBytes: model.memoryBytes, wordTimestamps: model.wordTimestamps },
    methods: { transcribe: model.transcribe.bind(model) },
    parts: { vad },
  });
}
