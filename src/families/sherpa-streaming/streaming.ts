import { existsSync } from 'node:fs';
import type { Loader, LoadOptions } from '../../core/loader.js';
import type { StreamingRecognizer } from '../../core/tasks/transcribe/streaming.js';
import { ModelLoadError, ServerError } from '../../core/errors.js';
import type { InstalledModel } from '../../core/store.js';
import type { SherpaRecognizerConfig } from '../../runtimes/sherpa/protocol.js';
import { DEFAULT_MAX_STREAMS, SAMPLE_RATE, SherpaRecognizer, type RecognizerOptions } from '../../runtimes/sherpa/recognizer.js';
import { estimateSherpaMemory } from '../../runtimes/sherpa/supervisor.js';

export type { RecognitionResult, RecognizerStream, RecognizerStreamEvents, StreamState, StreamingRecognizer } from '../../core/tasks/transcribe/streaming.js';
export { DEFAULT_MAX_STREAMS, SAMPLE_RATE } from '../../runtimes/sherpa/recognizer.js';

/**
 * Streaming speech recognition (kind `asr-stream`, backend `onnx`) on
 * sherpa-onnx's OnlineRecognizer, run in a supervised child process (see
 * runtimes/sherpa: supervisor.ts and recognizer.ts for why and how).
 *
 * Model layouts, by the roles of the model's files:
 * - transducer (streaming Zipformer / Zipformer2, Conformer, LSTM exports of
 *   icefall): `encoder`, `decoder`, `joiner`, `tokens`;
 * - streaming Paraformer: `encoder`, `decoder`, `tokens` (greedy search only).
 *
 * Endpointing uses sherpa's three rules at its defaults: an endpoint after
 * 2.4 s of trailing silence even with nothing recognized (rule 1), after
 * 1.2 s of silence following speech (rule 2), and at 20 s of utterance
 * whatever the silence (rule 3). Each endpoint ends an utterance with a
 * final result.
 *
 * At most DEFAULT_MAX_STREAMS (16) streams are open at once per server,
 * across all streaming models: beyond it open() throws OverloadedError (503).
 */


export const ENDPOINT_RULES = { rule1MinTrailingSilence: 2.4, rule2MinTrailingSilence: 1.2, rule3MinUtteranceLength: 20 } as const;

/** The sherpa-onnx config for an installed model, from its file roles and catalog defaults. */
export function recognizerConfig(model: InstalledModel, threads: number): SherpaRecognizerConfig {
  const files = model.files;
  const need = (...roles: string[]) => {
    const missing = roles.filter((role) => !files[role]);
    if (missing.length) {
      throw new ModelLoadError(
        `Model '${model.id}' is not a streaming model sherpa-onnx can run: it has no ${missing.join(', ')} file (a transducer needs encoder, decoder, joiner and tokens; a streaming paraformer encoder, decoder and tokens).`,
      );
    }
    for (const role of roles) {
      if (!existsSync(files[role]!)) throw new ModelLoadError(`Model '${model.id}' could not be loaded: its ${role} file ${files[role]} is missing.`);
    }
  };
  const defaults = model.entry.defaults;
  const sampleRate = typeof defaults.sample_rate === 'number' ? defaults.sample_rate : SAMPLE_RATE;
  const featureDim = typeof defaults.feature_dim === 'number' ? defaults.feature_dim : 80;
  const decoding = defaults.decoding === 'modified_beam_search' ? 'modified_beam_search' : 'greedy_search';
  const base = { tokens: files.tokens!, numThreads: threads, provider: 'cpu' as const, debug: 0 as const };
  let modelConfig: SherpaRecognizerConfig['modelConfig'];
  if (files.joiner) {
    need('encoder', 'decoder', 'joiner', 'tokens');
    modelConfig = { ...base, transducer: { encoder: files.encoder!, decoder: files.decoder!, joiner: files.joiner } };
  } else {
    need('encoder', 'decoder', 'tokens');
    modelConfig = { ...base, paraformer: { encoder: files.encoder!, decoder: files.decoder! } };
  }
  return {
    featConfig: { sampleRate, featureDim },
    modelConfig,
    // sherpa-onnx's streaming paraformer decodes greedily only.
    decodingMethod: modelConfig.paraformer ? 'greedy_search' : decoding,
    ...(decoding === 'modified_beam_search' && !modelConfig.paraformer ? { maxActivePaths: 4 } : {}),
    enableEndpoint: true,
    ...ENDPOINT_RULES,
  };
}

export interface StreamingLoader extends Loader<StreamingRecognizer> {
  /** The recognizer process every model of this loader shares (started on first load). */
  readonly supervisor: SherpaRecognizer;
}

/** A loader with its own recognizer process (one per server: the default export below, or one per test). */
export function createStreamingLoader(options: RecognizerOptions = {}): StreamingLoader {
  const recognizer = new SherpaRecognizer({ maxStreams: DEFAULT_MAX_STREAMS, ...options });
  const estimateMemory = (model: InstalledModel) => estimateSherpaMemory(model.sizeBytes);
  return {
    supervisor: recognizer,
    async load(model: InstalledModel, loadOptions: LoadOptions): Promise<StreamingRecognizer> {
      const started = Date.now();
      // One thread per recognizer unless told otherwise: streams run side by side, and measured on 2 cores
      // (bench/asr.md) 1 thread sustained 24 real-time streams at 20/24 ms p50/p95 where 2 threads managed 8.
      const threads = loadOptions.threads > 0 ? loadOptions.threads : 1;
      const loaded = await recognizer.load(model.id, recognizerConfig(model, threads), loadOptions);
      loadOptions.log?.(`${model.id}: sherpa-onnx streaming recognizer loaded in ${Date.now() - started} ms (${threads} threads, process ${recognizer.pid})`);
      let disposed = false;
      return {
        sampleRate: SAMPLE_RATE,
        maxStreams: recognizer.maxStreams,
        memoryBytes: estimateMemory(model),
        open: () => {
          if (disposed) throw new ServerError(`Model '${model.id}' was unloaded; load it again.`);
          return recognizer.open(loaded);
        },
        dispose: async () => {
          if (disposed) return;
          disposed = true;
          recognizer.unload(loaded);
        },
      };
    },
    estimateMemory,
  };
}

export const streamingLoader: StreamingLoader = createStreamingLoader();
