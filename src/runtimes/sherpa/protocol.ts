/**
 * Messages between the server process and a sherpa-onnx child process, over
 * Node's IPC channel with `serialization: 'advanced'` (V8's structured
 * clone): audio travels as a Float32Array whose bytes are copied once into
 * the message, never as a JSON array of numbers.
 *
 * Every child speaks the lifecycle part (process.ts, child.ts): `load` /
 * `unload` in, `ready`, `fatal` and `loaded` out. Each service adds its own
 * messages: the streaming recognizer (recognizer.ts, recognizer-child.ts) and
 * the speech synthesizer (synthesizer.ts, synthesizer-child.ts).
 *
 * Models, streams and syntheses are named by the parent: a model key (`m1`,
 * `m2`…) per loaded model, an id (a positive integer) per stream or
 * synthesis. A child handles messages in order, so the parent may send
 * `load` and the first request for that model back to back without waiting
 * for `loaded`.
 */

export type LifecycleParentMessage<Config> =
  /** Create a model; answered by `loaded`. */
  | { t: 'load'; key: string; config: Config }
  /** Drop a model (its requests were ended first). */
  | { t: 'unload'; key: string };

export type LifecycleChildMessage<Info> =
  /** sherpa-onnx-node is loaded; the child takes requests. */
  | { t: 'ready'; version: string }
  /** sherpa-onnx-node could not be loaded; the child exits after this. */
  | { t: 'fatal'; error: string }
  /** `info`: what the model reports about itself once loaded (the synthesizer's sample rate…). */
  | { t: 'loaded'; key: string; ok: true; info?: Info }
  | { t: 'loaded'; key: string; ok: false; error: string };

/** A service's own messages from its child: all but the lifecycle part, each about one job. */
export type ServiceMessage<ChildMessage> = Exclude<ChildMessage, { t: LifecycleChildMessage<unknown>['t'] }>;

/** A service's side of the protocol, as the supervisor (supervisor.ts, process.ts) is typed over it. */
export interface SherpaProtocol {
  /** What `load` carries. */
  config: unknown;
  /** What `loaded` reports. */
  info: unknown;
  /** The service's messages to the child, and the child's own. */
  parent: { t: string };
  child: { t: string };
}

// ---- streaming recognition ----

/** sherpa-onnx-node's OnlineRecognizer config (the subset lserve sets). */
export interface SherpaRecognizerConfig {
  featConfig: { sampleRate: number; featureDim: number };
  modelConfig: {
    transducer?: { encoder: string; decoder: string; joiner: string };
    paraformer?: { encoder: string; decoder: string };
    tokens: string;
    numThreads: number;
    provider: 'cpu';
    debug: 0 | 1;
  };
  decodingMethod: 'greedy_search' | 'modified_beam_search';
  maxActivePaths?: number;
  enableEndpoint: boolean;
  rule1MinTrailingSilence: number;
  rule2MinTrailingSilence: number;
  rule3MinUtteranceLength: number;
}

export type RecognizerParentMessage =
  | LifecycleParentMessage<SherpaRecognizerConfig>
  /** Create a stream on a loaded recognizer; an `error` for `sid` if it cannot. */
  | { t: 'open'; sid: number; key: string }
  /** Samples in [-1, 1] at `sampleRate` Hz. */
  | { t: 'audio'; sid: number; samples: Float32Array; sampleRate: number }
  /** No more audio: decode the rest, send the last final, then `end`. */
  | { t: 'finish'; sid: number; tailPaddingSeconds: number }
  /** Forget the stream now (no further messages for it). */
  | { t: 'close'; sid: number };

export type RecognizerChildMessage =
  | LifecycleChildMessage<never>
  /**
   * Recognition advanced: a partial whenever the text of the current
   * utterance changes, a final at each endpoint (text never empty) and one
   * last final after `finish` (text possibly empty). `segment` counts
   * utterances from 0.
   */
  | { t: 'result'; sid: number; text: string; isFinal: boolean; segment: number }
  /** All audio of a finished stream was decoded and its last final sent; the child forgot it. */
  | { t: 'end'; sid: number }
  /** The child has decoded every sample it received for `sid` up to `consumed` (a running total). */
  | { t: 'progress'; sid: number; consumed: number }
  /** A stream failed; the child forgot it. */
  | { t: 'error'; sid: number; error: string };

export interface RecognizerProtocol extends SherpaProtocol {
  config: SherpaRecognizerConfig;
  info: never;
  parent: RecognizerParentMessage;
  child: RecognizerChildMessage;
}

// ---- speech synthesis ----

/** sherpa-onnx-node's OfflineTts config (the subset lserve sets): a VITS (Piper) or a Kokoro model. */
export interface SherpaTtsConfig {
  model: {
    vits?: { model: string; tokens: string; dataDir?: string; lexicon?: string };
    kokoro?: { model: string; voices: string; tokens: string; dataDir?: string; lexicon?: string; lang?: string };
    numThreads: number;
    provider: 'cpu';
    debug: 0 | 1;
  };
  /** Sentences per generated block: 1 hands each sentence over as soon as it is synthesised. */
  maxNumSentences: number;
  /** sherpa's default 0.2 shortens long pauses inside a block to a fifth; 1 keeps the model's timing. */
  silenceScale: number;
}

/** What a synthesizer reports once loaded. */
export interface SherpaTtsInfo {
  sampleRate: number;
  numSpeakers: number;
}

export type SynthesizerParentMessage =
  | LifecycleParentMessage<SherpaTtsConfig>
  /** Synthesise `text`; answered by `audio` blocks, then `done` or `error`. Requests for one model run one at a time, in order. */
  | { t: 'synth'; id: number; key: string; text: string; sid: number; speed: number }
  /** Stop synthesis `id` at its next block (or before it starts); nothing more is sent for it. */
  | { t: 'abort'; id: number };

export type SynthesizerChildMessage =
  | LifecycleChildMessage<SherpaTtsInfo>
  /** One block of synthesis `id` (a sentence, as sherpa-onnx generates it): samples in [-1, 1] at the model's rate. */
  | { t: 'audio'; id: number; samples: Float32Array }
  /** Synthesis `id` is complete. */
  | { t: 'done'; id: number }
  /** Synthesis `id` failed; the child forgot it. */
  | { t: 'error'; id: number; error: string };

export interface SynthesizerProtocol extends SherpaProtocol {
  config: SherpaTtsConfig;
  info: SherpaTtsInfo;
  parent: SynthesizerParentMessage;
  child: SynthesizerChildMessage;
}
