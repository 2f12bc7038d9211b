import type { ModelKind } from '../../core/catalog.js';
import type { ChatModel } from '../../core/tasks/chat.js';
import type { EmbeddingModel } from '../../core/tasks/embed.js';
import type { ImagePipeline, LatentDecoderModel } from '../../core/tasks/image/image-pipeline.js';
import type { OcrModel } from '../../core/tasks/ocr.js';
import type { RankingModel } from '../../core/tasks/rerank.js';
import type { SpeechRuntime } from '../../core/tasks/speak/synthesizer.js';
import type { SpeechDetector, Transcriber } from '../../core/tasks/transcribe/transcriber.js';

/**
 * What the server sees of a model in a runner, per kind: the task
 * interface of core/tasks, spelled out so that a proxy can stand in for it.
 *
 * - `props`: read once, after the load (the model's fixed facts);
 * - `live`: read again after every call event and sent when changed (a
 *   queue depth);
 * - `calls` return a promise, `streams` an async iterable: crossing the
 *   channel makes every method asynchronous, so the interfaces have none
 *   that are not;
 * - `parts`: nested objects with methods of their own (a Transcriber's
 *   voice activity detector), present or not;
 * - `queue`: the model's job queue (one job at a time, a bounded line) is
 *   kept in the server, where the tasks run it: its label in 503 messages.
 *
 * A kind served by several interfaces lists them all (an image model is a
 * pipeline or a latent decoder); the runner reports which methods the loaded
 * model really has, and the proxy has only those.
 */
export interface Surface {
  props?: readonly string[];
  live?: readonly string[];
  calls?: readonly string[];
  streams?: readonly string[];
  parts?: Readonly<Record<string, readonly string[]>>;
  queue?: string;
}

/** A surface whose names are checked against the interface `M`. */
interface SurfaceOf<M> extends Surface {
  props?: ReadonlyArray<keyof M & string>;
  live?: ReadonlyArray<keyof M & string>;
  calls?: ReadonlyArray<keyof M & string>;
  streams?: ReadonlyArray<keyof M & string>;
}

const of = <M>(surface: SurfaceOf<M>): Surface => surface;

const imagePipeline = of<ImagePipeline>({ props: ['canEncode'], calls: ['generate'], queue: 'Image model' });
const latentDecoder = of<LatentDecoderModel>({ calls: ['decode'] });

/** The kinds whose models run in runners (the streaming recognizers and sherpa voices run in sherpa-onnx's own supervised processes). */
export const SURFACES: Partial<Record<ModelKind, Surface>> = {
  chat: of<ChatModel>({ live: ['queued', 'contextSize', 'memoryBytes'], calls: ['prefill', 'hold', 'resume', 'countTokens', 'tokenCounts'], streams: ['generate'] }),
  embedding: of<EmbeddingModel>({ props: ['dimensions', 'maxInputTokens', 'vocabularySize'], calls: ['tokenize', 'evaluatedLengths', 'embed'] }),
  rerank: of<RankingModel>({ props: ['maxInputTokens'], calls: ['tokenize', 'pairLengths', 'score'] }),
  ocr: of<OcrModel>({ calls: ['read'] }),
  asr: of<Transcriber>({ props: ['wordTimestamps'], calls: ['transcribe'], parts: { vad: ['probabilities'] satisfies ReadonlyArray<keyof SpeechDetector> }, queue: 'Speech recognition model' }),
  tts: of<SpeechRuntime>({ props: ['info'], calls: ['synthesize'], queue: 'Speech synthesis model' }),
  image: { ...imagePipeline, calls: [...imagePipeline.calls!, ...latentDecoder.calls!] },
};
