/**
 * Messages between the server process (supervisor.ts) and the sherpa-onnx
 * child process (child.ts), over Node's IPC channel with `serialization:
 * 'advanced'` (V8's structured clone): audio travels as a Float32Array whose
 * bytes are copied once into the message, never as a JSON array of numbers.
 *
 * Models and streams are named by the parent: a model key (`m1`, `m2`…) per
 * loaded model, a stream id (a positive integer) per stream. The child
 * handles messages in order, so the parent may send `load`, `open` and
 * `audio` back to back without waiting for replies.
 */

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

export type ParentMessage =
  /** Create a recognizer; answered by `loaded`. */
  | { t: 'load'; key: string; config: SherpaRecognizerConfig }
  /** Drop a recognizer (its streams were closed first). */
  | { t: 'unload'; key: string }
  /** Create a stream on a loaded recognizer; an `error` for `sid` if it cannot. */
  | { t: 'open'; sid: number; key: string }
  /** Samples in [-1, 1] at `sampleRate` Hz. */
  | { t: 'audio'; sid: number; samples: Float32Array; sampleRate: number }
  /** No more audio: decode the rest, send the last final, then `end`. */
  | { t: 'finish'; sid: number; tailPaddingSeconds: number }
  /** Forget the stream now (no further messages for it). */
  | { t: 'close'; sid: number };

export type ChildMessage =
  /** sherpa-onnx-node is loaded; the child takes requests. */
  | { t: 'ready'; version: string }
  /** sherpa-onnx-node could not be loaded; the child exits after this. */
  | { t: 'fatal'; error: string }
  | { t: 'loaded'; key: string; ok: true }
  | { t: 'loaded'; key: string; ok: false; error: string }
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
