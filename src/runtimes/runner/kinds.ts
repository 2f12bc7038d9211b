import type { ModelKind } from '../../core/catalog.js';
import type { LoadedModel } from '../../core/loader.js';
import type { ChatModel } from '../../core/tasks/chat.js';
import type { EmbeddingModel } from '../../core/tasks/embed.js';
import type { ImagePipeline, LatentDecoderModel } from '../../core/tasks/image/image-pipeline.js';
import type { OcrModel } from '../../core/tasks/ocr.js';
import type { RankingModel } from '../../core/tasks/rerank.js';
import type { SpeechRuntime } from '../../core/tasks/speak/synthesizer.js';
import type { Transcriber } from '../../core/tasks/transcribe/transcriber.js';
import type { ClientQueue } from './client.js';
import type { RunnerKind } from './contract.js';
import { ChatRunnerClient, serveChat } from './kinds/chat.js';
import { EmbeddingRunnerClient, serveEmbedding } from './kinds/embedding.js';
import { imageRunnerClient, serveImage } from './kinds/image.js';
import { OcrRunnerClient, serveOcr } from './kinds/ocr.js';
import { RankingRunnerClient, serveRanking } from './kinds/rerank.js';
import { serveSpeech, SpeechRunnerClient } from './kinds/speech.js';
import { serveTranscriber, TranscriberRunnerClient } from './kinds/transcriber.js';
import type { RunnerProcess } from './process.js';
import type { Loaded } from './protocol.js';
import type { Served } from './serving.js';

export type { RunnerKind } from './contract.js';

/** The task interface a model of each runner kind implements (core/tasks). */
export interface RunnerKindModels {
  chat: ChatModel;
  embedding: EmbeddingModel;
  rerank: RankingModel;
  ocr: OcrModel;
  asr: Transcriber;
  tts: SpeechRuntime;
  image: ImagePipeline | LatentDecoderModel;
}

/** Both ends of a kind: the server's client, and what the runner serves of the loaded model. */
export interface RunnerKindEnds<M extends LoadedModel> {
  /** The server's handle on the model the runner loaded (`queue`: the server's line for kinds whose jobs take turns). */
  client(runner: RunnerProcess, loaded: Loaded, queue: ClientQueue): M;
  /** In the runner: the loaded model's methods and properties, as its kind's interface has them. */
  serve(model: LoadedModel): Served;
}

/**
 * Every kind whose models run in runners, with its two ends (kinds/<kind>.ts).
 * The streaming recognizers and sherpa voices run in sherpa-onnx's own
 * supervised processes instead (compose.ts keeps them in the server).
 */
export const RUNNER_KINDS: { [K in RunnerKind]: RunnerKindEnds<RunnerKindModels[K]> } = {
  chat: { client: (runner, loaded) => new ChatRunnerClient(runner, loaded), serve: serveChat },
  embedding: { client: (runner, loaded) => new EmbeddingRunnerClient(runner, loaded), serve: serveEmbedding },
  rerank: { client: (runner, loaded) => new RankingRunnerClient(runner, loaded), serve: serveRanking },
  ocr: { client: (runner, loaded) => new OcrRunnerClient(runner, loaded), serve: serveOcr },
  asr: { client: (runner, loaded, queue) => new TranscriberRunnerClient(runner, loaded, queue), serve: serveTranscriber },
  tts: { client: (runner, loaded, queue) => new SpeechRunnerClient(runner, loaded, queue), serve: serveSpeech },
  image: { client: imageRunnerClient, serve: serveImage },
};

export function isRunnerKind(kind: ModelKind): kind is RunnerKind {
  return Object.hasOwn(RUNNER_KINDS, kind);
}
