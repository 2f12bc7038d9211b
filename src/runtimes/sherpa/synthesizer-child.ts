import { messageOf, serveSherpaChild } from './child.js';
import type { SherpaTtsConfig, SynthesizerParentMessage, SynthesizerProtocol } from './protocol.js';
import type { OfflineTts } from './sherpa-onnx.js';

/**
 * The speech synthesizer's child process (child.ts for what every child does,
 * synthesizer.ts for the server's side): sherpa-onnx OfflineTts models by
 * key, syntheses by id.
 *
 * Models load with OfflineTts.createAsync and synthesise with generateAsync:
 * both run on libuv's thread pool, so this process's event loop stays free
 * for `abort` messages and for the blocks of other models' syntheses. With
 * maxNumSentences 1, sherpa-onnx generates one sentence at a time and calls
 * onProgress with each; the block is sent on at once. Returning 0 from
 * onProgress is sherpa-onnx's cancellation: its generator checks the answer
 * before the next sentence, so an `abort` stops a synthesis at the next
 * sentence boundary (a sentence being synthesised runs to its end).
 *
 * Requests for one model run one at a time, in arrival order (a synthesis
 * already uses every thread the model was given); different models run side
 * by side.
 */

interface Model {
  ready: Promise<OfflineTts>;
  config: SherpaTtsConfig;
  /** The model's last synthesis: the next one runs after it. */
  tail: Promise<void>;
}

interface Job {
  aborted: boolean;
}

type Synth = Extract<SynthesizerParentMessage, { t: 'synth' }>;

serveSherpaChild<SynthesizerProtocol, Model>('synthesizer', (sherpa, send, modelFor) => {
  const jobs = new Map<number, Job>();

  async function run(model: Model, msg: Synth, job: Job): Promise<void> {
    try {
      if (job.aborted) return;
      const tts = await model.ready;
      if (job.aborted) return;
      await tts.generateAsync({
        text: msg.text,
        generationConfig: { sid: msg.sid, speed: msg.speed, silenceScale: model.config.silenceScale },
        onProgress: ({ samples }) => {
          if (job.aborted) return 0;
          if (samples.length > 0) send({ t: 'audio', id: msg.id, samples });
          return 1;
        },
      });
      if (!job.aborted) send({ t: 'done', id: msg.id });
    } catch (error) {
      if (job.aborted) return;
      // Text without a single pronounceable token (e.g. only punctuation) makes
      // sherpa-onnx produce nothing and reject with this message: that is silence, not a failure.
      if (messageOf(error) === 'TTS generation produced no audio') send({ t: 'done', id: msg.id });
      else send({ t: 'error', id: msg.id, error: messageOf(error) });
    } finally {
      jobs.delete(msg.id);
    }
  }

  return {
    create(config) {
      const model: Model = { ready: sherpa.OfflineTts.createAsync(config), config, tail: Promise.resolve() };
      return { model, ready: model.ready.then((tts) => ({ sampleRate: tts.sampleRate, numSpeakers: tts.numSpeakers })) };
    },
    failed(msg, error) {
      jobs.delete(msg.id);
      send({ t: 'error', id: msg.id, error: messageOf(error) });
    },
    handle(msg) {
      switch (msg.t) {
        case 'synth': {
          const model = modelFor(msg.key);
          const job: Job = { aborted: false };
          jobs.set(msg.id, job);
          model.tail = model.tail.then(() => run(model, msg, job));
          return;
        }
        case 'abort': {
          const job = jobs.get(msg.id);
          if (job) job.aborted = true;
          jobs.delete(msg.id);
          return;
        }
      }
    },
  };
});
