import { LogMel } from '../../src/audio/mel.js';
import { SileroVad } from '../../src/families/silero-vad/silero-vad.js';
import { OnnxWhisper } from '../../src/families/whisper/model.js';
import type { EncodedWindow, WhisperDecoder } from '../../src/families/whisper/decode.js';

/**
 * Times the pieces of lserve's Whisper path from outside, by wrapping the
 * prototypes' methods (the bench never edits src/): log-mel per window,
 * encoder run per window, the decoder's prompt step (`start`) and every
 * single-token step (`next`: one worker round trip, one row of logits back),
 * and the Silero VAD pass over the whole upload. Each wrapper measures the
 * wall time the caller waits, as decodeWindow sees it.
 */

export interface WhisperCounters {
  melMs: number[];
  encodeMs: number[];
  startMs: number[];
  /** Tokens in each prompt step. */
  startTokens: number[];
  stepMs: number[];
  vadMs: number[];
}

const empty = (): WhisperCounters => ({ melMs: [], encodeMs: [], startMs: [], startTokens: [], stepMs: [], vadMs: [] });
let counters = empty();
let installed = false;

async function timed<T>(into: number[], run: () => Promise<T>): Promise<T> {
  const start = performance.now();
  try {
    return await run();
  } finally {
    into.push(performance.now() - start);
  }
}

/** Installs the wrappers (once); returns a function that hands back the counters so far and starts afresh. */
export function instrumentWhisper(): () => WhisperCounters {
  if (!installed) {
    installed = true;
    const encode = OnnxWhisper.prototype.encode;
    OnnxWhisper.prototype.encode = function (this: OnnxWhisper, features: Float32Array): Promise<EncodedWindow> {
      return timed(counters.encodeMs, () => encode.call(this, features));
    };
    const decoder = OnnxWhisper.prototype.decoder;
    OnnxWhisper.prototype.decoder = function (this: OnnxWhisper, window: EncodedWindow): WhisperDecoder {
      const d = decoder.call(this, window);
      const start = d.start.bind(d);
      const next = d.next.bind(d);
      d.start = (tokens, rows) => {
        counters.startTokens.push(tokens.length);
        return timed(counters.startMs, () => start(tokens, rows));
      };
      d.next = (token) => timed(counters.stepMs, () => next(token));
      return d;
    };
    const compute = LogMel.prototype.compute;
    LogMel.prototype.compute = function (this: LogMel, ...args: Parameters<LogMel['compute']>) {
      return timed(counters.melMs, () => compute.apply(this, args));
    };
    const probabilities = SileroVad.prototype.probabilities;
    SileroVad.prototype.probabilities = function (this: SileroVad, audio: Float32Array) {
      return timed(counters.vadMs, () => probabilities.call(this, audio));
    };
  }
  return () => {
    const out = counters;
    counters = empty();
    return out;
  };
}
